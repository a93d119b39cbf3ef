#include "collectives/selector.h"

#include <algorithm>
#include <cstdio>

#include "collectives/cost_model.h"

namespace tpcomm {

std::vector<Candidate> selectAlgorithms(const std::vector<Algorithm*>& algos, const Topology& topo, const AlgoQuery& q,
                                        const AlgoOverride& ovr, bool availableOnly, const TuningTable* measured) {
  std::vector<Candidate> byCost;
  for (Algorithm* a : algos) {
    if ((availableOnly && !a->available()) || ovr.excludes(a->name())) continue;
    if (ovr.deterministicOnly && !a->deterministic()) continue;
    // Opt-in only: the call's compression, else the communicator's.
    const Compression want = q.compression >= 0 ? static_cast<Compression>(q.compression) : ovr.compression;
    if (a->compression() != Compression::kNone && a->compression() != want) continue;
    std::string why;
    if (!a->supports(topo, q, &why)) continue;
    // Eligible: only now may the measured table say anything about it.
    const double us = measured ? measured->measuredUs(q, a->name()) : -1;
    byCost.push_back({a, us > 0 ? us : modelCostUs(a->name(), topo, q), false, us > 0});
  }
  // Measured before modelled (the doctor timed every algorithm it could run here; one it did
  // not time should not win on an estimate), then by cost. stable: equal costs keep registry
  // order, so the choice is deterministic on every rank.
  std::stable_sort(byCost.begin(), byCost.end(), [](const Candidate& x, const Candidate& y) {
    return x.measured != y.measured ? x.measured : x.costUs < y.costUs;
  });
  std::vector<Candidate> out;
  for (const std::string& name : ovr.forcedFor(q.bytes)) {
    for (Candidate& c : byCost)
      if (!c.forced && name == c.algo->name()) {
        c.forced = true;
        out.push_back(c);
      }
  }
  for (const Candidate& c : byCost)
    if (!c.forced) out.push_back(c);
  return out;
}

ShapeSelection selectForShape(const std::vector<Algorithm*>& algos, const Topology& topo, AlgoQuery q,
                              const AlgoOverride& ovr, const TuningTable* measured) {
  ShapeSelection s;
  q.capturing = false;
  s.eager = selectAlgorithms(algos, topo, q, ovr, true, measured);
  q.capturing = true;
  s.capture = selectAlgorithms(algos, topo, q, ovr, true, measured);
  s.sameFirst = !s.eager.empty() && !s.capture.empty() && s.eager[0].algo == s.capture[0].algo;
  return s;
}

std::string describeSelection(const std::vector<Algorithm*>& algos, const Topology& topo, const AlgoOverride& ovr,
                              DataType dtype, bool capturing, const TuningTable* measured) {
  std::string out;
  char line[256];
  for (size_t bytes = 1024; bytes <= (1ull << 30); bytes *= 4) {
    AlgoQuery q{CollKind::kAllReduce, dtype, ReduceOp::kSum, bytes, capturing};
    std::vector<Candidate> c = selectAlgorithms(algos, topo, q, ovr, true, measured);
    const char* unit = bytes >= (1u << 30) ? "G" : bytes >= (1u << 20) ? "M" : "K";
    size_t v = bytes >= (1u << 30) ? bytes >> 30 : bytes >= (1u << 20) ? bytes >> 20 : bytes >> 10;
    if (c.empty()) {
      std::snprintf(line, sizeof(line), "  %6zu%s  (no algorithm)\n", v, unit);
    } else {
      std::snprintf(line, sizeof(line), "  %6zu%s  %-14s %9.1f us %-8s%s   next: %s\n", v, unit, c[0].algo->name(),
                    c[0].costUs, c[0].measured ? "measured" : "modelled", c[0].forced ? " (TPCOMM_ALGO)" : "",
                    c.size() > 1 ? c[1].algo->name() : "-");
    }
    out += line;
  }
  return out;
}

}  // namespace tpcomm
