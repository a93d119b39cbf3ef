#include "transports/cuda_p2p.h"

#include "collectives/comm_context.h"
#include "common/error.h"

namespace tpcomm {

Status CudaP2pTransport::create(CommContext& ctx, std::unique_ptr<CudaP2pTransport>*) {
  if (!ctx.topo.allPairsP2p()) return TPCOMM_ERROR(kNotSupported, "cuda_p2p: not every pair has verified P2P");
  return TPCOMM_ERROR(kNotSupported, "cuda_p2p: not implemented in this build yet");
}

}  // namespace tpcomm
