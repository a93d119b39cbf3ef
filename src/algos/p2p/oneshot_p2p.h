// oneshot_p2p: what its class (oneshot_p2p.cc) and its kernels (oneshot_p2p.cu) share.
#pragma once

#include "algos/p2p/p2p_launch.h"
#include "transports/cuda_p2p.h"

namespace tpcomm {

/// Its region: two buffers (epoch parity) of one inbox slot per sending rank, each holding the
/// largest message (maxBytes, rounded up to 256 bytes).
P2pScratchRequest oneshotScratch(int blocks, size_t maxBytes);

/// Enqueue the plain / fused kernel (oneshot_p2p.cu).
Status launchOneshot(const P2pLaunch& p, cudaStream_t stream);
Status launchFusedOneshot(const FusedP2pLaunch& f, cudaStream_t stream);
/// Loads every kernel launchOneshot and launchFusedOneshot may launch.
Status preloadOneshotKernels();

}  // namespace tpcomm
