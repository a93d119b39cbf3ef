// embed_norm.cu: embedding gather + the first layer's input RMSNorm, one block per token: a decode
// step at a launch-bound size pays ~3.5 us per kernel; this saves one per step.
#include <cstdint>

#include "kernels/embed_norm.cuh"
#include "kernels/norm_rows.cuh"
#include "kernels/norms.cuh"

namespace qwen {
namespace gpu {
namespace {

// addRmsNormKernel with add == nullptr over the row it gathers: the same per-thread element
// order (block of kNormThreads), fma sum of squares and rounding, so the same bits. As in
// addRmsNormKernel, thread t's elements t, t + 512, ... are all loaded before their first use:
// the norm weights before the PDL wait (no kernel writes them), the token and then its row after
// it, so the gather costs one round trip where the loop form below pays one per element (8 at
// hidden 4096: ~9 us a launch under ncu). Rows up to kNormPerThread x kNormThreads.
__global__ void embedRmsNormKernel(const int32_t* tokens, const __nv_bfloat16* E, int vocabBegin, int vocabLocal, int H,
                                   const __nv_bfloat16* w, float eps, __nv_bfloat16* x, __nv_bfloat16* out) {
  pdlLaunch();
  auto at = [H](int k) { return min(static_cast<int>(threadIdx.x) + k * kNormThreads, H - 1); };
  __nv_bfloat16 wv[kNormPerThread], ev[kNormPerThread];
#pragma unroll
  for (int k = 0; k < kNormPerThread; ++k) wv[k] = w[at(k)];
  pdlWait();
  const int t = blockIdx.x;
  const int local = tokens[t] - vocabBegin;
  const bool mine = local >= 0 && local < vocabLocal;
  const __nv_bfloat16* er = E + static_cast<int64_t>(mine ? local : 0) * H;
#pragma unroll
  for (int k = 0; k < kNormPerThread; ++k) ev[k] = mine ? er[at(k)] : __float2bfloat16_rn(0.f);
  __nv_bfloat16* xr = x + static_cast<int64_t>(t) * H;
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < kNormPerThread; ++k) {
    const int i = threadIdx.x + k * kNormThreads;
    if (i >= H) break;
    xr[i] = ev[k];
    const float v = __bfloat162float(ev[k]);
    ss = __fmaf_rn(v, v, ss);
  }
  const float inv = invRmsRn(ss, H, eps);
#pragma unroll
  for (int k = 0; k < kNormPerThread; ++k) {
    const int i = threadIdx.x + k * kNormThreads;
    if (i < H) out[static_cast<int64_t>(t) * H + i] = scaleRn(__bfloat162float(ev[k]), inv, wv[k]);
  }
}

// Rows past kNormPerThread x kNormThreads, and QWEN_NORM=loop: the same arithmetic as a loop.
__global__ void embedRmsNormLoopKernel(const int32_t* tokens, const __nv_bfloat16* E, int vocabBegin, int vocabLocal,
                                       int H, const __nv_bfloat16* w, float eps, __nv_bfloat16* x, __nv_bfloat16* out) {
  pdlLaunch();
  pdlWait();
  const int t = blockIdx.x;
  const int local = tokens[t] - vocabBegin;
  const bool mine = local >= 0 && local < vocabLocal;
  const __nv_bfloat16* er = E + static_cast<int64_t>(mine ? local : 0) * H;
  __nv_bfloat16* xr = x + static_cast<int64_t>(t) * H;
  float ss = 0.f;
  for (int i = threadIdx.x; i < H; i += blockDim.x) {
    const __nv_bfloat16 e = mine ? er[i] : __float2bfloat16_rn(0.f);
    xr[i] = e;
    const float v = __bfloat162float(e);
    ss = __fmaf_rn(v, v, ss);
  }
  const float inv = invRmsRn(ss, H, eps);
  for (int i = threadIdx.x; i < H; i += blockDim.x)
    out[static_cast<int64_t>(t) * H + i] = scaleRn(__bfloat162float(xr[i]), inv, w[i]);
}

}  // namespace

void embedRmsNorm(const int32_t* tokens, int n, const __nv_bfloat16* E, int vocabBegin, int vocabLocal, int H,
                  const __nv_bfloat16* w, float eps, __nv_bfloat16* x, __nv_bfloat16* out, cudaStream_t s) {
  launch(!normLoop() && H <= kNormPerThread * kNormThreads ? embedRmsNormKernel : embedRmsNormLoopKernel, n, kNormThreads,
         s, tokens, E, vocabBegin, vocabLocal, H, w, eps, x, out);
}

}  // namespace gpu
}  // namespace qwen
