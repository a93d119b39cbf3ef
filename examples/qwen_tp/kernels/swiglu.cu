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

}  // namespace

void swiglu(const __nv_bfloat16* gu, int n, int I, __nv_bfloat16* act, cudaStream_t s) {
  launch(swigluKernel, dim3((I + 255) / 256, n), 256, s, gu, I, act);
}

}  // namespace gpu
}  // namespace qwen
