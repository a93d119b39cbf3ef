#include "algos/twoshot_multicast.h"

#include <algorithm>
#include <string>

#include "collectives/comm_context.h"
#include "common/error.h"
#include "common/params.h"

namespace tpcomm {

namespace {
constexpr size_t kPacksPerBlock = 512;  // one 16-byte pack per thread per pass (512 threads)
}

bool multicastReducible(DataType dtype, ReduceOp op) {
  bool half = dtype == DataType::kF16 || dtype == DataType::kBF16;
  if (op == ReduceOp::kSum) return half || dtype == DataType::kF32;
  if (op == ReduceOp::kMax || op == ReduceOp::kMin) return half;
  return false;
}

int multicastBlocks(size_t count, size_t elemBytes, int nRanks, const MulticastLayout& l, int maxBlocks) {
  size_t chunk = std::min(count * elemBytes, l.dataBytes);
  size_t packs = (chunk + 15) / 16;
  size_t perSlice = (packs + nRanks - 1) / nRanks;
  size_t blocks = (perSlice + kPacksPerBlock - 1) / kPacksPerBlock;
  size_t cap = static_cast<size_t>(std::max(1, std::min(maxBlocks, l.maxBlocks)));
  return static_cast<int>(std::max<size_t>(1, std::min(blocks, cap)));
}

TwoshotMulticastAlgorithm::TwoshotMulticastAlgorithm(CommContext* ctx)
    : ctx_(ctx), maxBlocks_(static_cast<int>(paramInt(ParamId::kTwoshotBlocks))) {}

bool TwoshotMulticastAlgorithm::available() const { return !ctx_ || ctx_->multicast != nullptr; }

bool TwoshotMulticastAlgorithm::supports(const Topology& topo, const AlgoQuery& q, std::string* whyNot) const {
  std::string why;
  if (!topo.multicastUsable(&why)) {
    why = "multicast gate closed: " + why;
  } else if (topo.nRanks() > kMaxMulticastRanks) {
    why = "more than 16 ranks";
  } else if (q.kind != CollKind::kAllReduce) {
    why = "all-reduce only";
  } else if (!multicastReducible(q.dtype, q.op)) {
    why = "multimem.ld_reduce cannot reduce this type with this op (no f32 max/min)";
  } else {
    for (const RankDevice& r : topo.ranks)
      if (r.ccMajor < 9) why = "needs sm_90 or newer on every rank";
  }
  if (!why.empty() && whyNot) *whyNot = why;
  return why.empty();
}

double TwoshotMulticastAlgorithm::costUs(const Topology& topo, const AlgoQuery& q) const {
  // ESTIMATE (never measured: multicast is off on every machine we have). Two switch barriers
  // plus a launch; each rank moves 2/n of the message over NVLink (the switch reduces and
  // replicates) and copies the message in and out of its buffer in HBM.
  const double n = std::max(1, topo.nRanks());
  const double bytes = static_cast<double>(q.bytes);
  return alphaBetaUs(q.capturing ? 7.0 : 10.0, 400.0, 2.0 * bytes / n) + bytes * 2.0 / (2000.0 * 1e3);
}

Status TwoshotMulticastAlgorithm::run(const CollArgs& a) {
  if (!ctx_ || !ctx_->multicast) return TPCOMM_ERROR(kInternal, "twoshot_multicast: no multicast transport");
  std::string why;
  if (multicastDisabledByEnv(&why)) return TPCOMM_ERROR(kNotSupported, "twoshot_multicast: %s", why.c_str());
  if (a.kind != CollKind::kAllReduce || !multicastReducible(a.dtype, a.op))
    return TPCOMM_ERROR(kNotSupported, "twoshot_multicast: %s of %s not supported", collKindName(a.kind),
                        dataTypeName(a.dtype));
  const MulticastTransport& t = *ctx_->multicast;
  MulticastLaunch p{};
  p.send = a.send;
  p.recv = a.recv;
  p.count = a.count;
  p.dtype = static_cast<int>(a.dtype);
  p.op = static_cast<int>(a.op);
  p.rank = t.rank();
  p.nRanks = t.nRanks();
  p.layout = t.layout();
  p.blocks = multicastBlocks(a.count, a.elemSize(), t.nRanks(), p.layout, maxBlocks_);
  p.uc = t.unicast();
  p.mc = t.multicast();
  p.errorWord = ctx_->asyncError.deviceWord;
  p.timeoutNs = static_cast<uint64_t>(ctx_->timeoutMs) * 1000000ull;
  return launchTwoshotMulticast(p, a.stream);
}

#ifndef TPCOMM_HAVE_CUDA
Status launchTwoshotMulticast(const MulticastLaunch&, cudaStream_t) {
  return TPCOMM_ERROR(kNotSupported, "twoshot_multicast: tpcomm was built without CUDA");
}
#endif

}  // namespace tpcomm
