#include "collectives/comm_context.h"

#include "transports/cuda_p2p.h"
#include "transports/host_staged.h"
#include "transports/multicast.h"
#include "transports/nccl_transport.h"

namespace tpcomm {

CommContext::CommContext() = default;
// Out of line: the transports are complete types here.
CommContext::~CommContext() = default;

}  // namespace tpcomm
