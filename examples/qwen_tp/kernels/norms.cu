// norms.cu: RMSNorm kernels (one block of 512 per row, fp32 sums; the row arithmetic in norm_rows.cuh).
#include <algorithm>
#include <cfloat>
#include <cstdint>

#include "kernels/common.cuh"
#include "kernels/norm_rows.cuh"
#include "kernels/norms.cuh"

namespace qwen {
namespace gpu {
namespace {

// The unfused twin of tpcomm's allReduceResidualRmsNorm epilogue, with its arithmetic: the
// residual rounded to bf16 after the add, the norm over the rounded values in fp32, and
// out = bf16((r * inv) * w). Only the order of the sum of squares differs from tpcomm's kernels
// (so the two paths agree to within an ulp of bf16, not bitwise).
__global__ void addRmsNormKernel(__nv_bfloat16* x, const __nv_bfloat16* add, const __nv_bfloat16* w, int H, float eps,
                                 __nv_bfloat16* out) {
  pdlLaunch();
  pdlWait();
  __nv_bfloat16* xr = x + static_cast<int64_t>(blockIdx.x) * H;
  const __nv_bfloat16* ar = add ? add + static_cast<int64_t>(blockIdx.x) * H : nullptr;
  float ss = 0.f;
  for (int i = threadIdx.x; i < H; i += blockDim.x) {
    float v = __bfloat162float(xr[i]);
    if (ar) {
      const __nv_bfloat16 r = __float2bfloat16_rn(__fadd_rn(v, __bfloat162float(ar[i])));
      xr[i] = r;
      v = __bfloat162float(r);
    }
    ss = __fmaf_rn(v, v, ss);
  }
  const float inv = invRmsRn(ss, H, eps);
  for (int i = threadIdx.x; i < H; i += blockDim.x)
    out[static_cast<int64_t>(blockIdx.x) * H + i] = scaleRn(__bfloat162float(xr[i]), inv, w[i]);
}

template <typename T>
__device__ __forceinline__ float toF(T v);
template <>
__device__ __forceinline__ float toF<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

template <typename T>
__global__ void rmsNormKernel(const T* in, int ldIn, const __nv_bfloat16* w, int H, float eps, __nv_bfloat16* out,
                              int ldOut) {
  pdlLaunch();
  pdlWait();
  const T* r = in + static_cast<int64_t>(blockIdx.x) * ldIn;
  rmsNormRow([&](int i) { return toF(r[i]); }, w, H, eps, out + static_cast<int64_t>(blockIdx.x) * ldOut);
}

}  // namespace

void addRmsNorm(__nv_bfloat16* x, const __nv_bfloat16* add, const __nv_bfloat16* w, int n, int H, float eps,
                __nv_bfloat16* out, cudaStream_t s) {
  launch(addRmsNormKernel, n, kNormThreads, s, x, add, w, H, eps, out);
}

void rmsNormBf16(const __nv_bfloat16* in, int ldIn, const __nv_bfloat16* w, int n, int H, float eps, __nv_bfloat16* out,
                 int ldOut, cudaStream_t s) {
  launch(rmsNormKernel<__nv_bfloat16>, n, kNormThreads, s, in, ldIn, w, H, eps, out, ldOut);
}

}  // namespace gpu
}  // namespace qwen
