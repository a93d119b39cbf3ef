// twoshot_p2p: reduce-scatter then all-gather, both by push (kernel and memory ordering:
// twoshot_p2p_kernel.cu). Two barrier round trips; each rank sends 2(n-1)/n x the message, the
// bandwidth-optimal amount, so it wins from medium sizes up. Any size: the kernel loops over
// chunks of TPCOMM_TWOSHOT_CHUNK_BYTES.
#pragma once

#include "algos/p2p_algorithm.h"

namespace tpcomm {

class TwoshotP2pAlgorithm : public P2pAlgorithm {
 public:
  using P2pAlgorithm::P2pAlgorithm;
  const char* name() const override { return "twoshot_p2p"; }
  double costUs(const Topology& topo, const AlgoQuery& q) const override;
  Status run(const CollArgs& args) override;

 protected:
  size_t maxBytes() const override { return 0; }
};

}  // namespace tpcomm
