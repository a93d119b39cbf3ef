// synth_init.cu: seeded synthetic weights on the GPU (synth.h, as the CPU reference).
#include <algorithm>
#include <cfloat>
#include <cstdint>

#include "kernels/common.cuh"
#include "kernels/synth_init.cuh"
#include "synth.h"

namespace qwen {
namespace gpu {
namespace {

__global__ void initSyntheticKernel(__nv_bfloat16* dst, int64_t rows, int64_t cols, int64_t fullCols, int64_t rowOff,
                                    int64_t colOff, uint64_t seed, uint32_t id, float scale, float offset) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t r = i / cols, c = i % cols;
    uint64_t g = static_cast<uint64_t>((rowOff + r) * fullCols + colOff + c);
    dst[i] = __float2bfloat16_rn(synthValue(seed, id, g, scale, offset));
  }
}

}  // namespace

void initSynthetic(__nv_bfloat16* dst, int64_t rows, int64_t cols, int64_t fullCols, int64_t rowOff, int64_t colOff,
                   uint64_t seed, uint32_t id, float scale, float offset, cudaStream_t s) {
  int64_t n = rows * cols;
  int blocks = static_cast<int>(std::min<int64_t>((n + 255) / 256, 65535));
  if (n > 0)
    initSyntheticKernel<<<blocks, 256, 0, s>>>(dst, rows, cols, fullCols, rowOff, colOff, seed, id, scale, offset);
}

}  // namespace gpu
}  // namespace qwen
