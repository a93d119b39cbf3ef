// ll_p2p: reduce-scatter and all-gather with the flag in every 16-byte store (NCCL's LL in
// shape): no barrier and no clear, so the latency of Lamport's all-reduce at twice the bytes on
// the link; for small messages, up to TPCOMM_LL_MAX_BYTES (the reduce-scatter's input, the
// all-gather's output). Not an all-reduce (lamport_p2p is that). Kernels, wire format and why
// two buffers suffice: ll_p2p.cu. Buffers of any element alignment and any count (8-byte
// aligned pieces of whole 8-byte lines take one load per line).
#include "algos/p2p/ll_p2p.h"

#include <memory>

#include "algos/p2p/p2p_algorithm.h"
#include "common/error.h"
#include "common/params.h"

namespace tpcomm {

P2pScratchRequest llScratch(int nRanks, int blocks, size_t maxBytes) {
  P2pScratchRequest r;
  r.key = "ll_p2p";
  r.blocks = blocks;
  r.slotBytes = maxBytes == 0 ? 0 : alignUp((maxBytes / nRanks + 8) / 8 * 16, 256);
  r.buffers = 2;
  return r;
}

namespace {

class LlP2p final : public P2pAlgorithm {
 public:
  explicit LlP2p(const AlgoContext* ctx) : P2pAlgorithm(ctx, "ll_p2p", "ll_p2p", TPCOMM_P2P_KERNELS(kLlKernels)) {}

  bool supports(const Topology& topo, const AlgoQuery& q, std::string* whyNot) const override {
    if (q.kind == CollKind::kAllReduce) {
      if (whyNot) *whyNot = "reduce-scatter and all-gather only";
      return false;
    }
    if (maxBytes() == 0) {  // no scratch was reserved
      if (whyNot) *whyNot = "TPCOMM_LL_MAX_BYTES=0 turns it off";
      return false;
    }
    return P2pAlgorithm::supports(topo, q, whyNot);
  }

  std::vector<ParamId> sizedBy() const override { return {ParamId::kLlMaxBytes}; }

 protected:
  bool runsHalves() const override { return true; }
  P2pScratchRequest scratch(int nRanks) const override { return llScratch(nRanks, ctx_->launch.p2pBlocks, maxBytes()); }
  size_t maxBytes() const override { return static_cast<size_t>(paramInt(ParamId::kLlMaxBytes)); }
};

}  // namespace

std::unique_ptr<Algorithm> makeLlP2p(const AlgoContext* ctx) { return std::make_unique<LlP2p>(ctx); }

}  // namespace tpcomm
