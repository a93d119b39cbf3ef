// bench_controller: the body of allreduce_perf that every controller (process, thread, or the
// one thread of -g mode) runs: buffers, reference bandwidths, one table per -A value, the
// performance lines, and --json. Only the controller that drives rank 0 prints.
#pragma once

#include <string>
#include <vector>

#include "bench_args.h"
#include "tpcomm/bootstrap.h"

namespace tpcomm_bench {

struct RunInfo {
  const Args* args = nullptr;
  std::vector<std::string> argv;  ///< for --json
  int nRanks = 1;
  std::string mode;              ///< e.g. "mpirun, 4 processes, one rank each"
  bool gpu = false;              ///< GPU ranks (else host ranks)
  std::string notes;             ///< extra header lines ("# ...\n"), e.g. environment defaults set
};

/// Runs the benchmark on this controller's ranks: global ranks firstRank.. firstRank +
/// devices.size() - 1 driving `devices` (-1 entries: host ranks). `bootstrap` joins the
/// controllers. Returns the process exit status contribution: 0 when every row ran and no
/// element was wrong.
int runController(const RunInfo& info, tpcomm::Bootstrap* bootstrap, int firstRank, const std::vector<int>& devices);

}  // namespace tpcomm_bench
