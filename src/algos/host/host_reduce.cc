#include "algos/host/host_reduce.h"

#include <cstdint>
#include <cmath>
#include <cstring>

#include "algos/host/host_convert.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace tpcomm {

// The conversions (host_convert.h) are branch-free (every case computed, then selected), so that
// the block loops below vectorize at -O3 with baseline x86-64 flags (SSE2): per-element branches
// kept the 16-bit reductions scalar at ~10-35 ns per element. Results are bitwise those of the
// earlier branchy versions (tests/unit/host_reduce_test.cc keeps them as a reference and compares
// exhaustively).
using namespace hostconv;

namespace {
constexpr size_t kBlock = 256;  // elements: rank-outer over a small block keeps the inner loop vectorizable
}  // namespace

float bf16ToFloat(uint16_t h) { return widenBf16(h); }
uint16_t floatToBf16(float f) { return narrowBf16(f); }
float f16ToFloat(uint16_t h) { return widenF16(h); }
uint16_t floatToF16(float f) { return narrowF16(f); }

float loadAsFloat(const void* buf, size_t i, DataType dtype) {
  const char* p = static_cast<const char*>(buf);
  switch (dtype) {
    case DataType::kF32: return loadF32(p, i);
    case DataType::kF16: return f16ToFloat(load16(p, i));
    case DataType::kBF16: return bf16ToFloat(load16(p, i));
  }
  return 0.0f;
}

void storeFromFloat(void* buf, size_t i, DataType dtype, float v) {
  char* p = static_cast<char*>(buf);
  uint16_t h;
  switch (dtype) {
    case DataType::kF32: std::memcpy(p + i * 4, &v, 4); break;
    case DataType::kF16: h = floatToF16(v), std::memcpy(p + i * 2, &h, 2); break;
    case DataType::kBF16: h = floatToBf16(v), std::memcpy(p + i * 2, &h, 2); break;
  }
}

namespace {

// kZeroRule (docs/determinism.md): every tpcomm algorithm reads a -0.0 input as +0.0 (x + 0.0f,
// which leaves every other value, NaN included, unchanged), so a zero result is +0.0 whatever the
// algorithm, the rank order or the op. For a sum, normalising the first operand is enough (an
// exact zero sum is +0 unless every operand is -0); max and min normalise every operand, since
// fmax/fmin may return either zero.
inline float combine(float a, float b, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return a + b;
    case ReduceOp::kMax: return std::fmax(a, b);
    case ReduceOp::kMin: return std::fmin(a, b);
  }
  return a;
}


// 16-bit sources: each block of up to kBlock elements is widened and accumulated in fp32 in
// rank order 0..n-1 (acc = ((s0 + s1) + s2) + ...), with the source pointers hoisted and the
// conversion inlined so that both vectorize; max/min widen into a scratch block first and keep
// std::fmax/fmin per element (their NaN and signed-zero choices are the library's). Each finished
// block goes to storeBlock(base, acc, len).
template <typename Widen, typename StoreBlock>
void reduce16(size_t count, int n, ReduceOp op, const char* const* s, Widen widen, StoreBlock storeBlock) {
  alignas(64) float acc[kBlock];
  alignas(64) float wide[kBlock];
  for (size_t base = 0; base < count; base += kBlock) {
    size_t len = count - base < kBlock ? count - base : kBlock;
    const char* __restrict s0 = s[0] + base * 2;
    for (size_t i = 0; i < len; ++i) acc[i] = widen(load16(s0, i)) + 0.0f;  // -0 reads as +0 (kZeroRule)
    for (int r = 1; r < n; ++r) {
      const char* __restrict sr = s[r] + base * 2;
      if (op == ReduceOp::kSum) {
        for (size_t i = 0; i < len; ++i) acc[i] += widen(load16(sr, i));
      } else {
        for (size_t i = 0; i < len; ++i) wide[i] = widen(load16(sr, i)) + 0.0f;
        for (size_t i = 0; i < len; ++i) acc[i] = combine(acc[i], wide[i], op);
      }
    }
    storeBlock(base, acc, len);
  }
}

