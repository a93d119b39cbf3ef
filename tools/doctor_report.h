// doctor_report.h: what tpcomm-doctor prints, as a function of a machine probe, so tests can
// feed fixture probes (tools/fixtures/*.json) and check the words: device list, link matrix
// with verified P2P and measured numbers, usable transports and algorithms and why not, the
// algorithm per size 1 KB .. 1 GB from the real selector, env params in force, and an exit code
// (2 when a P2P check failed or the check process failed).
#pragma once

#include <string>
#include <vector>

#include "topology/machine_probe.h"
#include "topology/probe.h"

namespace tpcomm {

struct DoctorReport {
  std::string text;                   ///< human-readable report
  std::string json;                   ///< --json
  std::vector<std::string> problems;  ///< one line each, with the remedy
  int exitCode = 0;                   ///< 0 fine (or no GPU), 2 something broken
};

/// Builds the report. `src` may be default (e.g. a fixture). `gpus`: the probe GPUs that form
/// the communicator whose selection is shown (empty: all).
DoctorReport buildDoctorReport(const MachineProbe& m, const ProbeSource& src, const std::vector<int>& gpus = {});

/// `--params`: every parameter, its default, the value in force (the default where the set value
/// is rejected) and help; beside a rejected value, "REJECTED" and why. `rejectedCount` (optional)
/// gets how many were rejected.
std::string paramsTable(int* rejectedCount = nullptr);
/// Every rejected environment value (params.h's paramProblems(), then TPCOMM_ALGO's parser),
/// one line each naming the variable, the value and what is accepted. Empty: none.
std::vector<std::string> rejectedValues();

}  // namespace tpcomm
