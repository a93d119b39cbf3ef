// The one cost table. Figures on NVLink come from allreduce_perf on 2x H200 NV18 (driver
// 580.159.04, CUDA 13.0, NCCL 2.28.3, bf16; bench/results/h200x2.md); alpha is the per-call time
// at tiny sizes, GB/s the rate of the bytes the schedule moves per rank (see Traffic). PCIe,
// host-memory and multicast rows are estimates until measured on such machines; on PCIe P2P a
// probe that measured every pair (tpcomm-doctor --measure) replaces the rows' GB/s (see
// measuredPcieGBps).
#include "collectives/cost_model.h"

#include "algos/compressed/quantize.h"

#include <algorithm>
#include <cstddef>
#include <cstdio>

namespace tpcomm {

namespace {

enum class LinkClass { kNvlink, kPcieP2p, kHost, kAny };

// Bytes a schedule moves per rank for a message of B bytes over n ranks.
enum class Traffic {
  kPush,       // (n-1) B: one-shot, Lamport (each rank pushes its whole input to every peer)
  kBus,        // 2 (n-1) / n B: two-shot, NCCL ring (reduce-scatter + all-gather)
  kStagedGpu,  // max(n-1, 1) B: out to host memory once, every peer's input back in
  kOnce,       // B: host ranks (read once, write once)
  kMulticast,  // 2 B / n over NVLink (the switch reduces and replicates)
  kLl,         // 2 (n-1) / n B: ll_p2p's reduce-scatter / all-gather (B: the n-piece buffer), each
               // piece pushed once to each peer, doubled by the flag beside every 4-byte word
};

struct CostRow {
  const char* algo;
  LinkClass link;
  size_t fromBytes;  // the row covers messages from here up to the next row's fromBytes
  double alphaEagerUs, alphaGraphUs, alphaPerRankUs;
  double gbps;
  Traffic traffic;
  double localGBps;  // > 0: plus 2 B of HBM copies at this rate (multicast's copy in and out)
};

constexpr size_t kMB = size_t{1} << 20;

// Rows of one algorithm and link class are in increasing fromBytes; kAny rows come last and
// serve every link class without a row of its own.
constexpr CostRow kTable[] = {
    // lamport_p2p, oneshot_p2p, twoshot_p2p: graph and eager alike (PDL hides the launch).
    {"lamport_p2p", LinkClass::kNvlink, 0, 2.7, 2.7, 0, 250.0, Traffic::kPush, 0},
    {"lamport_p2p", LinkClass::kAny, 0, 6.0, 6.0, 0, 12.0, Traffic::kPush, 0},
    // ll_p2p (reduce-scatter, all-gather): not measured on 2 GPUs yet; Lamport's alpha and rate,
    // its push at twice the bytes (the same protocol shape: stores that carry their own flag).
    {"ll_p2p", LinkClass::kNvlink, 0, 2.7, 2.7, 0, 250.0, Traffic::kLl, 0},
    {"ll_p2p", LinkClass::kAny, 0, 6.0, 6.0, 0, 12.0, Traffic::kLl, 0},
    {"oneshot_p2p", LinkClass::kNvlink, 0, 5.6, 5.6, 0, 205.0, Traffic::kPush, 0},
    {"oneshot_p2p", LinkClass::kAny, 0, 8.0, 8.0, 0, 20.0, Traffic::kPush, 0},
    {"twoshot_p2p", LinkClass::kNvlink, 0, 13.0, 13.0, 0, 320.0, Traffic::kBus, 0},
    {"twoshot_p2p", LinkClass::kAny, 0, 12.0, 12.0, 0, 22.0, Traffic::kBus, 0},
    // NCCL 2.28: LL/LL128 below 16 MB, Simple above; it passes two-shot only from 768 MB.
    {"ring_nccl", LinkClass::kNvlink, 0, 9.5, 6.0, 0, 170.0, Traffic::kBus, 0},
    {"ring_nccl", LinkClass::kNvlink, 16 * kMB, 9.5, 6.0, 0, 240.0, Traffic::kBus, 0},
    {"ring_nccl", LinkClass::kNvlink, 64 * kMB, 9.5, 6.0, 0, 290.0, Traffic::kBus, 0},
    {"ring_nccl", LinkClass::kNvlink, 768 * kMB, 9.5, 6.0, 0, 335.0, Traffic::kBus, 0},
    {"ring_nccl", LinkClass::kPcieP2p, 0, 9.5, 6.0, 0, 20.0, Traffic::kBus, 0},
    {"ring_nccl", LinkClass::kAny, 0, 9.5, 6.0, 0, 8.0, Traffic::kBus, 0},
    // staged_host: host ranks pay about three barriers per rank; GPU ranks a launch plus flag
    // round trips over PCIe, ~20 GB/s after the pipeline's bubbles.
    {"staged_host", LinkClass::kHost, 0, 0.0, 0.0, 3.0, 4.0, Traffic::kOnce, 0},
    {"staged_host", LinkClass::kAny, 0, 12.0, 12.0, 0, 20.0, Traffic::kStagedGpu, 0},
    // copy_local (one rank): a memcpy of the message at about HBM copy speed; an estimate.
    {"copy_local", LinkClass::kAny, 0, 1.0, 1.0, 0, 1500.0, Traffic::kOnce, 0},
    // twoshot_multicast: never measured (multicast is off on every machine we have).
    {"twoshot_multicast", LinkClass::kAny, 0, 10.0, 7.0, 0, 400.0, Traffic::kMulticast, 2000.0},
};

LinkClass linkClassOf(const Topology& topo) {
  if (topo.allHost()) return LinkClass::kHost;
  switch (topo.weakestLink()) {
    case LinkKind::kNvlink:
    case LinkKind::kNvswitch:
      return LinkClass::kNvlink;
    case LinkKind::kPcieP2p:
      return LinkClass::kPcieP2p;
    default:
      return LinkClass::kAny;
  }
}

double trafficBytes(Traffic t, double bytes, int n) {
  switch (t) {
    case Traffic::kPush:
      return bytes * (n - 1);
    case Traffic::kBus:
      return n > 1 ? bytes * 2.0 * (n - 1) / n : 0.0;
    case Traffic::kStagedGpu:
      return bytes * std::max(n - 1, 1);
    case Traffic::kOnce:
      return bytes;
    case Traffic::kMulticast:
      return 2.0 * bytes / std::max(n, 1);
    case Traffic::kLl:
      return n > 1 ? bytes * 2.0 * (n - 1) / n : 0.0;
  }
  return bytes;
}

const CostRow* findRowOf(const std::string& algo, LinkClass want, size_t bytes) {
  const CostRow* best = nullptr;
  for (const CostRow& r : kTable)
    if (algo == r.algo && r.link == want && r.fromBytes <= bytes) best = &r;
  return best;
}

const CostRow* findRow(const std::string& algo, LinkClass link, size_t bytes) {
  const CostRow* r = findRowOf(algo, link, bytes);
  return r ? r : findRowOf(algo, LinkClass::kAny, bytes);
}

// One-way SM-store rate of the 2x H200 NV18 pair the NVLink rows were measured on
// (tpcomm-doctor --measure: 365.9 GB/s, bench/results/h200x2.md). A row's GB/s over it is the
// share of the link that schedule reaches; the PCIe estimate keeps that share of the PCIe pair's
// own measured rate, so a PCIe box's first choice follows its links before any tuning.
constexpr double kNvlinkRowsSmGBs = 365.9;

// GB/s for `algo` on PCIe P2P from the measured link rates; 0 when not every pair was measured
// or the algorithm has no NVLink row to take the share from (staged_host goes through host
// memory, not the P2P link).
double measuredPcieGBps(const std::string& algo, const Topology& topo, size_t bytes) {
  const double slowest = slowestMeasuredSmGBs(topo);
  const CostRow* nv = slowest > 0 ? findRowOf(algo, LinkClass::kNvlink, bytes) : nullptr;
  return nv ? slowest * nv->gbps / kNvlinkRowsSmGBs : 0.0;
}

// Compressed algorithms, "<base>+fp8" / "<base>+int8" (docs/compression.md): the base schedule's
// row at the bytes really on the wire (one byte per element plus a 4-byte scale per block, from
// quantWireBytes) plus the extra work: alpha for the longer kernel, and the quantize / read-back
// passes over the message. GPU ranks: the quantize and read-back kernels alone, both passes in
// series, GB/s of bf16/f16 message on one H200 (fp8 through the hardware encoder; "Quantizer
// kernels alone" in bench/results/h200x1.md: fp8 1262 + 1125 -> 595, int8 1327 + 1626 -> 730; f32
// messages are cheaper per byte, so this overstates their cost). Host ranks: the whole compressed
// call's extra time with allreduce_perf on the 2-core CI VM under a shared load, ~0.2 GB/s of
// message (quiet, it is 1.6-2 GB/s: bench/results/ci-vm-2core.md; at either rate the passes cost
// more than the bytes they save). The sum is optimistic where it matters: a whole staged_host+fp8
// call on one GPU took about 0.9x plain staged_host's time at 16 MB, where this predicts ~0.6x
// (docs/compression.md).
// On host ranks the "wire" is the same memory the passes read and write, so the passes cost far
// more than the bytes they save and compression is never picked there by cost (only by TPCOMM_ALGO).
constexpr const char* kCompressedBases[] = {"twoshot_p2p", "staged_host"};
constexpr const char* kCompressedSuffixes[] = {"+fp8", "+int8"};

// The base name when `algo` is a compressed algorithm's, else "".
std::string compressedBase(const std::string& algo) {
  for (const char* suffix : kCompressedSuffixes) {
    const std::string sfx = suffix;
    if (algo.size() > sfx.size() && algo.compare(algo.size() - sfx.size(), sfx.size(), sfx) == 0)
      return algo.substr(0, algo.size() - sfx.size());
  }
  return "";
}

double compressedCostUs(const std::string& base, bool fp8, const Topology& topo, const AlgoQuery& q,
                        double (*baseCost)(const std::string&, const Topology&, const AlgoQuery&)) {
  const size_t es = dataTypeSize(q.dtype);
  if (es == 0) return kUnmodelledUs;
  AlgoQuery wire = q;
  wire.bytes = quantWireBytes(q.bytes / es);
  const bool host = topo.allHost();
  const double extraAlphaUs = host ? 2.0 : 3.0;
  const double passGBps = host ? 0.2 : (fp8 ? 595.0 : 730.0);
  return baseCost(base, topo, wire) + extraAlphaUs + static_cast<double>(q.bytes) / (passGBps * 1e3);
}

}  // namespace

double slowestMeasuredSmGBs(const Topology& topo) {
  double slowest = 0;
  for (int a = 0; a < topo.nRanks(); ++a)
    for (int b = 0; b < topo.nRanks(); ++b) {
      if (a == b) continue;
      const double v = topo.links[a][b].smGBs;
      if (!(v > 0)) return 0;  // an unmeasured pair (or NaN): no measured figure for the group
      slowest = slowest == 0 ? v : std::min(slowest, v);
    }
  return slowest;
}

std::string costModelSource(const Topology& topo) {
  const LinkClass link = linkClassOf(topo);
  if (link != LinkClass::kPcieP2p) return link == LinkClass::kNvlink ? "table (measured on 2x H200 NV18)" : "table (estimates)";
  const double slowest = slowestMeasuredSmGBs(topo);
  if (slowest <= 0) return "table (PCIe estimates; tpcomm-doctor --measure scales them to this machine's links)";
  char buf[160];
  std::snprintf(buf, sizeof(buf), "PCIe P2P rates scaled to the measured links (slowest pair %.1f GB/s SM stores)", slowest);
  return buf;
}

double modelCostUs(const std::string& algo, const Topology& topo, const AlgoQuery& q) {
  const std::string base = compressedBase(algo);
  if (!base.empty()) {
    const bool fp8 = algo.compare(base.size(), std::string::npos, "+fp8") == 0;
    return compressedCostUs(base, fp8, topo, q, &modelCostUs);
  }
  const LinkClass link = linkClassOf(topo);
  const CostRow* r = findRow(algo, link, q.bytes);
  if (!r) return kUnmodelledUs;
  const int n = topo.nRanks();
  const double bytes = static_cast<double>(q.bytes);
  double gbps = r->gbps;
  if (link == LinkClass::kPcieP2p) {
    const double measured = measuredPcieGBps(algo, topo, q.bytes);
    if (measured > 0) gbps = measured;
  }
  double us = (q.capturing ? r->alphaGraphUs : r->alphaEagerUs) + r->alphaPerRankUs * n;
  // Reduce-scatter and all-gather are each one half of a bus schedule: (n-1)/n of the large
  // buffer (nccl-tests' busbw). Their alpha is the all-reduce row's (not measured apart yet).
  const double half = q.kind != CollKind::kAllReduce && r->traffic == Traffic::kBus ? 0.5 : 1.0;
  us += half * trafficBytes(r->traffic, bytes, n) / (gbps * 1e3);
  if (r->localGBps > 0) us += 2.0 * bytes / (r->localGBps * 1e3);
  return us;
}

std::vector<std::string> modelledAlgorithms() {
  std::vector<std::string> names;
  for (const CostRow& r : kTable)
    if (std::find(names.begin(), names.end(), r.algo) == names.end()) names.push_back(r.algo);
  for (const char* base : kCompressedBases)
    for (const char* suffix : kCompressedSuffixes) names.push_back(std::string(base) + suffix);
  return names;
}

}  // namespace tpcomm
