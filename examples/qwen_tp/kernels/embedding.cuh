// embedding.cuh: vocab-parallel embedding lookup and a bf16 row copy.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace qwen {
namespace gpu {

/// Vocab-parallel embedding: x[t] = E[tok - vocabBegin] when this rank owns the token, else 0;
/// the caller all-reduces x (exact: one non-zero term per element). tokens are global ids.
void embed(const int32_t* tokens, int n, const __nv_bfloat16* E, int vocabBegin, int vocabLocal, int H,
           __nv_bfloat16* x, cudaStream_t s);

/// dst[i] = src[i] (bf16 rows copy helper for the MTP's hidden input).
void copyRowsBf16(const __nv_bfloat16* src, int ldSrc, __nv_bfloat16* dst, int ldDst, int n, int cols, cudaStream_t s);

}  // namespace gpu
}  // namespace qwen
