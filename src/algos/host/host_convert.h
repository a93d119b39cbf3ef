// host_convert.h: branch-free element conversions of the host paths (host_reduce.cc, the host
// quantizers in quantize_host.cc). Every case is computed and then selected with masks, so that
// block loops over them vectorize at -O3 with baseline x86-64 flags (SSE2); results are bitwise
// those of the scalar definitions (tests/unit/host_reduce_test.cc compares exhaustively).
// Internal to src/: not part of the API.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace tpcomm {
namespace hostconv {

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
// element size (a float* deref of a misaligned address is undefined behaviour, which UBSan reports).
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
template <size_t kBlock, typename NarrowWide>
inline void narrowBlock(uint16_t* __restrict out, const float* __restrict acc, size_t len, NarrowWide narrowWide) {
  alignas(64) uint32_t wide[kBlock];
  for (size_t i = 0; i < len; ++i) wide[i] = narrowWide(acc[i]);
  for (size_t i = 0; i < len; ++i) out[i] = static_cast<uint16_t>(wide[i]);
}

}  // namespace hostconv
}  // namespace tpcomm
