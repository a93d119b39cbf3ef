// quantize_host.cc: fast host forms of quantize.h's block quantizers (see quantize_host.h).
//
// Why the scalar code is slow (perf on a 2-core VM): staged_host+fp8 spent its time
// in per-element branches (quantAmax's NaN test and max, fp8E4m3Encode's normal / subnormal /
// saturation cases, quantDecode's NaN / zero-scale tests) and in one out-of-line call per element
// for the dtype conversion (loadAsFloat / storeFromFloat switch on the dtype per element); no
// loop vectorized, ~5 ns per element and pass. Here every per-element choice is computed both
// ways and selected with masks (as host_convert.h does), the per-block choices (NaN or zero
// scale) are made once per block, and the dtype is chosen once per buffer, so the loops
// vectorize at -O3 with baseline SSE2. Each element function says which scalar one it equals.
#include "algos/compressed/quantize_host.h"

#include <cstring>

#include "algos/host/host_convert.h"

// x86-64: each public entry is also compiled for AVX2 (twice the vector width; no FMA, so the
// same roundings) and picked at load time by the CPU's features (GCC/Clang function multiversioning).
#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__)
#define TPCOMM_QUANT_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define TPCOMM_QUANT_CLONES
#endif

namespace tpcomm {

using namespace hostconv;

namespace {

constexpr int kB = kQuantBlockElems;

// fp8E4m3Encode(s), 32 bits wide. Normal E4M3 results (|s| >= 2^-6): round the 23-bit mantissa
// to 3 bits, nearest-even, by adding 0x7ffff plus the lowest kept bit (a carry into the exponent
// is right), and rebias the exponent (127 - 7 = 120: 120 << 3 = 960). Subnormal results: |s| +
// 2^14 rounds |s| to a multiple of 2^-9 (the float ulp at 2^14) in the hardware's nearest-even,
// and the low mantissa bits are that multiple k (k = 8 is the smallest normal, 0x08; |s| up to
// 2^-10 gives 0, as the scalar form's early return). Then saturation (|s| >= 448, Inf) to 0x7e,
// the sign unless the code is 0 (no -0), NaN to 0x7f.
inline uint32_t fp8EncodeWide(float s) {
  const uint32_t u = floatToBits(s);
  const uint32_t au = u & 0x7fffffffu;
  const int32_t a = static_cast<int32_t>(au);  // signed compares vectorize with SSE2
  const uint32_t normal = ((au + 0x7ffffu + ((au >> 20) & 1u)) >> 20) - 960u;
  const uint32_t sub = floatToBits(bitsToFloat(au) + 16384.0f) - 0x46800000u;
  const uint32_t isSub = 0u - static_cast<uint32_t>(a < 0x3c800000);
  const uint32_t isSat = 0u - static_cast<uint32_t>(a >= 0x43e00000);
  const uint32_t isNan = 0u - static_cast<uint32_t>(a > 0x7f800000);
  uint32_t q = (sub & isSub) | (normal & ~isSub);
  q = (0x7eu & isSat) | (q & ~isSat);
  const uint32_t code = (q | ((u >> 24) & 0x80u)) & (0u - static_cast<uint32_t>(q != 0));
  return (0x7fu & isNan) | (code & ~isNan);
}

// int8Encode(s), as its low byte: |s| >= 127 gives +-127, NaN 0, anything else nearest-even by
// adding 1.5 * 2^23 (the float ulp is 1 there, and rintf rounds in the same default mode): the
// sum's low mantissa bits are the integer in two's complement (-0 and ties as rintf). The cases
// are told apart on the bits (signed compares), not by float ?: (which GCC keeps as branches).
inline uint32_t int8EncodeWide(float s) {
  const uint32_t u = floatToBits(s);
  const int32_t a = static_cast<int32_t>(u & 0x7fffffffu);
  const uint32_t isNan = 0u - static_cast<uint32_t>(a > 0x7f800000);
  const uint32_t isBig = 0u - static_cast<uint32_t>(a >= 0x42fe0000);  // |s| >= 127
  const uint32_t rounded = floatToBits(s + 12582912.0f) - 0x4b400000u;
  const uint32_t clamped = 0x7fu + 2u * (u >> 31);  // 127 or -127 (0x81)
  return ((clamped & isBig) | (rounded & ~isBig)) & 0xffu & ~isNan;
}

// fp8E4m3Decode(c), exact. Normals: exponent e + 120 and mantissa m << 20 in place. Subnormals
// (e = 0) get the exponent of 2^-6 and then lose 2^-6: (1 + m/8) 2^-6 - 2^-6 = m 2^-9, an exact
// subtraction (m = 0 gives +0). Then the sign (0x80 reads -0, as the scalar); 0x7f and 0xff read
// the positive quiet NaN 0x7fc00000 (the scalar returns it before applying the sign).
inline float fp8DecodeBranchFree(uint32_t c) {
  const uint32_t mag = c & 0x7fu;
  const uint32_t isSub = 0u - static_cast<uint32_t>(mag < 8u);
  const uint32_t isNan = 0u - static_cast<uint32_t>(mag == 0x7fu);
  const uint32_t bits = (mag << 20) + (120u << 23) + (isSub & (1u << 23));
  const float v = bitsToFloat(bits) - bitsToFloat(isSub & 0x3c800000u);
  const uint32_t r = ((floatToBits(v) | ((c & 0x80u) << 24)) & ~isNan) | (isNan & 0x7fc00000u);
  return bitsToFloat(r);
}

// Elements x[0..m) of a buffer of dtype dt as floats (exact widenings).
inline __attribute__((always_inline)) void loadBlock(const void* x, DataType dt, size_t k, int m, float* __restrict v) {
  const char* p = static_cast<const char*>(x);
  switch (dt) {
    case DataType::kF32:
      std::memcpy(v, p + k * 4, static_cast<size_t>(m) * 4);
      break;
    case DataType::kF16:
      for (int i = 0; i < m; ++i) v[i] = widenF16(load16(p, k + i));
      break;
    case DataType::kBF16:
      for (int i = 0; i < m; ++i) v[i] = widenBf16(load16(p, k + i));
      break;
  }
}

// v[0..m) rounded to dt into elements [k, k + m) of out (storeFromFloat's roundings).
inline __attribute__((always_inline)) void storeBlock(const float* __restrict v, int m, void* out, size_t k,
                                                      DataType dt) {
  char* p = static_cast<char*>(out);
  alignas(64) uint16_t h[kB];
  switch (dt) {
    case DataType::kF32:
      std::memcpy(p + k * 4, v, static_cast<size_t>(m) * 4);
      return;
    case DataType::kF16:
      narrowBlock<kB>(h, v, m, [](float f) { return narrowF16Wide(f); });
      break;
    case DataType::kBF16:
      narrowBlock<kB>(h, v, m, [](float f) { return narrowBf16Wide(f); });
      break;
  }
  std::memcpy(p + k * 2, h, static_cast<size_t>(m) * 2);
}

inline __attribute__((always_inline)) void quantizeFloats(QuantFormat f, const float* __restrict x, int m,
                                                          uint8_t* __restrict codes, float* scale) {
  // quantAmax: for floats that are not NaN, |x| orders as its bits do, and the largest bits are
  // the largest |x| (+0 for zeros of either sign); NaN bits exceed Inf's, and quantScale turns
  // NaN or Inf alike into the NaN scale.
  int32_t mx = 0;
  for (int i = 0; i < m; ++i) {
    const int32_t a = static_cast<int32_t>(floatToBits(x[i]) & 0x7fffffffu);
    mx = a > mx ? a : mx;
  }
  const float s = quantScale(f, bitsToFloat(static_cast<uint32_t>(mx)));
  *scale = s;
  if (!(s > 0.0f)) {  // quantEncode's zero / NaN scale: every code 0
    std::memset(codes, 0, static_cast<size_t>(m));
    return;
  }
  alignas(64) float q[kB];
  alignas(64) uint32_t w[kB];
  for (int i = 0; i < m; ++i) q[i] = x[i] / s;
  if (f == QuantFormat::kFp8E4m3)
    for (int i = 0; i < m; ++i) w[i] = fp8EncodeWide(q[i]);
  else
    for (int i = 0; i < m; ++i) w[i] = int8EncodeWide(q[i]);
  for (int i = 0; i < m; ++i) codes[i] = static_cast<uint8_t>(w[i]);
}

inline __attribute__((always_inline)) void dequantizeFloats(QuantFormat f, const uint8_t* __restrict codes, float scale,
                                                            int m, float* __restrict out) {
  // quantDecode's per-block cases first: a NaN scale reads back itself, a zero scale +0.
  if (!(scale == scale) || scale == 0.0f) {
    const float v = scale == scale ? 0.0f : scale;
    for (int i = 0; i < m; ++i) out[i] = v;
    return;
  }
  alignas(64) float v[kB];
  if (f == QuantFormat::kFp8E4m3)
    for (int i = 0; i < m; ++i) v[i] = fp8DecodeBranchFree(codes[i]);
  else
    for (int i = 0; i < m; ++i) v[i] = static_cast<float>(static_cast<int8_t>(codes[i]));
  for (int i = 0; i < m; ++i) {
    const float r = quantMul(v[i], scale);
    out[i] = bitsToFloat(floatToBits(r) & (0u - static_cast<uint32_t>(r != 0.0f)));  // never -0
  }
}

}  // namespace

TPCOMM_QUANT_CLONES void hostQuantizeFloats(QuantFormat f, const float* x, int m, uint8_t* codes, float* scale) {
  quantizeFloats(f, x, m, codes, scale);
}

TPCOMM_QUANT_CLONES void hostDequantizeFloats(QuantFormat f, const uint8_t* codes, float scale, int m, float* out) {
  dequantizeFloats(f, codes, scale, m, out);
}

TPCOMM_QUANT_CLONES void hostQuantize(QuantFormat f, const void* x, DataType dt, size_t count, uint8_t* codes,
                                      float* scales) {
  alignas(64) float v[kB];
  for (size_t k = 0; k < count; k += kB) {
    const int m = static_cast<int>(count - k < kB ? count - k : kB);
    loadBlock(x, dt, k, m, v);
    quantizeFloats(f, v, m, codes + k, &scales[k / kB]);
  }
}

TPCOMM_QUANT_CLONES void hostDequantize(QuantFormat f, const uint8_t* codes, const float* scales, size_t count,
                                        void* out, DataType dt) {
  alignas(64) float v[kB];
  for (size_t k = 0; k < count; k += kB) {
    const int m = static_cast<int>(count - k < kB ? count - k : kB);
    dequantizeFloats(f, codes + k, scales[k / kB], m, v);
    storeBlock(v, m, out, k, dt);
  }
}

TPCOMM_QUANT_CLONES void hostQuantizedSum(QuantFormat f, const uint8_t* const* codes, const float* const* scales, int n,
                                          size_t count, uint8_t* outCodes, float* outScales) {
  alignas(64) float acc[kB], v[kB];
  for (size_t k = 0; k < count; k += kB) {
    const int m = static_cast<int>(count - k < kB ? count - k : kB);
    const size_t s = k / kB;
    dequantizeFloats(f, codes[0] + k, scales[0][s], m, acc);
    for (int r = 1; r < n; ++r) {
      dequantizeFloats(f, codes[r] + k, scales[r][s], m, v);
      for (int i = 0; i < m; ++i) acc[i] = quantAdd(acc[i], v[i]);
    }
    quantizeFloats(f, acc, m, outCodes + k, &outScales[s]);
  }
}

}  // namespace tpcomm
