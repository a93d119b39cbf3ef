// ring_nccl: the collective handed to a real NCCL communicator (NCCL picks ring or tree, LL,
// LL128 or Simple itself). The baseline every other path must beat, and the fallback for sizes
// and topologies tpcomm's own kernels do not cover.
#include <memory>

#include "algos/common/algorithm.h"
#include "common/error.h"
#include "transports/nccl_transport.h"

namespace tpcomm {

namespace {

class RingNccl final : public AlgorithmBase {
 public:
  explicit RingNccl(const AlgoContext* ctx) : AlgorithmBase(ctx, "ring_nccl", "nccl") {}
  // Inside groupStart/groupEnd NCCL queues the call until the outermost ncclGroupEnd.
  bool deferredInGroup() const override { return true; }

  bool supports(const Topology& topo, const AlgoQuery&, std::string* whyNot) const override {
    if (topo.allGpu()) return true;
    if (whyNot) *whyNot = "NCCL needs GPU ranks";
    return false;
  }

  Status run(const CollArgs& a) override {
    if (!ctx_ || !ctx_->nccl) return TPCOMM_ERROR(kInternal, "ring_nccl: no transport");
    NcclTransport& nccl = *ctx_->nccl;
    switch (a.kind) {
      case CollKind::kAllReduce:
        return nccl.allReduce(a.send, a.recv, a.count, a.dtype, a.op, a.stream);
      case CollKind::kReduceScatter:
        return nccl.reduceScatter(a.send, a.recv, a.count, a.dtype, a.op, a.stream);
      case CollKind::kAllGather:
        return nccl.allGather(a.send, a.recv, a.count, a.dtype, a.stream);
    }
    return TPCOMM_ERROR(kInternal, "ring_nccl: unknown collective");
  }
};

}  // namespace

std::unique_ptr<Algorithm> makeRingNccl(const AlgoContext* ctx) { return std::make_unique<RingNccl>(ctx); }

}  // namespace tpcomm
