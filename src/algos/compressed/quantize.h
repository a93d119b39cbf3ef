// quantize.h: block-scaled FP8 (E4M3) and INT8 codes for compressed all-reduce
// (docs/compression.md). Host and device share these functions, so a host rank, a kernel and the
// CPU tests produce the same bits. Nothing here allocates or synchronises.
//
// A block of n elements becomes n one-byte codes and one fp32 scale:
//   fp8:  scale = amax / 448 (448: E4M3's largest finite value), code = e4m3(x / scale)
//   int8: scale = amax / 127, code = round-half-even(x / scale), in [-127, 127]
// and element i reads back as decode(code_i) * scale. Rules:
//   - amax is over the block's |x|; a block holding NaN or +-Inf gets scale NaN, so every element
//     of that block reads back NaN (E4M3 has no infinity; the non-finite value is not lost in
//     silence). A zero block (or one so small that amax / 448 underflows to 0) reads back +0.
//   - The zero rule of docs/determinism.md: -0 encodes as +0, so no code reads back -0.
//   - Rounding is to nearest, ties to even, in both formats; fp8 saturates to +-448 (the scaled
//     values reach 448 only by the scale's own rounding).
// Division (x / scale) rather than a reciprocal multiply: the reciprocal of a tiny scale
// overflows, and a rounded reciprocal would add a second rounding.
#pragma once

#include <math.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "tpcomm/types.h"

#include "common/host_device.h"

#if defined(__CUDACC__)
#include <cuda_fp8.h>
#endif

