// twoshot_p2p: what its class (twoshot_p2p.cc), its kernels (twoshot_p2p.cu,
// twoshot_p2p_halves.cu) and its compressed forms (twoshot_p2p_compressed.*) share.
#pragma once

#include <vector>

#include "algos/p2p/p2p_algorithm.h"
#include "algos/p2p/p2p_launch.h"

namespace tpcomm {

/// The region for nRanks ranks, shared with the compressed forms (one key): two buffers (epoch
/// parity), each n inbox slices of one rank's share of a chunk (rounded up to whole 16-byte
/// packs plus one spare pack, then to 256 bytes) and a gather area of one chunk (chunkBytes
/// rounded up to 4096).
P2pScratchRequest twoshotScratch(int nRanks, int blocks, size_t chunkBytes);

/// What twoshot_p2p and its compressed forms share: the region (one key: their calls interleave
/// on its epochs and buffers, with its grid TPCOMM_TWOSHOT_BLOCKS) and no size limit (chunks).
class TwoshotP2pBase : public P2pAlgorithm {
 public:
  using P2pAlgorithm::P2pAlgorithm;
  std::vector<ParamId> sizedBy() const override { return {ParamId::kTwoshotChunkBytes}; }

 protected:
  P2pScratchRequest scratch(int nRanks) const override;
  size_t maxBytes() const override { return 0; }  // loops over chunks
};

/// The fused kernel's geometry: rows per chunk such that the chunk's rows (normalised + residual,
/// 2 x rowBytes each) fit the gather area and each rank's share fits its inbox slice (the region
/// over nRanks ranks). false when one row does not fit (the caller falls back to the unfused path).
bool fusedTwoshotGeometry(const P2pRegion& region, int nRanks, size_t rows, size_t rowBytes, size_t* rowsPerChunk,
                          size_t* rowsPerRank);

/// Its kernels (twoshot_p2p.cu): the all-reduce, or by P2pLaunch::kind the reduce-scatter and
/// all-gather of twoshot_p2p_halves.cu; the fused one.
extern const P2pKernels kTwoshotKernels;
/// The reduce-scatter or all-gather kernel, by p.kind, and their preload (twoshot_p2p_halves.cu).
Status launchTwoshotHalves(const P2pLaunch& p, cudaStream_t stream);
Status preloadTwoshotHalvesKernels();

}  // namespace tpcomm
