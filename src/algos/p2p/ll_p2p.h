// ll_p2p: what its class (ll_p2p.cc) and its kernels (ll_p2p.cu) share.
#pragma once

#include "algos/p2p/p2p_launch.h"

namespace tpcomm {

/// Its region for nRanks ranks: two buffers (epoch parity) of one slot per sending rank, a slot
/// holding the largest piece (at most ceil(maxBytes / nRanks) bytes) as 16-byte lines of 8 payload
/// bytes. maxBytes 0: empty slots (ll_p2p is off).
P2pScratchRequest llScratch(int nRanks, int blocks, size_t maxBytes);

/// Its reduce-scatter and all-gather kernels, by P2pLaunch::kind (ll_p2p.cu); no fused kernel.
extern const P2pKernels kLlKernels;

}  // namespace tpcomm
