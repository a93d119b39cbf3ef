#include "algos/oneshot_p2p.h"

#include "algos/p2p_costs.h"
#include "common/error.h"
#include "common/params.h"

namespace tpcomm {

size_t OneshotP2pAlgorithm::maxBytes() const { return static_cast<size_t>(paramInt(ParamId::kOneshotMaxBytes)); }

double OneshotP2pAlgorithm::costUs(const Topology& topo, const AlgoQuery& q) const {
  const P2pCostModel m = p2pCostModel(topo);
  return alphaBetaUs(m.oneshotAlphaUs, m.pushGBps, static_cast<double>(q.bytes) * (topo.nRanks() - 1));
}

Status OneshotP2pAlgorithm::run(const CollArgs& a) {
  TPCOMM_TRY(checkSize(a));
  return launchOneshot(launchParams(a, p2pBlocks_), a.stream);
}

}  // namespace tpcomm
