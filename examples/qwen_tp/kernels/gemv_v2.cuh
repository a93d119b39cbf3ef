// gemv_v2.cuh: the v2 small-n GEMV's launcher, for gemv.cu's public functions (gemv.cuh says
// what each computes). Internal to kernels/.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace qwen {
namespace gpu {

/// Y = W X^T with gemv_parts.cuh's epilogue `epi` (kStore: bf16, or fp32 when yF32; kResidual;
/// kSwiglu: `out` is I, W has 2 I rows) and, when normW is set, the RMSNorm prologue. The caller
/// checked: gemvVectorizable(W, X, in), normW 16-byte aligned, out > 0, in > 0,
/// 1 <= n <= kGemvFusedMaxTokens (fp32 Y: n <= kGemvMaxTokens). Prepares the current device
/// first when gemvV2Prepare() has not. False, launching nothing, on a device before sm_90 or with
/// less shared memory a block than the ring needs (or when preparing fails): the caller then runs
/// v1.
bool gemvV2Launch(const __nv_bfloat16* W, int out, int in, const __nv_bfloat16* X, int n, void* Y, bool yF32,
                  const __nv_bfloat16* normW, float eps, int epi, cudaStream_t s);
/// Raises the v2 kernels' shared-memory limit on the current device (which also loads them);
/// true with nothing done on a device gemvV2Launch refuses.
bool gemvV2Prepare();

}  // namespace gpu
}  // namespace qwen
