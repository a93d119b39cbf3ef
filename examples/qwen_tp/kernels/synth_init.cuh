// synth_init.cuh: seeded synthetic weights, the same values as the CPU reference (synth.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace qwen {
namespace gpu {

/// dst[r * cols + c] = bf16(synthValue(seed, id, (rowOff + r) * fullCols + colOff + c)).
void initSynthetic(__nv_bfloat16* dst, int64_t rows, int64_t cols, int64_t fullCols, int64_t rowOff, int64_t colOff,
                   uint64_t seed, uint32_t id, float scale, float offset, cudaStream_t s);

}  // namespace gpu
}  // namespace qwen
