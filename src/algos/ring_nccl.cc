#include "algos/ring_nccl.h"

#include "collectives/comm_context.h"
#include "common/error.h"
#include "transports/nccl_transport.h"

namespace tpcomm {

bool RingNcclAlgorithm::available() const { return !ctx_ || ctx_->nccl != nullptr; }

bool RingNcclAlgorithm::supports(const Topology& topo, const AlgoQuery&, std::string* whyNot) const {
  if (!topo.allGpu()) {
    if (whyNot) *whyNot = "NCCL needs GPU ranks";
    return false;
  }
  return true;
}

double RingNcclAlgorithm::costUs(const Topology& topo, const AlgoQuery& q) const {
  // Ring all-reduce moves 2(n-1)/n of the message over the slowest link. Calibrated on 2x H200
  // NV18 (NCCL 2.28): ~11.6 us floor eager, ~320 GB/s bus bandwidth at large sizes.
  int n = topo.nRanks();
  double busFactor = n > 1 ? 2.0 * (n - 1) / n : 0.0;
  double gbps;
  switch (topo.weakestLink()) {
    case LinkKind::kNvswitch:
    case LinkKind::kNvlink: gbps = 320.0; break;
    case LinkKind::kPcieP2p: gbps = 20.0; break;
    default: gbps = 8.0; break;
  }
  double alpha = q.capturing ? 6.0 : 11.5;
  return alphaBetaUs(alpha, gbps, static_cast<double>(q.bytes) * busFactor);
}

Status RingNcclAlgorithm::run(const CollArgs& a) {
  if (!ctx_ || !ctx_->nccl) return TPCOMM_ERROR(kInternal, "ring_nccl: no transport");
  return ctx_->nccl->run(a);
}

}  // namespace tpcomm
