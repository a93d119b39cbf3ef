// What a transport is given to come up: this rank's identity, the bootstrap it meets its peers
// over, the probed topology and the bound on every wait. Transports include nothing above
// themselves: algorithms (src/algos) and the communicator (src/collectives) sit on top.
#pragma once

#include "topology/topology.h"
#include "tpcomm/bootstrap.h"

namespace tpcomm {

struct TransportEnv {
  int rank = 0;
  int nRanks = 1;
  int device = -1;  ///< CUDA device, -1 on host ranks
  Bootstrap* bootstrap = nullptr;
  const Topology& topo;
  int timeoutMs = 10000;
};

}  // namespace tpcomm
