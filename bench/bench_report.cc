// bench_report: the nccl-tests-format table of allreduce_perf (see bench_report.h).
#include "bench_report.h"

#include <cstdint>
#include <cmath>
#include <cstdio>

namespace tpcomm_bench {

int64_t Table::wrongTotal() const {
  int64_t w = 0;
  for (const Row& r : rows) {
    if (r.outOfPlace.wrong > 0) w += r.outOfPlace.wrong;
    if (r.inPlace.wrong > 0) w += r.inPlace.wrong;
  }
  return w;
}

double Table::avgBusBw() const {
  double sum = 0;
  int n = 0;
  for (const Row& r : rows) {
    sum += r.outOfPlace.busBw + r.inPlace.busBw;
    n += 2;
  }
  return n ? sum / n : 0;
}

double busBwFactor(int nRanks) { return nRanks > 0 ? 2.0 * (nRanks - 1) / nRanks : 0; }

std::string fixedWidth(double v, int width) {
  char buf[64];
  // Digits before the decimal point.
  int digits = v >= 1 ? static_cast<int>(std::floor(std::log10(v))) + 1 : 1;
  if (digits <= width - 3) std::snprintf(buf, sizeof(buf), "%*.2f", width, v);
  else if (digits <= width - 2) std::snprintf(buf, sizeof(buf), "%*.1f", width, v);
  else if (digits <= width) std::snprintf(buf, sizeof(buf), "%*.0f", width, v);
  else std::snprintf(buf, sizeof(buf), "%*.1e", width, v);
  return buf;
}

void printTableHeader(bool accuracy) {
  std::printf("#\n");
  std::printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "", "",
              "", "", "");
  std::printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s  %s%s\n", "size", "count", "type",
              "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong", "algo",
              accuracy ? "  maxabs  rmsrel (out-of-place, vs the fp64 sum)" : "");
  std::printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s  %s\n", "(B)", "(elements)", "", "",
              "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", "");
  std::fflush(stdout);
}

static void printResult(const Result& r) {
  std::string wrong = r.wrong < 0 ? "   N/A" : std::to_string(r.wrong);
  std::printf("  %7s  %6s  %6s  %6s", fixedWidth(r.timeUs, 7).c_str(), fixedWidth(r.algBw, 6).c_str(),
              fixedWidth(r.busBw, 6).c_str(), wrong.c_str());
}

void printRow(const Row& row) {
  std::printf("%12zu  %12zu  %8s  %6s  %6d", row.bytes, row.count, row.type.c_str(), row.redop.c_str(), -1);
  printResult(row.outOfPlace);
  printResult(row.inPlace);
  std::string algo = row.outOfPlace.algo;
  if (row.inPlace.algo != row.outOfPlace.algo) algo += "/" + row.inPlace.algo;
  std::printf("  %s", algo.c_str());
  if (row.outOfPlace.maxAbsErr >= 0 || std::isnan(row.outOfPlace.maxAbsErr))
    std::printf("  %.3e  %.3e", row.outOfPlace.maxAbsErr, row.outOfPlace.rmsRelErr);
  std::printf("\n");
  std::fflush(stdout);
}

void printTableFooter(const Table& t) {
  int64_t wrong = t.wrongTotal();
  std::printf("# %-20s : %lld %s\n", "Out of bounds values", static_cast<long long>(wrong), wrong ? "FAILED" : "OK");
  std::printf("# %-20s : %g \n", "Avg bus bandwidth", t.avgBusBw());
  std::printf("#\n");
  std::fflush(stdout);
}

}  // namespace tpcomm_bench
