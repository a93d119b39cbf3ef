// bench_report: allreduce_perf's output. The table is nccl-tests' all_reduce_perf table, column
// for column (size count type redop root | time algbw busbw #wrong, out-of-place then in-place,
// same widths), so scripts written for nccl-tests parse it; tpcomm adds one trailing column,
// "algo", naming the algorithm that ran (Communicator::lastAlgorithm(), or "nccl"). The same
// rows go to --json.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tpcomm_bench {

struct Result {
  double timeUs = 0;
  double algBw = 0;  ///< GB/s = bytes / time
  double busBw = 0;  ///< algBw * 2(n-1)/n
  int64_t wrong = -1;  ///< -1: not checked (printed N/A)
  double maxAbsErr = -1, rmsRelErr = -1;  ///< --compression: accuracy (< 0: not measured)
  std::string algo;
};

struct Row {
  size_t bytes = 0;
  size_t count = 0;
  std::string type, redop;
  Result outOfPlace, inPlace;
};

/// One table: one -A selection over every size.
struct Table {
  std::string algo;  ///< the -A value
  std::vector<Row> rows;
  int64_t wrongTotal() const;
  double avgBusBw() const;  ///< mean over every printed busbw (both columns), as nccl-tests
};

/// Column header lines (the two-line nccl-tests header plus units).
/// With `accuracy` (--compression), two more columns after algo: maxabs and rmsrel (out-of-place).
void printTableHeader(bool accuracy = false);
/// One row; flushes stdout.
void printRow(const Row& row);
/// "# Out of bounds values : N OK|FAILED" and "# Avg bus bandwidth : X".
void printTableFooter(const Table& t);

/// busbw factor for all-reduce over n ranks: 2(n-1)/n.
double busBwFactor(int nRanks);

/// Formats like nccl-tests: fixed width, fewer decimals as the value grows.
std::string fixedWidth(double v, int width);

}  // namespace tpcomm_bench
