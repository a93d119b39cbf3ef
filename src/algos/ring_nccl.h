// ring_nccl: the collective handed to a real NCCL communicator (NCCL picks ring or tree, LL,
// LL128 or Simple itself). The baseline every other path must beat, and the fallback for sizes
// and topologies tpcomm's own kernels do not cover.
#pragma once

#include "collectives/algorithm.h"

namespace tpcomm {

class RingNcclAlgorithm : public Algorithm {
 public:
  explicit RingNcclAlgorithm(CommContext* ctx) : ctx_(ctx) {}
  const char* name() const override { return "ring_nccl"; }
  bool supports(const Topology& topo, const AlgoQuery& q, std::string* whyNot) const override;
  double costUs(const Topology& topo, const AlgoQuery& q) const override;
  Status run(const CollArgs& args) override;
  bool available() const override;

 private:
  CommContext* ctx_;
};

}  // namespace tpcomm
