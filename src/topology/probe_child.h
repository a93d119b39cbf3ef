// probe_child.h: running the GPU probe in a child process with a time limit, and reading its
// report. A P2P check can hang the process that runs it (a peer write that never completes);
// only a separate process can be killed cleanly, so the checks run in `tpcomm-doctor
// --probe-child` (posix_spawn, own process group, CUDA_VISIBLE_DEVICES removed so it sees every
// GPU). The child reports line by line on stdout, flushing each:
//   tpcomm-probe-child 1
//   facts <MachineProbe JSON, one line>
//   begin <a> <b> kernel|copy|measure         before each step
//   result <a> <b> kernel|copy <ok|corrupt|cuda_error> <detail...>
//   measure <a> <b> <ce GB/s> <sm GB/s> <rtt us>
//   done
// so when it is killed at the limit the last "begin" names the step that hung.
#pragma once

#include <string>
#include <vector>

#include "topology/machine_probe.h"

namespace tpcomm {

/// What a child run produced.
struct ChildRun {
  bool started = false;
  std::string startError;        ///< why it could not be started
  std::vector<std::string> lines;  ///< stdout, split into lines
  std::string stderrTail;        ///< last ~2 KB of stderr
  bool timedOut = false;         ///< killed (with its process group) at the limit
  int exitCode = -1;             ///< when it exited
  int signal = 0;                ///< when a signal ended it
  double elapsedMs = 0;
};

/// Runs argv[0] (a path) with argv, the current environment minus `unsetEnv`, stdout and stderr
/// captured, killed with its whole process group after `timeoutMs`.
ChildRun runChild(const std::vector<std::string>& argv, const std::vector<std::string>& unsetEnv, int timeoutMs);

/// Builds the MachineProbe from a child's report. A step begun without a result is marked kHang
/// (when the child timed out) or kCudaError (when it crashed); later steps stay kNotRun, and
/// checkError says how the child ended. kOk unless there was no usable facts line (then
/// out->checkError / gpuError explain and the caller falls back).
Status assembleChildReport(const ChildRun& run, int timeoutMs, MachineProbe* out);

/// The probe helper binary: TPCOMM_TOPO_HELPER, this process when it is tpcomm-doctor, or
/// tpcomm-doctor beside / under libtpcomm (./, tools/, ../bin/, ../libexec/tpcomm/). "" if none.
std::string findProbeHelper();

}  // namespace tpcomm
