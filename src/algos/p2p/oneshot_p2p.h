// oneshot_p2p: what its class (oneshot_p2p.cc) and its kernels (oneshot_p2p.cu) share.
#pragma once

#include "algos/p2p/p2p_launch.h"

namespace tpcomm {

/// Its region: two buffers (epoch parity) of one inbox slot per sending rank, each holding the
/// largest message (maxBytes, rounded up to 256 bytes).
P2pScratchRequest oneshotScratch(int blocks, size_t maxBytes);

/// Its kernels, plain and fused (oneshot_p2p.cu).
extern const P2pKernels kOneshotKernels;

}  // namespace tpcomm
