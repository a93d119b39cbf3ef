// lamport_p2p: one-shot with the flag in the data (sentinel words), so no barrier round trip:
// the lowest latency for small messages (kernel and memory ordering: lamport_p2p_kernel.cu).
// Any element count (the last 16-byte pack is zero-padded on the wire; the padded size must fit
// the scratch) and buffers of any element alignment (16-byte aligned ones with vector accesses).
#pragma once

#include "algos/p2p_algorithm.h"

namespace tpcomm {

class LamportP2pAlgorithm : public P2pAlgorithm {
 public:
  using P2pAlgorithm::P2pAlgorithm;
  const char* name() const override { return "lamport_p2p"; }
  bool supports(const Topology& topo, const AlgoQuery& q, std::string* whyNot) const override;
  double costUs(const Topology& topo, const AlgoQuery& q) const override;
  Status run(const CollArgs& args) override;

 protected:
  size_t maxBytes() const override;
};

}  // namespace tpcomm
