// l2_ahead.h: which bytes of the next product's weights the decode attention asks L2 for, as
// plain arithmetic, so GpuModel and CPU-only tests use the kernel's rule.
//
// Between a layer's qkv and o products run the q/k norm + RoPE and the attention. At short
// contexts they read a few MB and device memory idles for several microseconds; the o product
// then starts from nothing (its first loads pay the full memory latency). So while the attention
// waits on the kernel before it (before its PDL wait), its threads ask L2 for the first
// bytesPerRow of every row of o's matrix (cp.async.bulk.prefetch.L2, fire and forget). The
// stream reads each row from its start, so a prefix of every row keeps its warps even. A hint only:
// no bits change. Past maxLen slots the attention's own KV keeps memory busy and would evict
// the lines before the product reads them, so no request is made.
#pragma once

#include <cstddef>
#include <cstdint>

namespace qwen {
namespace gpu {

struct L2Ahead {
  const void* base = nullptr;  // row r at base + r * rowBytes; null: no prefetch
  int rows = 0;
  int64_t rowBytes = 0;
  int bytesPerRow = 0;  // a multiple of 16, at most rowBytes
  int maxLen = 0;       // the call's last query attends to at most this many slots
};

/// The plan for a matrix of `rows` rows of `rowBytes` bytes (16-byte aligned rows): at most
/// `budgetBytes` in all, the same prefix of every row (rounded down to 128 bytes, at least 128,
/// else no prefetch), and only while the attention's KV (`kvBytesPerSlot` a slot) takes at most
/// `kvMaxBytes`. A null plan when any argument makes it pointless or unsafe.
inline L2Ahead planL2Ahead(const void* w, int rows, int64_t rowBytes, size_t budgetBytes, int64_t kvBytesPerSlot,
                           size_t kvMaxBytes) {
  L2Ahead a;
  if (!w || rows <= 0 || rowBytes <= 0 || rowBytes % 16 != 0 || reinterpret_cast<uintptr_t>(w) % 16 != 0 ||
      kvBytesPerSlot <= 0)
    return a;
  int64_t per = static_cast<int64_t>(budgetBytes / static_cast<size_t>(rows));
  if (per >= rowBytes) per = rowBytes;  // whole rows (a multiple of 16)
  else if ((per = per / 128 * 128) < 128) return a;
  const int64_t maxLen = static_cast<int64_t>(kvMaxBytes) / kvBytesPerSlot;
  if (maxLen < 1) return a;
  a.base = w, a.rows = rows, a.rowBytes = rowBytes;
  a.bytesPerRow = static_cast<int>(per > (1 << 30) ? (1 << 30) : per);
  a.maxLen = static_cast<int>(maxLen > (1 << 30) ? (1 << 30) : maxLen);
  return a;
}

}  // namespace gpu
}  // namespace qwen
