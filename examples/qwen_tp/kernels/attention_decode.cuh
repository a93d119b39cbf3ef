// attention_decode.cuh: split-sequence (flash-decoding) GQA attention for calls of 1..16 tokens.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace qwen {
namespace gpu {

/// Most splits attention() takes (the combine kernel's bound).
constexpr int kAttentionMaxSplits = 128;

/// Causal GQA attention of n queries (slots *pos + t) over the bf16 cache, flash-decoding style
/// (split-K): a query attending to len slots cuts them into at most `splits` chunks of
/// max(chunk, len / splits) slots rounded up to 64, each block one (chunk, KV head's query heads
/// or one query head, token) with an online softmax; a second kernel merges the chunks. splits
/// <= kAttentionMaxSplits; part is scratch of n * hq * splits * (D + 2) floats.
void attention(const __nv_bfloat16* q, const __nv_bfloat16* kCache, const __nv_bfloat16* vCache, const int32_t* pos,
               int n, int hq, int hk, int D, int splits, int chunk, float* part, __nv_bfloat16* out, cudaStream_t s);

}  // namespace gpu
}  // namespace qwen
