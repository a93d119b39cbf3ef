// partition() (algos/host/host_reduce.h): how a message is cut into per-rank slices. Every slice
// starts on a 16-byte vector boundary, slices are contiguous and cover [0, count) exactly once,
// earlier slices take the remainder, and small counts leave later slices empty.
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <vector>

#include "algos/host/host_reduce.h"

namespace tpcomm {
namespace {

// Counts around vector and rank multiples: odd counts, count < ranks, 16-byte tails.
const size_t kCounts[] = {0,  1,  2,  3,  4,  5,   7,    8,    9,    15,   16,   17,   31,
                          32, 33, 63, 64, 65, 127, 1000, 1023, 1024, 1025, 4097, 65537};
const int kParts[] = {1, 2, 3, 4, 5, 6, 7, 8, 16};
// Elements per 16-byte vector: f32 4, f16/bf16 8; 1 for unaligned use.
const size_t kAligns[] = {1, 2, 4, 8};

TEST(Partition, CoversExactlyOnceAlignedAndBalanced) {
  for (size_t count : kCounts)
    for (int parts : kParts)
      for (size_t align : kAligns) {
        SCOPED_TRACE("count " + std::to_string(count) + " parts " + std::to_string(parts) + " align " +
                     std::to_string(align));
        std::vector<int> owner(count, -1);
        size_t expectBegin = 0, prevSize = SIZE_MAX;
        const size_t units = (count + align - 1) / align;
        const size_t maxSize = (units + parts - 1) / parts * align;
        for (int p = 0; p < parts; ++p) {
          size_t b = 12345, e = 12345;
          partition(count, parts, p, align, &b, &e);
          ASSERT_LE(b, e) << "slice " << p;
          ASSERT_LE(e, count) << "slice " << p;
          EXPECT_EQ(b, expectBegin) << "slice " << p << " is not contiguous with the previous one";
          if (e > b) EXPECT_EQ(b % align, 0u) << "slice " << p << " starts off a vector boundary";
          EXPECT_LE(e - b, maxSize) << "slice " << p << " is larger than its share";
          EXPECT_LE(e - b, prevSize) << "slice " << p << " is larger than an earlier one";
          for (size_t i = b; i < e; ++i) {
            EXPECT_EQ(owner[i], -1) << "element " << i << " is in slices " << owner[i] << " and " << p;
            owner[i] = p;
          }
          expectBegin = e;
          prevSize = e - b;
        }
        EXPECT_EQ(expectBegin, count) << "slices end before count";
        for (size_t i = 0; i < count; ++i) ASSERT_NE(owner[i], -1) << "element " << i << " is in no slice";
      }
}

TEST(Partition, CountSmallerThanRanksLeavesLaterSlicesEmpty) {
  // 3 f32 elements over 8 ranks: one partial vector, all of it rank 0's.
  size_t b, e;
  partition(3, 8, 0, 4, &b, &e);
  EXPECT_EQ(b, 0u);
  EXPECT_EQ(e, 3u);
  for (int p = 1; p < 8; ++p) {
    partition(3, 8, p, 4, &b, &e);
    EXPECT_EQ(b, e) << "slice " << p;
    EXPECT_EQ(e, 3u) << "slice " << p;
  }
}

TEST(Partition, KnownSplits) {
  struct Row {
    size_t count;
    int parts;
    size_t align;
    std::vector<size_t> bounds;  // parts + 1 boundaries
  };
  const Row rows[] = {
      {16, 2, 4, {0, 8, 16}},          {17, 2, 4, {0, 12, 17}},  // 5 vectors: 3 + 2, the last one partial
      {10, 3, 1, {0, 4, 7, 10}},                                 // remainder to the earlier slices
      {8, 4, 8, {0, 8, 8, 8, 8}},                                // one bf16 vector: rank 0 only
      {33, 4, 8, {0, 16, 24, 32, 33}}, {0, 3, 4, {0, 0, 0, 0}},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE("count " + std::to_string(row.count) + " parts " + std::to_string(row.parts));
    for (int p = 0; p < row.parts; ++p) {
      size_t b, e;
      partition(row.count, row.parts, p, row.align, &b, &e);
      EXPECT_EQ(b, row.bounds[p]) << "slice " << p;
      EXPECT_EQ(e, row.bounds[p + 1]) << "slice " << p;
    }
  }
}

TEST(Partition, AlignZeroMeansOne) {
  size_t b, e;
  partition(7, 2, 1, 0, &b, &e);
  EXPECT_EQ(b, 4u);
  EXPECT_EQ(e, 7u);
}

}  // namespace
}  // namespace tpcomm
