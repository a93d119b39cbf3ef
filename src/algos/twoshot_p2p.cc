#include "algos/twoshot_p2p.h"

#include "algos/p2p_costs.h"
#include "common/error.h"
#include "common/params.h"

namespace tpcomm {

double TwoshotP2pAlgorithm::costUs(const Topology& topo, const AlgoQuery& q) const {
  const P2pCostModel m = p2pCostModel(topo);
  const int n = topo.nRanks();
  return alphaBetaUs(m.twoshotAlphaUs, m.twoshotGBps, static_cast<double>(q.bytes) * 2.0 * (n - 1) / n);
}

Status TwoshotP2pAlgorithm::run(const CollArgs& a) {
  TPCOMM_TRY(checkSize(a));
  return launchTwoshot(launchParams(a, twoshotBlocks_), a.stream);
}

}  // namespace tpcomm
