// scratch_test_p2p's class: what it asks of the cuda_p2p transport (scratch()), its size limit,
// grid and kernels; P2pAlgorithm does the rest (support rules, the request to the transport, the
// launch parameters with its region, size checks, preload).
#include "scratch_test_p2p.h"

#include "algos/p2p/p2p_algorithm.h"

namespace tpcomm {

namespace {

class ScratchTestP2p final : public P2pAlgorithm {
 public:
  explicit ScratchTestP2p(const AlgoContext* ctx)
      : P2pAlgorithm(ctx, "scratch_test_p2p", "scratch_test_p2p", TPCOMM_P2P_KERNELS(kScratchTestKernels)) {}

 protected:
  P2pScratchRequest scratch(int) const override {
    P2pScratchRequest r;
    r.key = "scratch_test_p2p";
    r.blocks = ctx_->launch.p2pBlocks;  // its grid: one-shot's
    r.slotBytes = kScratchTestBytes;
    r.buffers = 2;
    return r;
  }
  size_t maxBytes() const override { return kScratchTestBytes; }
};

}  // namespace

std::unique_ptr<Algorithm> makeScratchTestP2p(const AlgoContext* ctx) { return std::make_unique<ScratchTestP2p>(ctx); }

}  // namespace tpcomm
