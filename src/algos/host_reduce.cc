#include "algos/host_reduce.h"

#include <cstdint>
#include <cmath>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace tpcomm {

// The conversions are branch-free (every case computed, then selected), so that the block loops
// below vectorize at -O3 with baseline x86-64 flags (SSE2): per-element branches kept the 16-bit
// reductions scalar at ~10-35 ns per element. Results are bitwise those of the earlier branchy
// versions (tests/unit/host_reduce_test.cc keeps them as a reference and compares exhaustively).
namespace {

constexpr size_t kBlock = 256;  // elements: rank-outer over a small block keeps the inner loop vectorizable

inline float bitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t floatToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Element loads through memcpy: the buffers are the caller's and need not be aligned to their
// element size (a float* deref of a misaligned address is undefined: UBSan, issue 21 item 12).
// GCC and Clang turn these into plain (unaligned) loads and still vectorize the loops.
inline float loadF32(const char* p, size_t i) {
  float f;
  std::memcpy(&f, p + i * 4, 4);
  return f;
}
inline uint16_t load16(const char* p, size_t i) {
  uint16_t h;
  std::memcpy(&h, p + i * 2, 2);
  return h;
}

inline float widenBf16(uint16_t h) { return bitsToFloat(static_cast<uint32_t>(h) << 16); }

// f16 -> f32, exact, in one path for all inputs. The f16 exponent and mantissa move to their f32
// position and the exponent is rebiased (15 -> 127: + 112 << 23). Zero and subnormals (exponent
// 0) get exponent 113 instead and then lose 2^-14: (1 + m/1024) * 2^-14 - 2^-14 = m * 2^-24, an
// exact subtraction of normal floats (m = 0 gives +0); every other input subtracts +0, which
// leaves a finite float as it is. inf/NaN (exponent 31 -> 143, still finite above) then get the
// exponent 255 by an OR, so a NaN keeps its payload bits exactly (signalling ones too).
// Choices are masks (all ones or zero), not ?:: GCC sinks an fp operation used on one side of a
// ?: into a branch, which it then will not if-convert (fp may trap), and the loop stays scalar.
inline float widenF16(uint16_t h) {
  uint32_t bits = h;
  uint32_t sign = (bits & 0x8000u) << 16;
  int32_t shifted = static_cast<int32_t>((bits & 0x7fffu) << 13);  // exponent and mantissa in place
  uint32_t isSubnormal = 0u - static_cast<uint32_t>(shifted < 0x00800000);
  uint32_t isInfNan = 0u - static_cast<uint32_t>(shifted >= 0x0f800000);
  uint32_t rebiased = static_cast<uint32_t>(shifted) + (112u << 23) + (isSubnormal & (1u << 23));
  float value = bitsToFloat(rebiased) - bitsToFloat(isSubnormal & (113u << 23));
  return bitsToFloat(floatToBits(value) | (isInfNan & 0x7f800000u) | sign);
}

// f32 -> f16, round to nearest even. Normal results: rebias (- 112 << 23) and add 0xfff plus the
// lowest kept mantissa bit, so the 13 dropped bits carry upward exactly when they exceed half an
// ulp, or equal it with the kept part odd (a carry into the exponent is the right answer).
// Subnormal results (|f| < 2^-14): |f| + 0.5 rounds |f| to a multiple of 2^-24 (the ulp of
// [0.5, 1)), and its low mantissa bits are that multiple (1024 = the smallest normal, right too).
// |f| >= 65520 (the tie above 65504, which goes to even = inf) and inf give inf; NaN gives the
// quiet NaN 0x7e00, keeping the sign. Comparisons are signed 32-bit (|f|'s bits fit) for SSE2.
// Returns the f16 bits in a uint32_t: the block loop keeps all the work 32 bits wide and narrows
// once at the end (see narrowBlock).
inline uint32_t narrowF16Wide(float f) {
  uint32_t u = floatToBits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  int32_t absBits = static_cast<int32_t>(u & 0x7fffffffu);
  uint32_t absu = static_cast<uint32_t>(absBits);
  uint32_t normal = (absu - (112u << 23) + 0xfffu + ((absu >> 13) & 1u)) >> 13;
  uint32_t subnormal = floatToBits(bitsToFloat(absu) + 0.5f) - 0x3f000000u;
  // Masks, not ?:, for every choice, as in widenF16 (the fp add must not sink into a branch).
  uint32_t isSubnormal = 0u - static_cast<uint32_t>(absBits < 0x38800000);
  uint32_t isInf = 0u - static_cast<uint32_t>(absBits >= 0x477ff000);
  uint32_t isNan = 0u - static_cast<uint32_t>(absBits > 0x7f800000);
  uint32_t h = (subnormal & isSubnormal) | (normal & ~isSubnormal);
  h = (0x7c00u & isInf) | (h & ~isInf);
  h = (0x7e00u & isNan) | (h & ~isNan);
  return h | sign;
}
inline uint16_t narrowF16(float f) { return static_cast<uint16_t>(narrowF16Wide(f)); }

// f32 -> bf16, round to nearest even (the carry of an all-ones mantissa makes the exponent go up,
// FLT_MAX to inf); NaN keeps its top payload bits and is made quiet.
inline uint32_t narrowBf16Wide(float f) {
  uint32_t u = floatToBits(f);
  uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  uint32_t quietNan = (u >> 16) | 0x40u;
  int32_t absBits = static_cast<int32_t>(u & 0x7fffffffu);
  return absBits > 0x7f800000 ? quietNan : rounded;
}
inline uint16_t narrowBf16(float f) { return static_cast<uint16_t>(narrowBf16Wide(f)); }

// out[i] = narrow(acc[i]), i < len <= kBlock. Two loops: when the conversion's result is stored
// as 16 bits, GCC narrows every intermediate mask to 16 bits separately (SSE2 has no cheap
// 32->16 pack, so each costs a punpck sequence); 32-bit results narrowed in one pass are ~2x faster.
template <typename NarrowWide>
inline void narrowBlock(uint16_t* __restrict out, const float* __restrict acc, size_t len, NarrowWide narrowWide) {
  alignas(64) uint32_t wide[kBlock];
  for (size_t i = 0; i < len; ++i) wide[i] = narrowWide(acc[i]);
  for (size_t i = 0; i < len; ++i) out[i] = static_cast<uint16_t>(wide[i]);
}

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
          narrowBlock(out, acc, len, [](float f) { return narrowF16Wide(f); });
          storeAll(base, len);
        });
      } else {
        reduce16(count, n, op, s, [](uint16_t h) { return widenBf16(h); }, [&](size_t base, const float* acc, size_t len) {
          narrowBlock(out, acc, len, [](float f) { return narrowBf16Wide(f); });
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
