#include "algos/host_reduce.h"

#include <cstdint>
#include <cmath>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace tpcomm {

float bf16ToFloat(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t floatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>(u >> 16);
}

float f16ToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);
  } else if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: value = man * 2^-24
      float f = std::ldexp(static_cast<float>(man), -24);
      std::memcpy(&u, &f, 4);
      u |= sign;
    }
  } else {
    u = sign | ((exp + 112) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t floatToF16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (absu >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: inf
  if (absu < 0x38800000u) {                        // below the smallest normal 2^-14: subnormal
    // value / 2^-24 rounded to nearest even integer gives the subnormal mantissa.
    float a;
    std::memcpy(&a, &absu, 4);
    float scaled = a * 16777216.0f;  // exact: power-of-two scaling
    float r = std::nearbyint(scaled);  // default rounding mode: nearest even
    return sign | static_cast<uint16_t>(r);
  }
  uint32_t exp = (absu >> 23) - 112;
  uint32_t man = absu & 0x7fffffu;
  uint32_t h = (exp << 10) | (man >> 13);
  uint32_t rest = man & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // may carry into the exponent: fine
  return sign | static_cast<uint16_t>(h);
}

float loadAsFloat(const void* buf, size_t i, DataType dtype) {
  switch (dtype) {
    case DataType::kF32: return static_cast<const float*>(buf)[i];
    case DataType::kF16: return f16ToFloat(static_cast<const uint16_t*>(buf)[i]);
    case DataType::kBF16: return bf16ToFloat(static_cast<const uint16_t*>(buf)[i]);
  }
  return 0.0f;
}

void storeFromFloat(void* buf, size_t i, DataType dtype, float v) {
  switch (dtype) {
    case DataType::kF32: static_cast<float*>(buf)[i] = v; break;
    case DataType::kF16: static_cast<uint16_t*>(buf)[i] = floatToF16(v); break;
    case DataType::kBF16: static_cast<uint16_t*>(buf)[i] = floatToBf16(v); break;
  }
}

namespace {

inline float combine(float a, float b, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return a + b;
    case ReduceOp::kMax: return std::fmax(a, b);
    case ReduceOp::kMin: return std::fmin(a, b);
  }
  return a;
}

constexpr size_t kBlock = 256;  // elements: rank-outer over a small block keeps the inner loop vectorizable

// Reduces blocks of up to kBlock elements into acc (fp32, rank order 0..n-1) and hands each
// finished block to storeBlock(base, acc, len).
template <typename Load, typename StoreBlock>
void reduceLoop(size_t count, int n, ReduceOp op, Load load, StoreBlock storeBlock) {
  alignas(64) float acc[kBlock];
  for (size_t base = 0; base < count; base += kBlock) {
    size_t len = count - base < kBlock ? count - base : kBlock;
    for (size_t i = 0; i < len; ++i) acc[i] = load(0, base + i);
    for (int r = 1; r < n; ++r) {
      if (op == ReduceOp::kSum) {
        for (size_t i = 0; i < len; ++i) acc[i] += load(r, base + i);
      } else {
        for (size_t i = 0; i < len; ++i) acc[i] = combine(acc[i], load(r, base + i), op);
      }
    }
    storeBlock(base, acc, len);
  }
}

// f32 has its own loop with the source pointers hoisted so that the sum vectorizes at -O2/-O3
// with baseline flags (SSE2 on x86-64): the lambdas above reload srcs[r] per element.
template <typename StoreBlock>
void reduceF32(size_t count, int n, ReduceOp op, const float* const* s, StoreBlock storeBlock) {
  alignas(64) float acc[kBlock];
  for (size_t base = 0; base < count; base += kBlock) {
    size_t len = count - base < kBlock ? count - base : kBlock;
    const float* s0 = s[0] + base;
    for (size_t i = 0; i < len; ++i) acc[i] = s0[i];
    for (int r = 1; r < n; ++r) {
      const float* sr = s[r] + base;
      if (op == ReduceOp::kSum) {
        for (size_t i = 0; i < len; ++i) acc[i] += sr[i];
      } else {
        for (size_t i = 0; i < len; ++i) acc[i] = combine(acc[i], sr[i], op);
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
      reduceF32(count, n, op, reinterpret_cast<const float* const*>(srcs), [&](size_t base, const float* acc, size_t len) {
        for (int d = 0; d < nDst; ++d)
          storeBytes(static_cast<char*>(dsts[d]) + base * 4, reinterpret_cast<const char*>(acc), len * 4, streams(d));
      });
      break;
    case DataType::kF16:
    case DataType::kBF16: {
      auto s = reinterpret_cast<const uint16_t* const*>(srcs);
      alignas(64) uint16_t out[kBlock];
      auto store = [&](size_t base, const float* acc, size_t len) {  // round once, store everywhere
        for (size_t i = 0; i < len; ++i) out[i] = dtype == DataType::kF16 ? floatToF16(acc[i]) : floatToBf16(acc[i]);
        for (int d = 0; d < nDst; ++d)
          storeBytes(static_cast<char*>(dsts[d]) + base * 2, reinterpret_cast<const char*>(out), len * 2, streams(d));
      };
      if (dtype == DataType::kF16)
        reduceLoop(count, n, op, [&](int r, size_t i) { return f16ToFloat(s[r][i]); }, store);
      else
        reduceLoop(count, n, op, [&](int r, size_t i) { return bf16ToFloat(s[r][i]); }, store);
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
