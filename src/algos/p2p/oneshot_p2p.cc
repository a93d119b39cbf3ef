// oneshot_p2p: each rank pushes its whole input to every peer, then reduces all n copies locally
// (kernels and memory ordering: oneshot_p2p.cu). One barrier round trip; each rank sends
// (n-1) x the message. Best for small and medium messages. Fused twin: fused_oneshot_p2p.
#include "algos/p2p/oneshot_p2p.h"

#include <memory>

#include "algos/p2p/p2p_algorithm.h"
#include "common/error.h"
#include "common/params.h"

namespace tpcomm {

P2pScratchRequest oneshotScratch(int blocks, size_t maxBytes) {
  P2pScratchRequest r;
  r.key = "oneshot_p2p";
  r.blocks = blocks;
  r.slotBytes = alignUp(maxBytes, 256);
  r.buffers = 2;
  return r;
}

namespace {

class OneshotP2p final : public P2pAlgorithm {
 public:
  explicit OneshotP2p(const AlgoContext* ctx)
      : P2pAlgorithm(ctx, "oneshot_p2p", "fused_oneshot_p2p", TPCOMM_P2P_KERNELS(kOneshotKernels)) {}
  std::vector<ParamId> sizedBy() const override { return {ParamId::kOneshotMaxBytes}; }

 protected:
  P2pScratchRequest scratch(int) const override { return oneshotScratch(ctx_->launch.p2pBlocks, maxBytes()); }
  size_t maxBytes() const override { return static_cast<size_t>(paramInt(ParamId::kOneshotMaxBytes)); }
};

}  // namespace

std::unique_ptr<Algorithm> makeOneshotP2p(const AlgoContext* ctx) { return std::make_unique<OneshotP2p>(ctx); }

}  // namespace tpcomm