namespace tpcomm {

enum class QuantFormat : int { kFp8E4m3 = 0, kInt8 = 1 };

/// Elements that share one fp32 scale on the compressed all-reduce's wire (docs/compression.md:
/// 64 costs 4/64 byte per element of scales and keeps an outlier's reach to 64 elements).
constexpr int kQuantBlockElems = 64;

/// The quantizer of a communicator's compression (kNone has none: callers check first).
inline QuantFormat quantFormatOf(Compression c) {
  return c == Compression::kInt8 ? QuantFormat::kInt8 : QuantFormat::kFp8E4m3;
}

/// Bytes of `elems` elements on the compressed wire: one code each and one scale per started block.
TPCOMM_HD inline size_t quantWireBytes(size_t elems) {
  return elems + (elems + kQuantBlockElems - 1) / kQuantBlockElems * sizeof(float);
}

/// a * b and a + b rounded once each, never contracted into an FMA (nvcc fuses a product and a
/// sum it can see across inlined calls; the host compilers here do not fuse without -mfma): the
/// host and the kernels must produce the same bits.
TPCOMM_HD inline float quantMul(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
TPCOMM_HD inline float quantAdd(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

constexpr float kFp8E4m3Max = 448.0f;
constexpr float kInt8Max = 127.0f;

TPCOMM_HD inline uint32_t quantFloatBits(float v) {
  uint32_t u;
  memcpy(&u, &v, sizeof(u));
  return u;
}

TPCOMM_HD inline float quantBitsFloat(uint32_t u) {
  float v;
  memcpy(&v, &u, sizeof(v));
  return v;
}

/// float -> E4M3 (OCP "fn": bias 7, no infinity, 0x7f/0xff NaN), nearest-even, saturating to
/// +-448; NaN -> 0x7f; results that are zero are +0 (0x00).
TPCOMM_HD inline uint8_t fp8E4m3Encode(float v) {
  const uint32_t u = quantFloatBits(v);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7f;                         // NaN
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  // The hardware conversion (cvt.rn.satfinite.e4m3x2.f32) follows the rules here (nearest-even,
  // finite values past 448 and +-Inf to +-448) except one: a result that rounds to zero keeps its
  // sign, and the definition's zero is +0. The branches below cost the fp8 quantizer ~40% of
  // int8's rate (quantize_gpu_bench on H200); the bits are checked against the host
  // quantizer by that bench and the *Compressed* GPU tests.
  const uint8_t hw = static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
  return (hw & 0x7fu) == 0 ? 0 : hw;
#endif
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  if (a >= 0x43e00000u) return static_cast<uint8_t>(sign | 0x7eu);  // >= 448 (and Inf): saturate
  const int exp = static_cast<int>(a >> 23) - 127;
  const uint32_t m = a & 0x7fffffu;
  uint32_t q;
  if (exp >= -6) {  // normal in E4M3: keep 3 of the 23 mantissa bits
    q = (static_cast<uint32_t>(exp + 7) << 3) | (m >> 20);
    const uint32_t rest = m & 0xfffffu;
    if (rest > 0x80000u || (rest == 0x80000u && (q & 1u))) ++q;  // a carry into the exponent is right
  } else {  // E4M3 subnormal: k * 2^-9, k = mant24 * 2^(exp - 14)
    if (exp < -10 || (a >> 23) == 0) return 0;  // below 2^-10 (half the smallest step), float subnormals
    const uint32_t mant = m | 0x800000u;
    const int shift = 14 - exp;  // 21 .. 24
    q = mant >> shift;
    const uint32_t rest = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    if (rest > half || (rest == half && (q & 1u))) ++q;  // k = 8 is 0x08, the smallest normal
  }
  return q == 0 ? 0 : static_cast<uint8_t>(sign | q);
}

/// E4M3 -> float (exact).
TPCOMM_HD inline float fp8E4m3Decode(uint8_t c) {
  const uint32_t e = (c >> 3) & 0xfu, m = c & 7u;
  if (e == 15 && m == 7) return quantBitsFloat(0x7fc00000u);
  // Exact in float: (8 + m) * 2^(e - 10) for normals, m * 2^-9 for subnormals.
  float v = e == 0 ? static_cast<float>(m) * 0.001953125f
                   : static_cast<float>(8 + m) * quantBitsFloat(static_cast<uint32_t>(e + 117) << 23);
  return (c & 0x80u) ? -v : v;
}

/// float (already divided by the scale) -> int8 code in [-127, 127]; NaN -> 0 (the block's NaN
/// scale carries it).
TPCOMM_HD inline int8_t int8Encode(float v) {
  if (!(v == v)) return 0;
  if (v >= kInt8Max) return 127;
  if (v <= -kInt8Max) return -127;
  return static_cast<int8_t>(rintf(v));  // nearest-even (the default rounding mode); -0.0f gives 0
}

/// The block's scale: amax / 448 or amax / 127; NaN when amax is not finite.
TPCOMM_HD inline float quantScale(QuantFormat f, float amax) {
  if (!(amax <= 3.402823466e38f)) return quantBitsFloat(0x7fc00000u);  // NaN or Inf inside
  return amax / (f == QuantFormat::kFp8E4m3 ? kFp8E4m3Max : kInt8Max);
}

/// max |x_i| over the block; NaN if any element is NaN, Inf if any is infinite.
TPCOMM_HD inline float quantAmax(const float* x, int n) {
  float amax = 0.0f;
  bool nan = false;
  for (int i = 0; i < n; ++i) {
    const float a = x[i] < 0 ? -x[i] : x[i];
    nan = nan || !(a == a);
    amax = a > amax ? a : amax;
  }
  return nan ? quantBitsFloat(0x7fc00000u) : amax;
}

/// One element's code under `scale` (finite and > 0; 0 gives code 0).
TPCOMM_HD inline uint8_t quantEncode(QuantFormat f, float x, float scale) {
  if (!(scale > 0.0f)) return 0;  // zero block, or NaN scale (the scale alone reads back NaN)
  // +-0 is code 0 in both formats. A zero dividend is swapped for 1 before the division: on the
  // GPU, IEEE division is a fast path guarded by a range check (FCHK) with an out-of-line slow
  // path whose first test sends zero and subnormal operands to special handling, and data read
  // back from int8 codes (what an in-place compressed call quantizes from its second call on) is
  // ~16% zeros inside non-zero blocks. It does: on that data the guard makes the int8 quantizer
  // 1.6-1.7x faster (quantize_gpu_bench's "divide zeros" column on H200); the bits are the same.
  const bool zero = x == 0.0f;
  const float s = (zero ? 1.0f : x) / scale;
  if (zero) return 0;
  return f == QuantFormat::kFp8E4m3 ? fp8E4m3Encode(s) : static_cast<uint8_t>(int8Encode(s));
}

/// One element read back. A NaN scale reads back NaN, a zero scale +0.
TPCOMM_HD inline float quantDecode(QuantFormat f, uint8_t code, float scale) {
  const float v = f == QuantFormat::kFp8E4m3 ? fp8E4m3Decode(code) : static_cast<float>(static_cast<int8_t>(code));
  if (!(scale == scale)) return scale;
  if (scale == 0.0f) return 0.0f;
  const float r = quantMul(v, scale);
  return r == 0.0f ? 0.0f : r;  // the zero rule: never -0
}

/// Quantizes a block of n elements: codes[0..n) and *scale.
TPCOMM_HD inline void quantizeBlock(QuantFormat f, const float* x, int n, uint8_t* codes, float* scale) {
  const float s = quantScale(f, quantAmax(x, n));
  for (int i = 0; i < n; ++i) codes[i] = quantEncode(f, x[i], s);
  *scale = s;
}

/// Reads a block back into out[0..n).
TPCOMM_HD inline void dequantizeBlock(QuantFormat f, const uint8_t* codes, float scale, int n, float* out) {
  for (int i = 0; i < n; ++i) out[i] = quantDecode(f, codes[i], scale);
}

}  // namespace tpcomm
