// What a running algorithm may use: this rank's identity, the topology, the transports that
// came up (null when not), the bound on every wait, the asynchronous error word, and the launch
// settings read once at create. Filled by the communicator's bring-up
// (src/collectives/bring_up.cc); algorithms only read it.
#pragma once

#include <cstdint>
#include <memory>

#include "common/async_error.h"
#include "topology/topology.h"

namespace tpcomm {

class HostStagedTransport;
class CudaP2pTransport;
class NcclTransport;
class MulticastTransport;

/// Read once at create: the kernels share per-block epochs with their fused twins, so the grid
/// must not change over the communicator's life.
struct LaunchSettings {
  int p2pBlocks = 0;          ///< TPCOMM_P2P_BLOCKS: one-shot and Lamport grids
  int twoshotBlocks = 0;      ///< TPCOMM_TWOSHOT_BLOCKS
  int fusedBlocksPerRow = 0;  ///< TPCOMM_FUSED_BLOCKS_PER_ROW
  bool pdl = false;           ///< programmatic dependent launch (sm_90+, TPCOMM_PDL)
  bool checkCalls = false;    ///< TPCOMM_CHECK_CALLS: the GPU kernels (P2P, staged_host) compare call signatures
};

struct AlgoContext {
  int rank = 0;
  int nRanks = 1;
  int device = -1;  ///< CUDA device, -1 on host ranks
  Topology topo;
  int timeoutMs = 10000;
  AsyncError asyncError;
  LaunchSettings launch;

  std::unique_ptr<HostStagedTransport> hostStaged;
  std::unique_ptr<CudaP2pTransport> p2p;
  std::unique_ptr<NcclTransport> nccl;
  std::unique_ptr<MulticastTransport> multicast;  ///< only where every rank's multicast gate is open

  /// The bound on a kernel's wait for a peer, in the units of %globaltimer.
  uint64_t timeoutNs() const { return static_cast<uint64_t>(timeoutMs) * 1000000ull; }
  /// Whether the transport of that name came up ("host_staged", "cuda_p2p", "nccl", "multicast";
  /// "" names none and is always there).
  bool hasTransport(const char* name) const;

  AlgoContext();
  ~AlgoContext();  // out of line: the transports are complete types there
};

}  // namespace tpcomm
