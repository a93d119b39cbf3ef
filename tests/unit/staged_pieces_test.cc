// staged_host's slot layouts (src/algos/staged_pieces.h), on the CPU: the copy-engine mode's
// dense compressed chunk fits its slot for every length up to stagedDenseElems, starts its
// scales 16-byte aligned, and holds whole quantization blocks (so the blocks start at the same
// multiples of kQuantBlockElems from the buffer's start as the SM kernel's piece layout: the
// same bits); the SM kernel's pieces cover the slot exactly once.
#include "algos/staged_pieces.h"

#include <gtest/gtest.h>

#include "algos/quantize.h"

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

}  // namespace
}  // namespace tpcomm
