// lamport_p2p: one-shot with the flag in the data (sentinel words), so no barrier round trip:
// the lowest latency for small messages (kernels and memory ordering: lamport_p2p.cu).
// Any element count (the last 16-byte pack is zero-padded on the wire; the padded size must fit
// the scratch) and buffers of any element alignment (16-byte aligned ones with vector accesses).
// Its buffers in the cuda_p2p scratch start as sentinels: setUp() fills them. Fused twin:
// fused_lamport_p2p.
#include "algos/p2p/lamport_p2p.h"

#include <memory>

#include "algos/p2p/p2p_algorithm.h"
#include "common/error.h"
#include "common/params.h"

namespace tpcomm {

P2pScratchRequest lamportScratch(int blocks, size_t maxBytes) {
  P2pScratchRequest r;
  r.key = "lamport_p2p";
  r.blocks = blocks;
  r.slotBytes = alignUp(maxBytes, 256);
  r.buffers = 3;
  r.localWords = 3;
  return r;
}

namespace {

// The kernel moves and stores whole 16-byte packs (the last one zero-padded), so the scratch
// needs the padded size.
size_t paddedBytes(size_t bytes) { return (bytes + 15) / 16 * 16; }

class LamportP2p final : public P2pAlgorithm {
 public:
  explicit LamportP2p(const AlgoContext* ctx)
      : P2pAlgorithm(ctx, "lamport_p2p", "fused_lamport_p2p", TPCOMM_P2P_KERNELS(kLamportKernels)) {}

  bool supports(const Topology& topo, const AlgoQuery& q, std::string* whyNot) const override {
    if (!P2pAlgorithm::supports(topo, q, whyNot)) return false;
    if (maxBytes() != 0 && paddedBytes(q.bytes) > maxBytes()) {
      if (whyNot) *whyNot = "message padded to 16 bytes larger than this algorithm's scratch";
      return false;
    }
    return true;
  }

  std::vector<ParamId> sizedBy() const override { return {ParamId::kLamportMaxBytes}; }

  // Every word of the three receive buffers starts as the sentinel (a word that is not has
  // arrived), before any peer can push: create calls this before its last exchange.
  Status setUp() override {
    if (!ctx_ || !ctx_->p2p) return Status::kOk;
    if (!region()) return TPCOMM_ERROR(kInternal, "lamport_p2p: the cuda_p2p transport holds no region for it");
    return TPCOMM_CUDA_ONLY(fillLamportBuffers(ctx_->p2p->base(ctx_->rank), *region()));
  }

  // Only shape-dependent refusals here (identical on every rank): buffer alignment and partial
  // packs are handled in the kernel, so ranks never fall back to different algorithms. The kernel
  // pushes whole packs, so the padded size must fit the slot (the layout rounds maxBytes() up).
  Status run(const CollArgs& a) override {
    TPCOMM_TRY(checkSize(a));
    const size_t padded = paddedBytes(a.bytes());
    if (padded > region()->slotBytes)
      return TPCOMM_ERROR(kNotSupported, "lamport_p2p: %zu bytes (%zu padded to 16) exceed its %zu-byte buffer",
                          a.bytes(), padded, region()->slotBytes);
    return P2pAlgorithm::run(a);
  }

 protected:
  P2pScratchRequest scratch(int) const override { return lamportScratch(ctx_->launch.p2pBlocks, maxBytes()); }
  size_t maxBytes() const override { return static_cast<size_t>(paramInt(ParamId::kLamportMaxBytes)); }
};

}  // namespace

std::unique_ptr<Algorithm> makeLamportP2p(const AlgoContext* ctx) { return std::make_unique<LamportP2p>(ctx); }

}  // namespace tpcomm
