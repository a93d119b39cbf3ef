// rope.cuh: per-head q/k RMSNorm, rotate-half rotary, and the KV-cache store.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace qwen {
namespace gpu {

/// qkv [n, (hq + 2 hk) * D] -> per-head RMSNorm on q and k, rotate-half rotary at position
/// (*pos + ropeOffset + t); q -> q [n, hq * D]; k, v -> cache slots *pos + t ([ctx, hk, D]).
void qkNormRopeStore(const __nv_bfloat16* qkv, int n, int hq, int hk, int D, const __nv_bfloat16* qNorm,
                     const __nv_bfloat16* kNorm, float eps, float theta, const int32_t* pos, int ropeOffset,
                     __nv_bfloat16* q, __nv_bfloat16* kCache, __nv_bfloat16* vCache, cudaStream_t s);

}  // namespace gpu
}  // namespace qwen