// f32 has its own loop with the source pointers hoisted so that the sum vectorizes at -O2/-O3
// with baseline flags (SSE2 on x86-64): the lambdas above reload srcs[r] per element.
template <typename StoreBlock>
void reduceF32(size_t count, int n, ReduceOp op, const char* const* s, StoreBlock storeBlock) {
  alignas(64) float acc[kBlock];
  for (size_t base = 0; base < count; base += kBlock) {
    size_t len = count - base < kBlock ? count - base : kBlock;
    const char* s0 = s[0] + base * 4;
    for (size_t i = 0; i < len; ++i) acc[i] = loadF32(s0, i) + 0.0f;  // -0 reads as +0 (kZeroRule)
    for (int r = 1; r < n; ++r) {
      const char* sr = s[r] + base * 4;
      if (op == ReduceOp::kSum) {
        for (size_t i = 0; i < len; ++i) acc[i] += loadF32(sr, i);
      } else {
        for (size_t i = 0; i < len; ++i) acc[i] = combine(acc[i], loadF32(sr, i) + 0.0f, op);
      }
    }
    storeBlock(base, acc, len);
  }
}

// Stores `bytes` from `src` (16-byte aligned) to `dst`; non-temporal where asked and possible.
inline void storeBytes(char* dst, const char* src, size_t bytes, bool streaming) {
#if defined(__SSE2__)
  if (streaming && (reinterpret_cast<uintptr_t>(dst) & 15) == 0) {
    size_t body = bytes & ~static_cast<size_t>(63);
    for (size_t i = 0; i < body; i += 64) {
      __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
      __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
      __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
      __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
    }
    if (bytes > body) std::memcpy(dst + body, src + body, bytes - body);
    return;
  }
#else
  (void)streaming;
#endif
  std::memcpy(dst, src, bytes);
}

}  // namespace

void hostReduceTo(void* const* dsts, int nDst, const void* const* srcs, int n, size_t count, DataType dtype,
                  ReduceOp op, uint64_t streamMask) {
  auto streams = [streamMask](int d) { return d < 64 && ((streamMask >> d) & 1u) != 0; };
  switch (dtype) {
    case DataType::kF32:
      reduceF32(count, n, op, reinterpret_cast<const char* const*>(srcs), [&](size_t base, const float* acc, size_t len) {
        for (int d = 0; d < nDst; ++d)
          storeBytes(static_cast<char*>(dsts[d]) + base * 4, reinterpret_cast<const char*>(acc), len * 4, streams(d));
      });
      break;
    case DataType::kF16:
    case DataType::kBF16: {
      auto s = reinterpret_cast<const char* const*>(srcs);
      alignas(64) uint16_t out[kBlock];
      auto storeAll = [&](size_t base, size_t len) {
        for (int d = 0; d < nDst; ++d)
          storeBytes(static_cast<char*>(dsts[d]) + base * 2, reinterpret_cast<const char*>(out), len * 2, streams(d));
      };
      if (dtype == DataType::kF16) {  // round once, store everywhere
        reduce16(count, n, op, s, [](uint16_t h) { return widenF16(h); }, [&](size_t base, const float* acc, size_t len) {
          narrowBlock<kBlock>(out, acc, len, [](float f) { return narrowF16Wide(f); });
          storeAll(base, len);
        });
      } else {
        reduce16(count, n, op, s, [](uint16_t h) { return widenBf16(h); }, [&](size_t base, const float* acc, size_t len) {
          narrowBlock<kBlock>(out, acc, len, [](float f) { return narrowBf16Wide(f); });
          storeAll(base, len);
        });
      }
      break;
    }
  }
}

void hostReduce(void* dst, const void* const* srcs, int n, size_t count, DataType dtype, ReduceOp op) {
  hostReduceTo(&dst, 1, srcs, n, count, dtype, op, 0);
}

void hostCopy(void* dst, const void* src, size_t bytes, bool streaming) {
#if defined(__SSE2__)
  if (streaming) {
    storeBytes(static_cast<char*>(dst), static_cast<const char*>(src), bytes, true);
    return;
  }
#endif
  (void)streaming;
  std::memcpy(dst, src, bytes);
}

void hostStreamFence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

void partition(size_t count, int parts, int p, size_t align, size_t* begin, size_t* end) {
  if (align == 0) align = 1;
  size_t units = (count + align - 1) / align;  // whole vectors, the last maybe partial
  size_t per = units / parts, extra = units % parts;
  size_t b = p * per + (static_cast<size_t>(p) < extra ? p : extra);
  size_t e = b + per + (static_cast<size_t>(p) < extra ? 1 : 0);
  *begin = b * align < count ? b * align : count;
  *end = e * align < count ? e * align : count;
}

}  // namespace tpcomm
