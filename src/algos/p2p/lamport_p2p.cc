// lamport_p2p: one-shot with the flag in the data (sentinel words), so no barrier round trip:
// the lowest latency for small messages (kernels and memory ordering: lamport_p2p.cu).
// Any element count (the last 16-byte pack is zero-padded on the wire; the padded size must fit
// the scratch) and buffers of any element alignment (16-byte aligned ones with vector accesses).
// Its buffers in the cuda_p2p scratch start as sentinels: setUp() fills them. Fused twin:
// fused_lamport_p2p.
#include <memory>

#include "algos/p2p/p2p_algorithm.h"
#include "common/error.h"
#include "common/params.h"

namespace tpcomm {

// lamport_p2p.cu
Status launchLamport(const P2pLaunch& p, cudaStream_t stream);
Status launchFusedLamport(const FusedP2pLaunch& f, cudaStream_t stream);
Status preloadLamportKernels();
Status preloadFusedLamportKernels();
Status fillLamportBuffers(char* p, size_t bytes);

namespace {

// The kernel moves and stores whole 16-byte packs (the last one zero-padded), so the scratch
// needs the padded size.
size_t paddedBytes(size_t bytes) { return (bytes + 15) / 16 * 16; }

class LamportP2p final : public P2pAlgorithm {
 public:
  explicit LamportP2p(const AlgoContext* ctx) : P2pAlgorithm(ctx, "lamport_p2p", "fused_lamport_p2p") {}

  bool supports(const Topology& topo, const AlgoQuery& q, std::string* whyNot) const override {
    if (!P2pAlgorithm::supports(topo, q, whyNot)) return false;
    if (maxBytes() != 0 && paddedBytes(q.bytes) > maxBytes()) {
      if (whyNot) *whyNot = "message padded to 16 bytes larger than this algorithm's scratch";
      return false;
    }
    return true;
  }

  Status preload() override {
    TPCOMM_TRY(TPCOMM_CUDA_ONLY(preloadLamportKernels()));
    return TPCOMM_CUDA_ONLY(preloadFusedLamportKernels());
  }

  // Every word of the three receive buffers starts as the sentinel (a word that is not has
  // arrived), before any peer can push: create calls this before its last exchange.
  Status setUp() override {
    if (!ctx_ || !ctx_->p2p) return Status::kOk;
    const P2pLayout& l = ctx_->p2p->layout();
    return TPCOMM_CUDA_ONLY(fillLamportBuffers(ctx_->p2p->base(ctx_->rank) + l.lamportOffset, 3 * l.lamportBufferBytes()));
  }

  // Only shape-dependent refusals here (identical on every rank): buffer alignment and partial
  // packs are handled in the kernel, so ranks never fall back to different algorithms. The kernel
  // pushes whole packs, so the padded size must fit the slot (the layout rounds maxBytes() up).
  Status run(const CollArgs& a) override {
    TPCOMM_TRY(checkSize(a));
    const size_t padded = paddedBytes(a.bytes());
    if (padded > ctx_->p2p->layout().lamportBytes)
      return TPCOMM_ERROR(kNotSupported, "lamport_p2p: %zu bytes (%zu padded to 16) exceed its %zu-byte buffer",
                          a.bytes(), padded, ctx_->p2p->layout().lamportBytes);
    return P2pAlgorithm::run(a);
  }

 protected:
  size_t maxBytes() const override { return static_cast<size_t>(paramInt(ParamId::kLamportMaxBytes)); }
  int blocks() const override { return ctx_->launch.p2pBlocks; }
  Status launchPlain(const P2pLaunch& p, cudaStream_t s) override { return TPCOMM_CUDA_ONLY(launchLamport(p, s)); }
  Status launchFused(FusedP2pLaunch& f, cudaStream_t s) override { return TPCOMM_CUDA_ONLY(launchFusedLamport(f, s)); }
};

}  // namespace

std::unique_ptr<Algorithm> makeLamportP2p(const AlgoContext* ctx) { return std::make_unique<LamportP2p>(ctx); }

}  // namespace tpcomm
