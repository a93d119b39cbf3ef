// synth.h: the seeded synthetic-weight generator, identical on CPU and GPU. Element i of tensor
// t is a counter-based hash (splitmix64) of (seed, t, i) mapped to u in [-1, 1) with 24 bits,
// times a power-of-two scale, plus an offset (1 for norm weights). Every step is exact in fp32,
// so CPU and GPU produce the same values bit for bit (before the bf16 rounding both apply).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define QWEN_HD __host__ __device__
#else
#define QWEN_HD
#endif

namespace qwen {

QWEN_HD inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// Value of element `i` of synthetic tensor `tensorId`: offset + scale * u, u in [-1, 1).
QWEN_HD inline float synthValue(uint64_t seed, uint32_t tensorId, uint64_t i, float scale, float offset) {
  uint64_t h = splitmix64(splitmix64(seed ^ (static_cast<uint64_t>(tensorId) << 40)) ^ i);
  float u = static_cast<float>(static_cast<int32_t>(h >> 40) - (1 << 23)) * (1.0f / (1 << 23));  // exact
  return offset + scale * u;  // scale is a power of two: the product is exact, so FMA or not agrees
}

}  // namespace qwen
