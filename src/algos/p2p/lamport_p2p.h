// lamport_p2p: what its class (lamport_p2p.cc) and its kernels (lamport_p2p.cu) share.
#pragma once

#include "algos/p2p/p2p_launch.h"
#include "transports/cuda_p2p.h"

namespace tpcomm {

/// Its region: three buffers (the rotation of lamport_p2p.cu) of one slot per sending rank, each
/// holding the largest message (maxBytes, rounded up to 256 bytes), and three local words: the
/// bytes each buffer last carried.
P2pScratchRequest lamportScratch(int blocks, size_t maxBytes);

/// Enqueue the plain / fused kernel (lamport_p2p.cu).
Status launchLamport(const P2pLaunch& p, cudaStream_t stream);
Status launchFusedLamport(const FusedP2pLaunch& f, cudaStream_t stream);
/// Loads every kernel this file's launchers may launch, and the sentinel fill.
Status preloadLamportKernels();
/// Every word of the region's buffers at `base` (this rank's) set to the sentinel, synchronously.
Status fillLamportBuffers(char* base, const P2pRegion& region);

}  // namespace tpcomm
