// embed_norm.cuh: the first layer's input in one launch at tp == 1: embedding row + RMSNorm.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace qwen {
namespace gpu {

/// x[t] = E[tokens[t] - vocabBegin] (zero when this rank does not own the token) and
/// out[t] = rmsnorm(x[t]) * w: embed() followed by addRmsNorm(x, nullptr, w, ...), with
/// addRmsNorm's arithmetic, so the same bits in one launch instead of two. For tp == 1 only,
/// where the embedding needs no all-reduce between the gather and the norm.
void embedRmsNorm(const int32_t* tokens, int n, const __nv_bfloat16* E, int vocabBegin, int vocabLocal, int H,
                  const __nv_bfloat16* w, float eps, __nv_bfloat16* x, __nv_bfloat16* out, cudaStream_t s);

}  // namespace gpu
}  // namespace qwen
