// lamport_p2p: what its class (lamport_p2p.cc) and its kernels (lamport_p2p.cu) share.
#pragma once

#include "algos/p2p/p2p_launch.h"

namespace tpcomm {

/// Its region: three buffers (the rotation of lamport_p2p.cu) of one slot per sending rank, each
/// holding the largest message (maxBytes, rounded up to 256 bytes), and three local words: the
/// bytes each buffer last carried.
P2pScratchRequest lamportScratch(int blocks, size_t maxBytes);

/// Its kernels, plain and fused (lamport_p2p.cu); their preload loads the sentinel fill too.
extern const P2pKernels kLamportKernels;
/// Every word of the region's buffers at `base` (this rank's) set to the sentinel, synchronously.
Status fillLamportBuffers(char* base, const P2pRegion& region);

}  // namespace tpcomm
