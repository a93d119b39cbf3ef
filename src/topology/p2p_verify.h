// p2p_verify.h: the GPU side of the probe. collectFacts() enumerates the GPUs (CUDA), reads their
// sysfs and NVML facts and the driver's per-pair answers (can-access-peer, performance rank,
// native atomics). verifyPair() checks by data that a -> b peer writes arrive: a kernel on a
// stores a pattern into b's memory through the peer mapping and b checks it locally; then the
// same through the copy engine (cudaMemcpyPeer). measurePair() times one-way bandwidth and a
// flag round trip. These run in the probe child (probeChildMain, normally `tpcomm-doctor
// --probe-child`) so that a hang is bounded by killing the process; probeMachineInProcess() is
// the fallback when no helper binary is found.
#pragma once

#include <string>

#include "topology/machine_probe.h"

namespace tpcomm {

struct ProbeOptions {
  std::string sysfsRoot = "/";  ///< root of sys/ and proc/ (tests: a fixture tree)
  bool measure = false;         ///< also measure bandwidth and latency per pair
  const char* nvmlLibrary = nullptr;  ///< default libnvidia-ml.so.1
};

/// Fills everything but the data checks. With no usable GPU, m->gpuError says why and gpus is
/// empty (kOk: "no GPU" is an answer, not an error).
Status collectFacts(const ProbeOptions& opts, MachineProbe* m);
/// Data-verifies a -> b through `stage` ("kernel" or "copy"); sets the pair's check result.
void verifyPair(const MachineProbe& m, int a, int b, const char* stage, PairFacts* p);
/// Measures a -> b: copy-engine and SM-store one-way GB/s, flag round trip (needs peer access
/// both ways for the round trip).
void measurePair(const MachineProbe& m, int a, int b, PairFacts* p);
/// Every step in this process, without a time bound (fallback when no helper exists). Peer
/// access this function enabled is disabled again before it returns.
Status probeMachineInProcess(const ProbeOptions& opts, MachineProbe* m);

/// Entry point of the probe child: writes the line protocol (probe_child.h) to stdout.
/// argv: [--sysfs-root DIR] [--measure]. Returns the process exit code.
int probeChildMain(int argc, char** argv);

}  // namespace tpcomm
