#include "algos/common/algo_context.h"

#include "transports/cuda_p2p.h"
#include "transports/host_staged.h"
#include "transports/multicast.h"
#include "transports/nccl_transport.h"

namespace tpcomm {

AlgoContext::AlgoContext() = default;
AlgoContext::~AlgoContext() = default;

}  // namespace tpcomm
