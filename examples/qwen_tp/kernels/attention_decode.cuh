// attention_decode.cuh: split-sequence (flash-decoding) GQA attention for calls of 1..16 tokens.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace qwen {
namespace gpu {

/// Causal GQA attention of n queries (slots *pos + t) over the bf16 cache, flash-decoding style:
/// the sequence is cut into `splits` chunks of `chunk` slots, each block one (query, head,
/// chunk) with an online softmax; a second kernel merges the chunks. part* are scratch of
/// n * hq * splits * (D + 2) floats.
void attention(const __nv_bfloat16* q, const __nv_bfloat16* kCache, const __nv_bfloat16* vCache, const int32_t* pos,
               int n, int hq, int hk, int D, int splits, int chunk, float* part, __nv_bfloat16* out, cudaStream_t s);

}  // namespace gpu
}  // namespace qwen
