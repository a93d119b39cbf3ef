// The part every kernel's parameters start with: the call (buffers, count, dtype, op) and the
// ranks. Each family adds its own and fills them in one place from the algorithm context and the
// call: P2pLaunch / FusedP2pLaunch (p2p/p2p_launch.h, P2pAlgorithm::launchParams),
// StagedDeviceLaunch (staged_host/staged_host.h), MulticastLaunch (multicast/twoshot_multicast.h).
#pragma once

#include <cstddef>

#include "algos/common/coll_args.h"
#include "tpcomm/status.h"
#include "tpcomm/types.h"

namespace tpcomm {

struct CallParams {
  const void* send;
  void* recv;
  size_t count;
  int dtype;  // DataType
  int op;     // ReduceOp
  int rank, nRanks;
};

/// The call's part of a kernel's parameters.
inline CallParams callParams(const CollArgs& a, int rank, int nRanks) {
  return CallParams{a.send, a.recv, a.count, static_cast<int>(a.dtype), static_cast<int>(a.op), rank, nRanks};
}

}  // namespace tpcomm
