// attention_prefill_fa3.cuh: causal GQA attention for prefill chunks on Hopper (sm_90a), in the
// FlashAttention-3 schedule: wgmma, TMA, a producer warp and two consumer warpgroups.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace qwen {
namespace gpu {

/// True when attentionPrefillFa3 runs this shape on this device: compute capability 9.0 exactly
/// (the kernel is sm_90a machine code: wgmma and setmaxnreg exist nowhere else), head_dim 128,
/// hq a multiple of hk with at most 128 query heads per KV head, and a build that compiled the
/// sm_90a kernel (nvcc 12+). Anything else: attentionPrefill (the FlashAttention-2 kernel).
bool attentionPrefillFa3Supported(int D, int hq, int hk, int device);

/// Raises the kernel's dynamic shared memory limit on the current device and resolves the driver's
/// cuTensorMapEncodeTiled. Once per device at init, before any collective (the same reason as
/// prepareAttentionPrefill). false on a CUDA error or when the driver lacks the entry point.
bool prepareAttentionPrefillFa3();

/// attentionPrefill's contract (attention_prefill.cuh): n queries at positions *pos + t (*pos
/// read on the device) over cache slots 0 .. *pos + t, q [n, hq, D], caches [ctx, hk, D], out
/// [n, hq, D], bf16; fp32 scores, softmax and accumulation; *pos + n <= ctx. ctx, the slots the
/// caches hold, bounds the tensor maps (TMA reads nothing past it). Cache slots >= *pos + n may
/// hold anything, NaN included. The bits of a query's output depend on its position, its q row
/// and the cache slots up to its position only: not on n, on where the call starts, or on the
/// other rows of its tile (prefill in any chunking gives the same bits). Needs
/// attentionPrefillFa3Supported and 16-byte aligned q, caches and out. Returns false, launching
/// nothing, when a tensor map cannot be encoded (the caller then runs attentionPrefill).
bool attentionPrefillFa3(const __nv_bfloat16* q, const __nv_bfloat16* kCache, const __nv_bfloat16* vCache,
                         const int32_t* pos, int n, int hq, int hk, int D, int ctx, __nv_bfloat16* out, cudaStream_t s);

/// Kernel variants for A/B timing (prefill_ab.sh's microbenchmark); kDefault is what
/// attentionPrefillFa3 launches. kNoPingPong drops the named barriers that alternate the two
/// consumer warpgroups' GEMM issue (each warpgroup still overlaps its own softmax with its P V).
enum class Fa3Variant { kDefault, kNoPingPong };
bool attentionPrefillFa3Variant(Fa3Variant v, const __nv_bfloat16* q, const __nv_bfloat16* kCache,
                                const __nv_bfloat16* vCache, const int32_t* pos, int n, int hq, int hk, int D, int ctx,
                                __nv_bfloat16* out, cudaStream_t s);

}  // namespace gpu
}  // namespace qwen
