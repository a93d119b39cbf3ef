#include "algos/common/algo_context.h"

#include <string>

#include "transports/cuda_p2p.h"
#include "transports/host_staged.h"
#include "transports/multicast.h"
#include "transports/nccl_transport.h"

namespace tpcomm {

AlgoContext::AlgoContext() = default;
AlgoContext::~AlgoContext() = default;

bool AlgoContext::hasTransport(const char* name) const {
  const std::string n = name;
  return n.empty() || (n == "host_staged" && hostStaged) || (n == "cuda_p2p" && p2p) || (n == "nccl" && nccl) ||
         (n == "multicast" && multicast);
}

}  // namespace tpcomm
