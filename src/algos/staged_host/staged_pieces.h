// staged_pieces.h: how staged_host's GPU kernels split a staging slot among their CUDA blocks.
// Piece b of every slot is the same bytes in every use, whatever the call's size, dtype or wire
// format (staged_host.cu, staged_host_compressed.cu): publisher b writes it and reducer b of every
// rank reads it, so one flag per (rank, slot, block) says when it is written and when it is free,
// and plain and compressed calls interleave on the same slots and sequence numbers.
#pragma once

#include <cstddef>

#include "common/host_device.h"

namespace tpcomm {

constexpr size_t kStagedUnitBytes = 16;  // pieces are whole 16-byte units (one vector store)

/// Piece b of a chunkBytes slot split among `blocks`: units [*ub, *ue) of kStagedUnitBytes
/// (earlier pieces take the remainder).
TPCOMM_HD inline void stagedPiece(size_t chunkBytes, int blocks, int b, size_t* ub, size_t* ue) {
  const size_t units = chunkBytes / kStagedUnitBytes, per = units / blocks, extra = units % blocks;
  const size_t bb = static_cast<size_t>(b);
  *ub = bb * per + (bb < extra ? bb : extra);
  *ue = *ub + per + (bb < extra ? 1 : 0);
}

/// Compressed calls: quantization blocks (kQuantBlockElems codes + one fp32 scale) that every
/// piece holds per chunk, the smallest piece's worth (0: pieces too small for one).
TPCOMM_HD inline size_t stagedQuantBlocksPerPiece(size_t chunkBytes, int blocks, size_t quantBlockElems) {
  const size_t smallest = chunkBytes / kStagedUnitBytes / blocks * kStagedUnitBytes;
  return smallest / (quantBlockElems + sizeof(float));
}

/// The copy-engine mode's compressed slots (staged_host_ce.cu) are dense instead: a chunk of len
/// elements keeps its codes in bytes [0, stagedDenseCodeBytes(len)) and one fp32 scale per
/// quantization block right after, so a partial chunk copies only what it wrote. A chunk holds
/// stagedDenseElems elements: whole quantization blocks, so blocks start at the same multiples of
/// kQuantBlockElems from the buffer's start as in the piece layout (hence the same bits).
TPCOMM_HD inline size_t stagedDenseElems(size_t chunkBytes, size_t quantBlockElems) {
  return chunkBytes / (quantBlockElems + sizeof(float)) * quantBlockElems;
}
TPCOMM_HD inline size_t stagedDenseCodeBytes(size_t len) {
  return (len + kStagedUnitBytes - 1) / kStagedUnitBytes * kStagedUnitBytes;
}
TPCOMM_HD inline size_t stagedDenseBytes(size_t len, size_t quantBlockElems) {
  return stagedDenseCodeBytes(len) + (len + quantBlockElems - 1) / quantBlockElems * sizeof(float);
}

/// The copy-engine mode's chunk, in elements, for a call of count elements of elemBytes bytes whose
/// slot holds capacityElems: the whole slot, unless the call would fill fewer than `split` chunks;
/// then about count / split, in multiples of kStagedCeChunkAlign elements and never below
/// kStagedCeMinChunkBytes of input. Why: a call of one chunk runs its copies out (D2H), the wait
/// for every rank, and its copies in (H2D) one after the other, and the link's two directions take
/// turns; with several chunks the copies out of chunk c + 1 run while chunk c comes in (on H200 a
/// 4 MB plain call in one 4 MiB chunk took 350 us, about D2H + H2D + the stream operations). The
/// alignment is a multiple of the quantization block, so compressed blocks keep their offsets from
/// the buffer's start (the same bits whatever the split), and of 16 bytes for the vector kernels.
/// Every rank computes it from the same agreed inputs, so chunk boundaries (and the sequence
/// numbers they take) match.
constexpr size_t kStagedCeChunkAlign = 256;
constexpr size_t kStagedCeMinChunkBytes = size_t{2} << 20;  // 512 KiB chunks made 1 MB 1.07-1.14x slower
TPCOMM_HD inline size_t stagedCeChunkElems(size_t count, size_t elemBytes, size_t capacityElems, int split) {
  if (split <= 1) return capacityElems;
  size_t want = (count + static_cast<size_t>(split) - 1) / static_cast<size_t>(split);
  const size_t minElems = kStagedCeMinChunkBytes / elemBytes;
  if (want < minElems) want = minElems;
  want = (want + kStagedCeChunkAlign - 1) / kStagedCeChunkAlign * kStagedCeChunkAlign;
  return want < capacityElems ? want : capacityElems;
}

}  // namespace tpcomm
