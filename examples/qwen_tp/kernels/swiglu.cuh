// swiglu.cuh: the SwiGLU activation of the fused gate/up projection.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace qwen {
namespace gpu {

/// act[t, i] = silu(gu[t, i]) * gu[t, I + i] (gate columns first, then up).
void swiglu(const __nv_bfloat16* gu, int n, int I, __nv_bfloat16* act, cudaStream_t s);

}  // namespace gpu
}  // namespace qwen
