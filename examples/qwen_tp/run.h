// run.h: the two back ends of the qwen_tp command line (main.cc picks one by --device).
#pragma once

#include "cli.h"

namespace qwen {

/// --device cpu: the fp32 CPU reference (cpu_model), f.tp ranks as threads with tpcomm host
/// communicators. Returns the process exit code.
int runOnCpu(const RunSetup& s);

/// --device cuda: the GPU decoder (run_gpu.cc; only in CUDA builds). Returns the exit code.
int runOnGpu(RunSetup& s, int argc, char** argv);

}  // namespace qwen
