// swiglu.cu: act = silu(gate) * up, fp32 math.
#include <algorithm>
#include <cfloat>
#include <cstdint>

#include "kernels/common.cuh"
#include "kernels/swiglu.cuh"

namespace qwen {
namespace gpu {
namespace {

__global__ void swigluKernel(const __nv_bfloat16* gu, int I, __nv_bfloat16* act) {
  pdlLaunch();
  pdlWait();
  const int t = blockIdx.y;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < I; i += gridDim.x * blockDim.x) {
    const float g = __bfloat162float(gu[static_cast<int64_t>(t) * 2 * I + i]);
    const float u = __bfloat162float(gu[static_cast<int64_t>(t) * 2 * I + I + i]);
    act[static_cast<int64_t>(t) * I + i] = __float2bfloat16_rn(g / (1.f + __expf(-g)) * u);
  }
}

// Prefill rows (n > kWideRows): eight elements a thread, in 16-byte loads and stores, where the
// scalar kernel's 2-byte accesses leave the copy rate unreached; the same arithmetic per element,
// so the same bits. Needs I % 8 == 0 and 16-byte aligned rows (checked by swiglu()).
__global__ void swigluVec8Kernel(const __nv_bfloat16* gu, int I, __nv_bfloat16* act) {
  pdlLaunch();
  pdlWait();
  const int t = blockIdx.y, v = blockIdx.x * blockDim.x + threadIdx.x;
  if (v >= I / 8) return;
  const uint4 g8 = reinterpret_cast<const uint4*>(gu + static_cast<int64_t>(t) * 2 * I)[v];
  const uint4 u8 = reinterpret_cast<const uint4*>(gu + static_cast<int64_t>(t) * 2 * I + I)[v];
  const __nv_bfloat16* g = reinterpret_cast<const __nv_bfloat16*>(&g8);
  const __nv_bfloat16* u = reinterpret_cast<const __nv_bfloat16*>(&u8);
  uint4 o8;
  __nv_bfloat16* o = reinterpret_cast<__nv_bfloat16*>(&o8);
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const float gf = __bfloat162float(g[k]), uf = __bfloat162float(u[k]);
    o[k] = __float2bfloat16_rn(gf / (1.f + __expf(-gf)) * uf);
  }
  reinterpret_cast<uint4*>(act + static_cast<int64_t>(t) * I)[v] = o8;
}

}  // namespace

void swiglu(const __nv_bfloat16* gu, int n, int I, __nv_bfloat16* act, cudaStream_t s) {
  if (wideRows(n) && I % 8 == 0 && aligned16(gu, act))
    launch(swigluVec8Kernel, dim3((I / 8 + 255) / 256, n), 256, s, gu, I, act);
  else
    launch(swigluKernel, dim3((I + 255) / 256, n), 256, s, gu, I, act);
}

}  // namespace gpu
}  // namespace qwen
