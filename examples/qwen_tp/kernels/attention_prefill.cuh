// attention_prefill.cuh: causal GQA attention for calls of many tokens (prefill chunks), on the
// tensor cores, FlashAttention-2 style.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace qwen {
namespace gpu {

/// True when attentionPrefill runs this head_dim (a multiple of 16, at most 128) on this device
/// (sm_80+: mma.sync bf16, ldmatrix, cp.async). Else the caller uses gpu::attention.
bool attentionPrefillSupported(int D, int device);

/// Gives the current device's kernels their dynamic shared memory limit. Once per device before
/// the first attentionPrefill and before any collective: cudaFuncSetAttribute is a host call
/// into the context that may wait on work in flight, so it must not run while another rank
/// sharing the GPU spins in an all-reduce (docs/reliability.md). false on a CUDA error.
bool prepareAttentionPrefill();

/// Causal GQA attention of n queries at positions *pos + t (t < n; *pos read on the device) over
/// cache slots 0 .. *pos + t, the call's own keys included (qkNormRopeStore has stored them).
/// q [n, hq, D], caches [ctx, hk, D], out [n, hq, D], all bf16; fp32 scores, online softmax and
/// accumulation. The `group = hq / hk` query heads sharing a KV head are packed into the rows of
/// one tile, so a K/V tile read from memory serves the whole group. The caller guarantees
/// *pos + n <= ctx. Needs attentionPrefillSupported(D).
void attentionPrefill(const __nv_bfloat16* q, const __nv_bfloat16* kCache, const __nv_bfloat16* vCache,
                      const int32_t* pos, int n, int hq, int hk, int D, __nv_bfloat16* out, cudaStream_t s);

}  // namespace gpu
}  // namespace qwen
