// Everything one rank of a communicator owns: identity, topology, transports, and the error word
// that kernels and helper threads use to report asynchronous failures. Algorithms reach their
// transport through this.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "topology/topology.h"
#include "tpcomm/bootstrap.h"
#include "tpcomm/status.h"

namespace tpcomm {

class HostStagedTransport;
class CudaP2pTransport;
class NcclTransport;
class MulticastTransport;

/// Asynchronous error report. GPU kernels write `word` (pinned, device-mapped host memory) on a
/// bounded wait's expiry; host code reads it without synchronizing. Layout: bits 0..15 the
/// Status, bits 16..31 the peer rank + 1 (0: unknown).
struct AsyncError {
  volatile uint32_t* word = nullptr;  ///< host view (pinned, or plain memory on host ranks)
  uint32_t* deviceWord = nullptr;     ///< device view of the same word (GPU ranks)
  static uint32_t encode(Status s, int peer) {
    return static_cast<uint32_t>(s) | (static_cast<uint32_t>(peer + 1) << 16);
  }
};

struct CommContext {
  int rank = 0;
  int nRanks = 1;
  int device = -1;  ///< CUDA device, -1 on host ranks
  Bootstrap* bootstrap = nullptr;
  Topology topo;
  int timeoutMs = 10000;
  AsyncError asyncError;

  std::unique_ptr<HostStagedTransport> hostStaged;
  std::unique_ptr<CudaP2pTransport> p2p;
  std::unique_ptr<NcclTransport> nccl;
  std::unique_ptr<MulticastTransport> multicast;  ///< only where every rank's multicast gate is open

  CommContext();
  ~CommContext();
  /// Why a transport is not set up ("" when it is), for the INFO table and tpcomm-doctor.
  std::string hostStagedWhyNot, p2pWhyNot, ncclWhyNot, multicastWhyNot;
};

}  // namespace tpcomm
