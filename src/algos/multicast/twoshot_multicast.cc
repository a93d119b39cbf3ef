// twoshot_multicast: all-reduce as reduce-scatter then all-gather through an NVSwitch multicast
// object (TensorRT-LLM's MultiShot with NVLS; NCCL's NVLS algorithm, RSxLD_AGxST done by the
// switch: multimem.ld_reduce then multimem.st). Kernel and memory ordering:
// twoshot_multicast.cu; transport and gate: transports/multicast.h.
//
// UNTESTED ON HARDWARE: no machine this project runs on may enable multicast. supports() is
// false unless Topology::multicastUsable() (so the selector never offers it with the gate
// closed), run() re-reads the environment switches, and the transport exists only where every
// rank's gate was open at creation. Cost constants are estimates, not measurements.
#include "algos/multicast/twoshot_multicast.h"

#include <algorithm>
#include <memory>
#include <string>

#include "algos/common/algorithm.h"
#include "algos/common/launch_shape.h"
#include "common/error.h"
#include "common/params.h"

namespace tpcomm {

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
  size_t cap = static_cast<size_t>(std::max(1, std::min(maxBlocks, l.maxBlocks)));
  return static_cast<int>(gridFor(perSlice, kThreads, cap));  // one 16-byte pack per thread per pass
}

namespace {

class TwoshotMulticast final : public AlgorithmBase {
 public:
  explicit TwoshotMulticast(const AlgoContext* ctx) : AlgorithmBase(ctx, "twoshot_multicast", "multicast") {}
  // One chunk of a message in the multicast allocation, and a barrier counter per block.
  TransportNeeds needs(int) const override {
    TransportNeeds n;
    n.multicast.maxBlocks = ctx_ ? ctx_->launch.twoshotBlocks : 0;
    n.multicast.dataBytes = static_cast<size_t>(paramInt(ParamId::kTwoshotChunkBytes));
    return n;
  }
  std::vector<ParamId> sizedBy() const override { return {ParamId::kTwoshotChunkBytes}; }
  bool supports(const Topology& topo, const AlgoQuery& q, std::string* whyNot) const override;
  Status preload() override { return TPCOMM_CUDA_ONLY(preloadTwoshotMulticast()); }
  Status run(const CollArgs& args) override;
};

}  // namespace

bool TwoshotMulticast::supports(const Topology& topo, const AlgoQuery& q, std::string* whyNot) const {
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

Status TwoshotMulticast::run(const CollArgs& a) {
  if (!ctx_ || !ctx_->multicast) return TPCOMM_ERROR(kInternal, "twoshot_multicast: no multicast transport");
  std::string why;
  if (multicastDisabledByEnv(&why)) return TPCOMM_ERROR(kNotSupported, "twoshot_multicast: %s", why.c_str());
  if (a.kind != CollKind::kAllReduce || !multicastReducible(a.dtype, a.op))
    return TPCOMM_ERROR(kNotSupported, "twoshot_multicast: %s of %s not supported", collKindName(a.kind),
                        dataTypeName(a.dtype));
  const MulticastTransport& t = *ctx_->multicast;
  MulticastLaunch p{};
  static_cast<CallParams&>(p) = callParams(a, t.rank(), t.nRanks());
  p.layout = t.layout();
  p.blocks = multicastBlocks(a.count, a.elemSize(), t.nRanks(), p.layout, ctx_->launch.twoshotBlocks);
  p.uc = t.unicast();
  p.mc = t.multicast();
  p.errorWord = ctx_->asyncError.deviceWord;
  p.timeoutNs = ctx_->timeoutNs();
  return TPCOMM_CUDA_ONLY(launchTwoshotMulticast(p, a.stream));
}

std::unique_ptr<Algorithm> makeTwoshotMulticast(const AlgoContext* ctx) {
  return std::make_unique<TwoshotMulticast>(ctx);
}

}  // namespace tpcomm
