#include "algos/lamport_p2p.h"

#include "algos/p2p_costs.h"
#include "collectives/comm_context.h"
#include "common/error.h"
#include "common/params.h"

namespace tpcomm {

namespace {
// The kernel moves and stores whole 16-byte packs (the last one zero-padded), so the scratch
// needs the padded size.
size_t paddedBytes(size_t bytes) { return (bytes + 15) / 16 * 16; }
}  // namespace

size_t LamportP2pAlgorithm::maxBytes() const { return static_cast<size_t>(paramInt(ParamId::kLamportMaxBytes)); }

bool LamportP2pAlgorithm::supports(const Topology& topo, const AlgoQuery& q, std::string* whyNot) const {
  if (!P2pAlgorithm::supports(topo, q, whyNot)) return false;
  if (maxBytes() != 0 && paddedBytes(q.bytes) > maxBytes()) {
    if (whyNot) *whyNot = "message padded to 16 bytes larger than this algorithm's scratch";
    return false;
  }
  return true;
}

double LamportP2pAlgorithm::costUs(const Topology& topo, const AlgoQuery& q) const {
  const P2pCostModel m = p2pCostModel(topo);
  return alphaBetaUs(m.lamportAlphaUs, m.lamportGBps, static_cast<double>(q.bytes) * (topo.nRanks() - 1));
}

Status LamportP2pAlgorithm::run(const CollArgs& a) {
  TPCOMM_TRY(checkSize(a));
  // Only shape-dependent refusals here (identical on every rank): buffer alignment and partial
  // packs are handled in the kernel, so ranks never fall back to different algorithms. The kernel
  // pushes whole packs, so the padded size must fit the slot (the layout rounds maxBytes() up).
  const size_t padded = paddedBytes(a.bytes());
  if (padded > ctx_->p2p->layout().lamportBytes)
    return TPCOMM_ERROR(kNotSupported, "lamport_p2p: %zu bytes (%zu padded to 16) exceed its %zu-byte buffer",
                        a.bytes(), padded, ctx_->p2p->layout().lamportBytes);
  return launchLamport(launchParams(a, p2pBlocks_), a.stream);
}

}  // namespace tpcomm
