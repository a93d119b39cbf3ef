#include "algos/lamport_p2p.h"

#include "algos/p2p_costs.h"
#include "common/error.h"
#include "common/params.h"

namespace tpcomm {

size_t LamportP2pAlgorithm::maxBytes() const { return static_cast<size_t>(paramInt(ParamId::kLamportMaxBytes)); }

bool LamportP2pAlgorithm::supports(const Topology& topo, const AlgoQuery& q, std::string* whyNot) const {
  if (!P2pAlgorithm::supports(topo, q, whyNot)) return false;
  if (q.bytes % 16 != 0) {
    if (whyNot) *whyNot = "message is not a multiple of 16 bytes";
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
  // Only shape-dependent refusals here (identical on every rank): buffer alignment is handled in
  // the kernel, so ranks never fall back to different algorithms.
  if (a.bytes() % 16 != 0) return TPCOMM_ERROR(kNotSupported, "lamport_p2p: needs a multiple of 16 bytes");
  return launchLamport(launchParams(a, p2pBlocks_), a.stream);
}

}  // namespace tpcomm
