// twoshot_p2p: reduce-scatter then all-gather, both by push (kernels and memory ordering:
// twoshot_p2p.cu). Two barrier round trips; each rank sends 2(n-1)/n x the message, the
// bandwidth-optimal amount, so it wins from medium sizes up. Any size: the kernel loops over
// chunks of TPCOMM_TWOSHOT_CHUNK_BYTES. Fused twin: fused_twoshot_p2p. It also runs the two
// halves as collectives of their own, reduce-scatter and all-gather (twoshot_p2p_halves.cu), on
// the same scratch and epochs.
#include <memory>

#include "algos/p2p/p2p_algorithm.h"
#include "common/error.h"

namespace tpcomm {

// twoshot_p2p.cu
Status launchTwoshot(const P2pLaunch& p, cudaStream_t stream);
Status launchFusedTwoshot(const FusedP2pLaunch& f, cudaStream_t stream);
Status preloadTwoshotKernels();
Status preloadFusedTwoshotKernels();
// twoshot_p2p_halves.cu
Status launchTwoshotHalves(const P2pLaunch& p, cudaStream_t stream);
Status preloadTwoshotHalvesKernels();

namespace {

class TwoshotP2p final : public P2pAlgorithm {
 public:
  explicit TwoshotP2p(const AlgoContext* ctx) : P2pAlgorithm(ctx, "twoshot_p2p", "fused_twoshot_p2p") {}
  Status preload() override {
    TPCOMM_TRY(TPCOMM_CUDA_ONLY(preloadTwoshotKernels()));
    TPCOMM_TRY(TPCOMM_CUDA_ONLY(preloadTwoshotHalvesKernels()));
    return TPCOMM_CUDA_ONLY(preloadFusedTwoshotKernels());
  }

 protected:
  bool runsHalves() const override { return true; }
  size_t maxBytes() const override { return 0; }  // loops over chunks
  int blocks() const override { return ctx_->launch.twoshotBlocks; }
  Status launchPlain(const P2pLaunch& p, cudaStream_t s) override {
    if (p.kind != static_cast<int>(CollKind::kAllReduce)) return TPCOMM_CUDA_ONLY(launchTwoshotHalves(p, s));
    return TPCOMM_CUDA_ONLY(launchTwoshot(p, s));
  }
  Status launchFused(FusedP2pLaunch& f, cudaStream_t s) override {
    const size_t rowBytes = f.hidden * dataTypeSize(static_cast<DataType>(f.p2p.dtype));
    if (!fusedTwoshotGeometry(f.p2p.layout, f.rows, rowBytes, &f.rowsPerChunk, &f.rowsPerRank))
      return TPCOMM_ERROR(kNotSupported, "fused twoshot_p2p: a %zu-byte row does not fit the two-shot chunk",
                          rowBytes);
    return TPCOMM_CUDA_ONLY(launchFusedTwoshot(f, s));
  }
};

}  // namespace

std::unique_ptr<Algorithm> makeTwoshotP2p(const AlgoContext* ctx) { return std::make_unique<TwoshotP2p>(ctx); }

}  // namespace tpcomm
