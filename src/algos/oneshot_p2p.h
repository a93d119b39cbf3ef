// oneshot_p2p: each rank pushes its whole input to every peer, then reduces all n copies locally
// (kernel and memory ordering: oneshot_p2p_kernel.cu). One barrier round trip; each rank sends
// (n-1) x the message. Best for small and medium messages.
#pragma once

#include "algos/p2p_algorithm.h"

namespace tpcomm {

class OneshotP2pAlgorithm : public P2pAlgorithm {
 public:
  using P2pAlgorithm::P2pAlgorithm;
  const char* name() const override { return "oneshot_p2p"; }
  double costUs(const Topology& topo, const AlgoQuery& q) const override;
  Status run(const CollArgs& args) override;

 protected:
  size_t maxBytes() const override;
};

}  // namespace tpcomm
