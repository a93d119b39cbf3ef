// scratch_test_p2p's class: what it asks of the cuda_p2p transport (scratch()) and how it runs
// (P2pAlgorithm does the rest: support rules, launch parameters with its region, size checks).
#include "scratch_test_p2p.h"

#include "algos/p2p/p2p_algorithm.h"
#include "common/error.h"

namespace tpcomm {

namespace {

class ScratchTestP2p final : public P2pAlgorithm {
 public:
  explicit ScratchTestP2p(const AlgoContext* ctx) : P2pAlgorithm(ctx, "scratch_test_p2p", "scratch_test_p2p") {}
  Status preload() override { return TPCOMM_CUDA_ONLY(preloadScratchTest()); }

 protected:
  P2pScratchRequest scratch(int) const override {
    P2pScratchRequest r;
    r.key = "scratch_test_p2p";
    r.blocks = blocks();
    r.slotBytes = kScratchTestBytes;
    r.buffers = 2;
    return r;
  }
  size_t maxBytes() const override { return kScratchTestBytes; }
  int blocks() const override { return ctx_->launch.p2pBlocks; }
  Status launchPlain(const P2pLaunch& p, cudaStream_t s) override { return TPCOMM_CUDA_ONLY(launchScratchTest(p, s)); }
  Status launchFused(FusedP2pLaunch&, cudaStream_t) override {
    return TPCOMM_ERROR(kNotSupported, "scratch_test_p2p: no fused kernel");
  }
};

}  // namespace

std::unique_ptr<Algorithm> makeScratchTestP2p(const AlgoContext* ctx) { return std::make_unique<ScratchTestP2p>(ctx); }

}  // namespace tpcomm
