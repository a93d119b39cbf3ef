// staged_host's slot layouts (src/algos/staged_host/staged_pieces.h), on the CPU: the copy-engine mode's
// dense compressed chunk fits its slot for every length up to stagedDenseElems, starts its
// scales 16-byte aligned, and holds whole quantization blocks (so the blocks start at the same
// multiples of kQuantBlockElems from the buffer's start as the SM kernel's piece layout: the
// same bits); the SM kernel's pieces cover the slot exactly once; the copy-engine mode's split
// (stagedCeChunkElems) keeps chunks aligned, inside the slot and at least `split` where it can.
#include "algos/staged_host/staged_pieces.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "algos/compressed/quantize.h"

namespace tpcomm {
namespace {

TEST(StagedPieces, DenseChunkFitsItsSlotAtEveryLength) {
  const size_t B = kQuantBlockElems;
  for (size_t chunkBytes : {size_t{4096}, size_t{65536}, size_t{1} << 20, size_t{4} << 20, size_t{1} << 30}) {
    const size_t elems = stagedDenseElems(chunkBytes, B);
    SCOPED_TRACE("chunkBytes " + std::to_string(chunkBytes));
    ASSERT_GT(elems, 0u);
    EXPECT_EQ(elems % B, 0u) << "whole quantization blocks";
    EXPECT_LE(stagedDenseBytes(elems, B), chunkBytes);
    // One more block would not fit: the chunk is as large as the slot allows.
    EXPECT_GT(stagedDenseBytes(elems + B, B), chunkBytes);
    for (size_t len : {size_t{1}, size_t{15}, size_t{16}, size_t{17}, B - 1, B, B + 1, elems / 2 + 3, elems - 1, elems}) {
      if (len > elems) continue;
      const size_t code = stagedDenseCodeBytes(len);
      EXPECT_GE(code, len);
      EXPECT_LT(code, len + 16);
      EXPECT_EQ(code % 16, 0u) << "scales 16-byte aligned after the codes, len " << len;
      EXPECT_EQ(stagedDenseBytes(len, B), code + (len + B - 1) / B * sizeof(float)) << "len " << len;
      EXPECT_LE(stagedDenseBytes(len, B), chunkBytes) << "len " << len;
    }
  }
}

TEST(StagedPieces, PiecesCoverTheSlotOnce) {
  for (size_t chunkBytes : {size_t{4096}, size_t{65536} + 16, size_t{1} << 20})
    for (int blocks : {1, 3, 16, 64}) {
      size_t next = 0;
      for (int b = 0; b < blocks; ++b) {
        size_t ub, ue;
        stagedPiece(chunkBytes, blocks, b, &ub, &ue);
        EXPECT_EQ(ub, next) << "chunkBytes " << chunkBytes << " blocks " << blocks << " b " << b;
        EXPECT_GE(ue, ub);
        next = ue;
      }
      EXPECT_EQ(next, chunkBytes / kStagedUnitBytes);
    }
}

TEST(StagedPieces, CeSplitKeepsChunksAlignedAndInsideTheSlot) {
  const size_t B = kQuantBlockElems;
  for (size_t es : {size_t{2}, size_t{4}})
    for (bool compressed : {false, true}) {
      const size_t slot = size_t{4} << 20;
      const size_t cap = compressed ? stagedDenseElems(slot, B) : slot / es;
      for (size_t count : {size_t{1}, size_t{1000}, size_t{1} << 18, (size_t{1} << 19) + 7, size_t{1} << 20,
                           size_t{3} << 20, size_t{8} << 20, size_t{40} << 20})
        for (int split : {1, 2, 4, 32}) {
          const size_t e = stagedCeChunkElems(count, es, cap, split);
          ASSERT_GT(e, 0u);
          EXPECT_LE(e, cap) << "count " << count << " split " << split;
          if (split == 1) EXPECT_EQ(e, cap);
          if (e != cap) {
            EXPECT_EQ(e % kStagedCeChunkAlign, 0u);  // whole quantization blocks, 16-byte offsets
            EXPECT_EQ(kStagedCeChunkAlign % B, 0u);
            EXPECT_GE(e * es, kStagedCeMinChunkBytes);
          }
          const size_t chunks = (count + e - 1) / e;
          // At least `split` chunks unless the minimum chunk forbids it; never more than the
          // larger of split and the whole-slot count (so kCeMaxChunks still bounds the call).
          const size_t whole = (count + cap - 1) / cap;
          EXPECT_LE(chunks, std::max<size_t>(static_cast<size_t>(split), whole));
          if (e != cap && count / static_cast<size_t>(split) * es >= kStagedCeMinChunkBytes)
            EXPECT_EQ(chunks, static_cast<size_t>(split)) << "count " << count;  // the split, exactly
        }
    }
  // The figures docs/host_staged.md quotes (bf16, 4 MiB slots, split 4).
  EXPECT_EQ(stagedCeChunkElems(size_t{1} << 19, 2, size_t{2} << 20, 4), size_t{1} << 20);  // 1 MB: one chunk
  EXPECT_EQ(stagedCeChunkElems(size_t{2} << 20, 2, size_t{2} << 20, 4), size_t{1} << 20);  // 4 MB: 2 x 2 MiB
  EXPECT_EQ(stagedCeChunkElems(size_t{8} << 20, 2, size_t{2} << 20, 4), size_t{2} << 20);  // 16 MB: whole slots
  const size_t int8Cap = stagedDenseElems(size_t{4} << 20, kQuantBlockElems);  // 16 MB +int8: 4 chunks, not 3
  EXPECT_EQ((size_t{8} << 20) / stagedCeChunkElems(size_t{8} << 20, 2, int8Cap, 4), 4u);
}

}  // namespace
}  // namespace tpcomm
