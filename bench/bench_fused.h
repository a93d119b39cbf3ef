// bench_fused: allreduce_perf --fused-rmsnorm, the decoder-layer epilogue benchmark (see
// bench_fused.cc).
#pragma once

#include <vector>

#include "bench_controller.h"
#include "tpcomm/bootstrap.h"

namespace tpcomm_bench {

/// runController's twin for --fused-rmsnorm (same arguments, same exit-status meaning).
int runFusedController(const RunInfo& info, tpcomm::Bootstrap* bootstrap, int firstRank, const std::vector<int>& devices);

}  // namespace tpcomm_bench
