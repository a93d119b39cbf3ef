// chunk_split.h: which packs of a chunk a block owns in twoshot_multicast (host and device, so
// the rule is unit-tested on the CPU: tests/unit/chunk_split_test.cc; multicast itself never
// runs on the machines we have).
//
// A chunk of `fullPacks` packs is cut into n slices (slice j: rank j) and each slice into one part
// per block. A shorter last chunk (`packs` < fullPacks) must use the FULL chunk's split, clipped:
// block b then owns, in every chunk, a subset of the same packs of the buffer, so it never writes
// a pack that another block (ordered only by other barriers) still reads from the previous chunk
// (twoshot_p2p clips the same way).
#pragma once

#include <cstddef>

#if defined(__CUDACC__)
#define TPCOMM_SPLIT_HD __host__ __device__
#else
#define TPCOMM_SPLIT_HD
#endif

namespace tpcomm {

/// [begin, end) of part p of `units` cut into `parts` as evenly as possible (the first
/// units % parts parts one longer).
TPCOMM_SPLIT_HD inline void splitUnits(size_t units, int parts, int p, size_t* begin, size_t* end) {
  const size_t per = units / parts, extra = units % parts, up = static_cast<size_t>(p);
  *begin = up * per + (up < extra ? up : extra);
  *end = *begin + per + (up < extra ? 1 : 0);
}

/// Packs [lo, hi) of a chunk of `packs` packs that block b of nb handles for slice j of n: part
/// b of slice j of a full chunk of `fullPacks` packs, clipped to `packs`.
TPCOMM_SPLIT_HD inline void chunkPart(size_t fullPacks, size_t packs, int n, int j, int nb, int b, size_t* lo,
                                      size_t* hi) {
  size_t s, e, a, z;
  splitUnits(fullPacks, n, j, &s, &e);
  splitUnits(e - s, nb, b, &a, &z);
  *lo = s + a < packs ? s + a : packs;
  *hi = s + z < packs ? s + z : packs;
}

}  // namespace tpcomm
