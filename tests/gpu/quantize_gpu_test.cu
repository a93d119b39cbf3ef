// The E4M3 encoder on the GPU against its definition on the host (algos/compressed/quantize.h). On sm_89+
// the device path is the hardware conversion (cvt.rn.satfinite.e4m3x2.f32) with the sign of a
// zero result cleared; the host path is the software rounding the CPU tests pin down. Every float
// bit pattern whose magnitude is in [2^-12, 2^11) (both signs: all E4M3 normals, subnormals,
// ties and the saturation edge at 448..464), then every 65537th pattern of all 2^32 (float
// subnormals, large values, NaNs), then the specials by name (+-0, +-Inf, NaNs, 448, 464, ...),
// must give the same code. Before sm_89 the device runs the same software rounding as the host:
// the test then checks only that it compiles to the same bits.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "algos/compressed/quantize.h"

namespace {

__global__ void encodePatterns(uint32_t first, uint32_t stride, uint32_t n, uint8_t* out) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const uint32_t bits = first + i * stride;
  float v;
  memcpy(&v, &bits, sizeof(v));
  out[i] = tpcomm::fp8E4m3Encode(v);
}

// Encodes n patterns first, first + stride, ... on the GPU and on the host; adds the differences
// to *bad and keeps the first one of the whole test.
struct Mismatches {
  uint64_t count = 0;
  uint32_t first = 0;
  uint8_t gpu = 0, host = 0;
};

void compareRange(uint32_t first, uint32_t stride, uint32_t n, uint8_t* dev, std::vector<uint8_t>* out, Mismatches* bad) {
  encodePatterns<<<(n + 255) / 256, 256>>>(first, stride, n, dev);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  out->resize(n);
  ASSERT_EQ(cudaMemcpy(out->data(), dev, n, cudaMemcpyDeviceToHost), cudaSuccess);
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t bits = first + i * stride;
    float v;
    std::memcpy(&v, &bits, sizeof(v));
    const uint8_t want = tpcomm::fp8E4m3Encode(v);
    if ((*out)[i] == want) continue;
    if (bad->count++ == 0) *bad = Mismatches{1, bits, (*out)[i], want};
  }
}

TEST(QuantizeGpu, Fp8EncoderMatchesTheHostDefinition) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) GTEST_SKIP() << "no GPU";
  constexpr uint32_t kChunk = 1u << 24;
  uint8_t* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, kChunk), cudaSuccess);
  std::vector<uint8_t> out;
  Mismatches bad;
  uint64_t checked = 0;
  // Exponent fields 115..137 (2^-12 .. 2^11), each sign: 23 x 2^23 patterns per sign.
  for (uint32_t sign : {0u, 0x80000000u})
    for (uint32_t lo = sign | (115u << 23); lo < (sign | (138u << 23)); lo += kChunk) {
      compareRange(lo, 1, kChunk, dev, &out, &bad);
      checked += kChunk;
    }
  // Everything else, sparsely (an odd stride, so the low mantissa bits vary).
  const uint32_t sparse = 65537, count = static_cast<uint32_t>((1ull << 32) / sparse);
  compareRange(0, sparse, count, dev, &out, &bad);
  checked += count;
  // The specials by name.
  const uint32_t specials[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u,
                               0x7f800001u, 0x00000001u, 0x80000001u, 0x43e00000u, 0x43e7ffffu, 0x43e80000u,
                               0xc3e80000u, 0x3a800000u, 0xba800000u, 0x3b000000u, 0x7f7fffffu};
  for (uint32_t b : specials) compareRange(b, 1, 1, dev, &out, &bad);
  cudaFree(dev);
  EXPECT_EQ(bad.count, 0u) << "of " << checked << " patterns; first: 0x" << std::hex << bad.first << " gives 0x"
                           << static_cast<int>(bad.gpu) << " on the GPU, 0x" << static_cast<int>(bad.host)
                           << " on the host";
}

}  // namespace
