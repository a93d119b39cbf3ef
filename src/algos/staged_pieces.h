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

}  // namespace tpcomm
