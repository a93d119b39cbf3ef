// twoshot_p2p: what its class (twoshot_p2p.cc), its kernels (twoshot_p2p.cu,
// twoshot_p2p_halves.cu) and its compressed forms (twoshot_p2p_compressed.*) share.
#pragma once

#include "algos/p2p/p2p_launch.h"
#include "transports/cuda_p2p.h"

namespace tpcomm {

/// The region for nRanks ranks, shared with the compressed forms (one key): two buffers (epoch
/// parity), each n inbox slices of one rank's share of a chunk (rounded up to whole 16-byte
/// packs plus one spare pack, then to 256 bytes) and a gather area of one chunk (chunkBytes
/// rounded up to 4096).
P2pScratchRequest twoshotScratch(int nRanks, int blocks, size_t chunkBytes);

/// The fused kernel's geometry: rows per chunk such that the chunk's rows (normalised + residual,
/// 2 x rowBytes each) fit the gather area and each rank's share fits its inbox slice (the region
/// over nRanks ranks). false when one row does not fit (the caller falls back to the unfused path).
bool fusedTwoshotGeometry(const P2pRegion& region, int nRanks, size_t rows, size_t rowBytes, size_t* rowsPerChunk,
                          size_t* rowsPerRank);

/// Enqueue the all-reduce / fused kernel (twoshot_p2p.cu).
Status launchTwoshot(const P2pLaunch& p, cudaStream_t stream);
Status launchFusedTwoshot(const FusedP2pLaunch& f, cudaStream_t stream);
Status preloadTwoshotKernels();
/// Enqueue the reduce-scatter or all-gather kernel, by p.kind (twoshot_p2p_halves.cu).
Status launchTwoshotHalves(const P2pLaunch& p, cudaStream_t stream);
Status preloadTwoshotHalvesKernels();

}  // namespace tpcomm
