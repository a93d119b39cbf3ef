// bench_vs_best: allreduce_perf --vs-best, the check of the measured selection's target "after tpcomm-doctor
// --tune, auto is within 3% of the best single algorithm at every size". Per row of the -A auto
// table: auto's out-of-place time, the fastest out-of-place time of the forced tables (-A <name>)
// at the same size, type and op, counted only where that algorithm itself ran the row (a forced
// name that declined a size falls back to another, and that is not its time), and auto / best.
// -A nccl is not a candidate: auto can pick ring_nccl, not NCCL outside tpcomm.
#pragma once

#include <string>
#include <vector>

#include "bench_report.h"

namespace tpcomm_bench {

struct VsBestRow {
  size_t bytes = 0;
  std::string type, redop;
  double autoUs = 0;
  std::string autoAlgo;
  double bestUs = 0;  ///< 0: no forced algorithm ran this row
  std::string bestAlgo;
  double ratio = 0;  ///< autoUs / bestUs (0 when there is no best)
};

/// The rows, in the auto table's order; empty without an "auto" table.
std::vector<VsBestRow> compareWithBest(const std::vector<Table>& tables);

/// What printVsBest counted.
struct VsBestSummary {
  int compared = 0;  ///< rows some forced algorithm ran
  int within = 0;    ///< of those, rows with auto / best <= 1 + tolerance
  int sameAlgo = 0;  ///< of those, rows where auto ran the fastest forced algorithm itself
};

/// Prints them as '#' lines (nccl-tests parsers skip them), then the count of rows within
/// `tolerance` (0.03: 3%), the worst ratio, and how often auto ran the fastest algorithm.
VsBestSummary printVsBest(const std::vector<VsBestRow>& rows, double tolerance);

}  // namespace tpcomm_bench
