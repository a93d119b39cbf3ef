// twoshot_multicast's chunk geometry (src/algos/multicast/chunk_split.h), on the CPU
// since multicast never runs on our machines: for every chunk length up to a full chunk, the
// parts of all (slice, block) pairs cover the chunk's packs exactly once, and block b's part of a
// shorter chunk lies inside its part of a full chunk (so a short last chunk never has a block
// write packs that another block still reads from the chunk before).
#include "algos/multicast/chunk_split.h"

#include <gtest/gtest.h>

#include <vector>

namespace tpcomm {
namespace {

TEST(ChunkSplit, ShortChunkPartsStayInsideTheFullChunksParts) {
  for (size_t fullPacks : {1u, 2u, 7u, 64u, 1000u, 4097u})
    for (int n : {2, 3, 4, 8})
      for (int nb : {1, 3, 64}) {
        std::vector<size_t> lens = {0, 1, fullPacks / 3, fullPacks / 2 + 1, fullPacks - 1, fullPacks};
        for (size_t packs : lens) {
          if (packs > fullPacks) continue;
          SCOPED_TRACE("fullPacks " + std::to_string(fullPacks) + " packs " + std::to_string(packs) + " n " +
                       std::to_string(n) + " blocks " + std::to_string(nb));
          std::vector<int> covered(packs, 0);
          for (int j = 0; j < n; ++j)
            for (int b = 0; b < nb; ++b) {
              size_t lo, hi, flo, fhi;
              chunkPart(fullPacks, packs, n, j, nb, b, &lo, &hi);
              chunkPart(fullPacks, fullPacks, n, j, nb, b, &flo, &fhi);
              ASSERT_LE(lo, hi);
              if (lo < hi) {
                EXPECT_GE(lo, flo) << "slice " << j << " block " << b;
                EXPECT_LE(hi, fhi) << "slice " << j << " block " << b;
              }
              for (size_t k = lo; k < hi; ++k) ++covered[k];
            }
          for (size_t k = 0; k < packs; ++k) ASSERT_EQ(covered[k], 1) << "pack " << k;
        }
      }
}

TEST(ChunkSplit, SplitUnitsIsEvenAndContiguous) {
  for (size_t units : {0u, 1u, 5u, 64u, 65u})
    for (int parts : {1, 2, 7, 64}) {
      size_t prevEnd = 0;
      for (int p = 0; p < parts; ++p) {
        size_t b, e;
        splitUnits(units, parts, p, &b, &e);
        EXPECT_EQ(b, prevEnd);
        EXPECT_TRUE(e - b == units / parts || e - b == units / parts + 1);
        prevEnd = e;
      }
      EXPECT_EQ(prevEnd, units);
    }
}

}  // namespace
}  // namespace tpcomm
