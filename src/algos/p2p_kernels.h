// Launch interface of the P2P kernels (oneshot_p2p, twoshot_p2p, lamport_p2p). The algorithm
// classes are plain C++; the kernels live in the .cu files and are stubs without CUDA.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tpcomm/status.h"
#include "tpcomm/types.h"
#include "transports/cuda_p2p.h"

namespace tpcomm {

struct P2pLaunch {
  const void* send;
  void* recv;
  size_t count;
  int dtype;  // DataType
  int op;     // ReduceOp
  int rank, nRanks;
  int blocks;
  char* peers[kMaxP2pRanks];  // every rank's buffer base as mapped here (peers[rank]: local)
  P2pLayout layout;
  uint32_t* errorWord;
  uint64_t timeoutNs;
  int pdl;  // launched with programmatic dependent launch (sm_90+)
};

/// Whether the kernels can use 16-byte vectors for these buffers.
inline bool p2pVectorizable(const void* send, const void* recv) {
  return (reinterpret_cast<uintptr_t>(send) % 16) == 0 && (reinterpret_cast<uintptr_t>(recv) % 16) == 0;
}

Status launchOneshot(const P2pLaunch& p, cudaStream_t stream);
Status launchTwoshot(const P2pLaunch& p, cudaStream_t stream);
Status launchLamport(const P2pLaunch& p, cudaStream_t stream);
/// Fills `bytes` (multiple of 4) at `p` with kLamportSentinel words.
Status launchLamportFill(char* p, size_t bytes, cudaStream_t stream);

/// Load every variant of each kernel into the current device's context (dev::preload: lazy
/// loading may otherwise wait for the device to go idle at a first launch).
Status preloadOneshotKernels();
Status preloadTwoshotKernels();
Status preloadLamportKernels();

}  // namespace tpcomm
