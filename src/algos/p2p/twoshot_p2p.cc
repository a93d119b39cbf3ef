// twoshot_p2p: reduce-scatter then all-gather, both by push (kernels and memory ordering:
// twoshot_p2p.cu). Two barrier round trips; each rank sends 2(n-1)/n x the message, the
// bandwidth-optimal amount, so it wins from medium sizes up. Any size: the kernel loops over
// chunks of TPCOMM_TWOSHOT_CHUNK_BYTES. Fused twin: fused_twoshot_p2p. It also runs the two
// halves as collectives of their own, reduce-scatter and all-gather (twoshot_p2p_halves.cu), on
// the same scratch and epochs.
#include "algos/p2p/twoshot_p2p.h"

#include <memory>

#include "algos/p2p/p2p_algorithm.h"
#include "common/error.h"
#include "common/params.h"

namespace tpcomm {

P2pScratchRequest twoshotScratch(int nRanks, int blocks, size_t chunkBytes) {
  P2pScratchRequest r;
  r.key = "twoshot_p2p";
  r.blocks = blocks;
  r.sharedBytes = alignUp(chunkBytes, 4096);
  r.slotBytes = alignUp(r.sharedBytes / nRanks + 16, 256);
  r.buffers = 2;
  return r;
}

bool fusedTwoshotGeometry(const P2pRegion& region, int nRanks, size_t rows, size_t rowBytes, size_t* rowsPerChunk,
                          size_t* rowsPerRank) {
  const size_t n = static_cast<size_t>(nRanks);
  if (rowBytes == 0 || n == 0) return false;
  // Gather area: normalised row + updated residual row for every row of the chunk.
  size_t perChunk = region.sharedBytes / (2 * rowBytes);
  // Inbox slice: the rows one rank owns.
  const size_t perRankCap = region.slotBytes / rowBytes;
  if (perChunk == 0 || perRankCap == 0) return false;
  if (perChunk > rows) perChunk = rows;
  size_t perRank = (perChunk + n - 1) / n;
  if (perRank > perRankCap) {
    perRank = perRankCap;
    perChunk = perRank * n;
  }
  *rowsPerChunk = perChunk;
  *rowsPerRank = perRank;
  return true;
}

P2pScratchRequest TwoshotP2pBase::scratch(int nRanks) const {
  return twoshotScratch(nRanks, ctx_->launch.twoshotBlocks, static_cast<size_t>(paramInt(ParamId::kTwoshotChunkBytes)));
}

namespace {

class TwoshotP2p final : public TwoshotP2pBase {
 public:
  explicit TwoshotP2p(const AlgoContext* ctx)
      : TwoshotP2pBase(ctx, "twoshot_p2p", "fused_twoshot_p2p", TPCOMM_P2P_KERNELS(kTwoshotKernels)) {}

 protected:
  bool runsHalves() const override { return true; }
};

}  // namespace

std::unique_ptr<Algorithm> makeTwoshotP2p(const AlgoContext* ctx) { return std::make_unique<TwoshotP2p>(ctx); }

}  // namespace tpcomm
