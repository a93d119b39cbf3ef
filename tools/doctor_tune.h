// doctor_tune.h: `tpcomm-doctor --tune`. For each rank count, ranks as threads of this process
// (GPU i for rank i, or host ranks; with TPCOMM_ALLOW_SHARED_DEVICE=1 more ranks than GPUs may
// share them, rank i on GPU i % GPUs) bring up one communicator per algorithm the topology allows,
// each forced to it (Config::algo), and time a warm eager all-reduce (sum) of every size of the
// sweep in bf16 and f32: warm-up calls, then the median of several batches, a batch's time being
// its slowest rank's. A size's row holds every algorithm that ran it; the run stops at a time
// budget between rows, so a row is never half measured. The tables go to the tuning file
// (collectives/tuning_file.h) that Communicator::create reads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tpcomm {

struct TuneOptions {
  std::vector<int> rankCounts;       ///< empty: GPUs 2, 4, 8 and all visible ones; host ranks 2
  bool hostRanks = false;            ///< device -1 ranks (also when this machine has no GPU)
  uint64_t minBytes = 8;             ///< sweep from here...
  uint64_t maxBytes = 256ull << 20;  ///< ...to here (GPU default; host ranks 16 MiB)
  int stepFactor = 4;                ///< x2 or x4 (any factor >= 2)
  int warmup = 3;                    ///< eager calls before timing
  int repeats = 5;                   ///< timed batches; the median is kept
  double budgetSeconds = 300;        ///< the whole run, creates included
};

/// Parses the value of a --tune-* option into `opts`. false + `error` naming the option and
/// what was expected.
bool parseTuneOption(const std::string& name, const std::string& value, TuneOptions* opts, std::string* error);

/// Runs the sweep, prints the measured tables to stdout, writes tuningFilePath(topoCacheDir())
/// (keeping the tables of other topologies from a current file). Returns the doctor's exit
/// code: 0 written (or one GPU: nothing to choose), 1 usage, 2 nothing measured or written.
int runTune(TuneOptions opts);

}  // namespace tpcomm
