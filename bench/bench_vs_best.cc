// bench_vs_best: see bench_vs_best.h.
#include "bench_vs_best.h"

#include <cstdio>

namespace tpcomm_bench {

std::vector<VsBestRow> compareWithBest(const std::vector<Table>& tables) {
  std::vector<VsBestRow> out;
  const Table* autoTable = nullptr;
  for (const Table& t : tables)
    if (t.algo == "auto") autoTable = &t;
  if (!autoTable) return out;
  for (const Row& a : autoTable->rows) {
    VsBestRow v;
    v.bytes = a.bytes;
    v.type = a.type;
    v.redop = a.redop;
    v.autoUs = a.outOfPlace.timeUs;
    v.autoAlgo = a.outOfPlace.algo;
    for (const Table& t : tables) {
      if (t.algo == "auto" || t.algo == "nccl") continue;
      for (const Row& r : t.rows) {
        if (r.bytes != a.bytes || r.type != a.type || r.redop != a.redop) continue;
        // Only where the forced algorithm ran the row itself.
        if (r.outOfPlace.algo != t.algo || !(r.outOfPlace.timeUs > 0)) continue;
        if (v.bestUs == 0 || r.outOfPlace.timeUs < v.bestUs) {
          v.bestUs = r.outOfPlace.timeUs;
          v.bestAlgo = t.algo;
        }
      }
    }
    v.ratio = v.bestUs > 0 ? v.autoUs / v.bestUs : 0;
    out.push_back(v);
  }
  return out;
}

VsBestSummary printVsBest(const std::vector<VsBestRow>& rows, double tolerance) {
  VsBestSummary sum;
  if (rows.empty()) return sum;
  std::printf("# auto vs the best single forced algorithm, out-of-place time (us); ratio = auto / best\n");
  std::printf("#  %10s %8s %5s  %10s %-16s  %10s %-16s  %7s\n", "size", "type", "redop", "auto", "(ran)", "best",
              "(algorithm)", "ratio");
  int& within = sum.within;
  int& compared = sum.compared;
  const VsBestRow* worst = nullptr;
  for (const VsBestRow& r : rows) {
    if (r.bestUs > 0) {
      std::printf("#  %10zu %8s %5s  %10.2f %-16s  %10.2f %-16s  %7.3f\n", r.bytes, r.type.c_str(), r.redop.c_str(),
                  r.autoUs, r.autoAlgo.c_str(), r.bestUs, r.bestAlgo.c_str(), r.ratio);
      ++compared;
      within += r.ratio <= 1.0 + tolerance;
      sum.sameAlgo += r.autoAlgo == r.bestAlgo;
      if (!worst || r.ratio > worst->ratio) worst = &r;
    } else {
      std::printf("#  %10zu %8s %5s  %10.2f %-16s  %10s %-16s  %7s\n", r.bytes, r.type.c_str(), r.redop.c_str(),
                  r.autoUs, r.autoAlgo.c_str(), "-", "(none ran it)", "-");
    }
  }
  if (worst) {
    std::printf("# auto within %.0f%% of the best single algorithm at %d of %d sizes (worst %.3f at %zu B %s)\n",
                tolerance * 100, within, compared, worst->ratio, worst->bytes, worst->type.c_str());
    std::printf("# auto ran the fastest forced algorithm itself at %d of %d sizes\n#\n", sum.sameAlgo, compared);
  } else {
    std::printf("# auto vs best: no forced algorithm ran any size\n#\n");
  }
  return sum;
}

}  // namespace tpcomm_bench
