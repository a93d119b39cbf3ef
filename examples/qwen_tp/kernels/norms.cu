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
//
// Thread t owns elements t, t + 512, ... (norm_rows.cuh's order; at most kNormPerThread of them,
// rows up to 8192). Every load is issued before its first use: w's before the PDL wait (weights,
// which no kernel writes), x's and add's together after it, so a row costs one L2 round trip
// where a loop of dependent loads and stores cost one per element (8 at hidden 4096, ~9 us a
// launch under ncu). The sum of squares runs in the loop's order: the same bits.
// kNormPerThread: norm_rows.cuh.

template <bool kAdd>
__global__ void addRmsNormKernel(__nv_bfloat16* x, const __nv_bfloat16* add, const __nv_bfloat16* w, int H, float eps,
                                 __nv_bfloat16* out) {
  pdlLaunch();
  // Straight-line loads (an index past the row reads its last element, unused; of x with the add
  // the add's, which no thread writes): no branch between them, so they are all in flight together.
  auto at = [H](int k) { return min(static_cast<int>(threadIdx.x) + k * kNormThreads, H - 1); };
  __nv_bfloat16 wv[kNormPerThread], xv[kNormPerThread], av[kNormPerThread];
#pragma unroll
  for (int k = 0; k < kNormPerThread; ++k) wv[k] = w[at(k)];
  pdlWait();
  __nv_bfloat16* xr = x + static_cast<int64_t>(blockIdx.x) * H;
  const __nv_bfloat16* ar = kAdd ? add + static_cast<int64_t>(blockIdx.x) * H : nullptr;
#pragma unroll
  for (int k = 0; k < kNormPerThread; ++k) {
    const bool past = static_cast<int>(threadIdx.x) + k * kNormThreads >= H;
    xv[k] = *(kAdd && past ? ar + (H - 1) : xr + at(k));
    if (kAdd) av[k] = ar[at(k)];
  }
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < kNormPerThread; ++k) {
    const int i = threadIdx.x + k * kNormThreads;
    if (i >= H) break;
    float v = __bfloat162float(xv[k]);
    if (kAdd) {
      xv[k] = __float2bfloat16_rn(__fadd_rn(v, __bfloat162float(av[k])));
      xr[i] = xv[k];
      v = __bfloat162float(xv[k]);
    }
    ss = __fmaf_rn(v, v, ss);
  }
  const float inv = invRmsRn(ss, H, eps);
  __nv_bfloat16* outr = out + static_cast<int64_t>(blockIdx.x) * H;
#pragma unroll
  for (int k = 0; k < kNormPerThread; ++k) {
    const int i = threadIdx.x + k * kNormThreads;
    if (i < H) outr[i] = scaleRn(__bfloat162float(xv[k]), inv, wv[k]);
  }
}

// Rows longer than kNormPerThread * kNormThreads, and QWEN_NORM=loop: the same arithmetic as a
// loop of dependent loads and stores.
__global__ void addRmsNormLoopKernel(__nv_bfloat16* x, const __nv_bfloat16* add, const __nv_bfloat16* w, int H,
                                     float eps, __nv_bfloat16* out) {
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

// Prefill rows (wideRows): a 128-thread block per row, so that 16 rows a multiprocessor are in
// flight where the kernel above, its registers holding a row's x, add and w, fits two. The row
// moves in 16-byte accesses: x (+ add) -> the residual, rounded as above, to x and to shared
// memory; the sum of squares read back from shared memory in the kernel above's order, each
// thread standing in for four of its 512 (virtual thread 32 (warp + 4m) + lane, elements
// every 512th), then each virtual warp's warpSum and blockSum's second stage over the 16 sums
// as blockSum does it; the output from shared memory and w, 16 bytes at a time. The same bits
// (QwenDecodeGpu.WideRowKernelsKeepTheBits). Needs H % 8 == 0 and 16-byte aligned rows.
constexpr int kWideNormThreads = 128;

template <bool kAdd>
__global__ void addRmsNormWideKernel(__nv_bfloat16* x, const __nv_bfloat16* add, const __nv_bfloat16* w, int H,
                                     float eps, __nv_bfloat16* out) {
  extern __shared__ __align__(16) unsigned char rowBytes[];
  __shared__ float warpSums[kNormThreads / 32];
  __shared__ float total;
  __nv_bfloat16* r = reinterpret_cast<__nv_bfloat16*>(rowBytes);
  pdlLaunch();
  pdlWait();
  const int64_t base = static_cast<int64_t>(blockIdx.x) * H;
  const int vecs = H / 8;
  for (int v = threadIdx.x; v < vecs; v += blockDim.x) {
    uint4 x8 = reinterpret_cast<const uint4*>(x + base)[v];
    if (kAdd) {
      const uint4 a8 = reinterpret_cast<const uint4*>(add + base)[v];
      __nv_bfloat16* xe = reinterpret_cast<__nv_bfloat16*>(&x8);
      const __nv_bfloat16* ae = reinterpret_cast<const __nv_bfloat16*>(&a8);
#pragma unroll
      for (int k = 0; k < 8; ++k) xe[k] = __float2bfloat16_rn(__fadd_rn(__bfloat162float(xe[k]), __bfloat162float(ae[k])));
      reinterpret_cast<uint4*>(x + base)[v] = x8;
    }
    reinterpret_cast<uint4*>(r)[v] = x8;
  }
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  constexpr int kStandIns = kNormThreads / kWideNormThreads;
#pragma unroll
  for (int m = 0; m < kStandIns; ++m) {
    const int vw = warp + (kWideNormThreads / 32) * m;  // the virtual thread's warp
    float ss = 0.f;
    for (int i = 32 * vw + lane; i < H; i += kNormThreads) {
      const float v = __bfloat162float(r[i]);
      ss = __fmaf_rn(v, v, ss);
    }
    ss = warpSum(ss);
    if (lane == 0) warpSums[vw] = ss;
  }
  __syncthreads();
  if (warp == 0) {
    float t = lane < kNormThreads / 32 ? warpSums[lane] : 0.f;
    t = warpSum(t);
    if (lane == 0) total = t;
  }
  __syncthreads();
  const float inv = invRmsOfTotal(total, H, eps);
  for (int v = threadIdx.x; v < vecs; v += blockDim.x) {
    const uint4 r8 = reinterpret_cast<const uint4*>(r)[v], w8 = reinterpret_cast<const uint4*>(w)[v];
    const __nv_bfloat16* re = reinterpret_cast<const __nv_bfloat16*>(&r8);
    const __nv_bfloat16* we = reinterpret_cast<const __nv_bfloat16*>(&w8);
    uint4 o8;
    __nv_bfloat16* oe = reinterpret_cast<__nv_bfloat16*>(&o8);
#pragma unroll
    for (int k = 0; k < 8; ++k) oe[k] = scaleRn(__bfloat162float(re[k]), inv, we[k]);
    reinterpret_cast<uint4*>(out + base)[v] = o8;
  }
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

bool gNormLoop = false;  // setNormLoop

}  // namespace

void setNormLoop(bool on) { gNormLoop = on; }
bool normLoop() { return gNormLoop; }

void addRmsNorm(__nv_bfloat16* x, const __nv_bfloat16* add, const __nv_bfloat16* w, int n, int H, float eps,
                __nv_bfloat16* out, cudaStream_t s) {
  if (!gNormLoop && wideRows(n) && H % 8 == 0 && H <= 16384 && aligned16(x, add, w, out))
    launchSmem(add ? addRmsNormWideKernel<true> : addRmsNormWideKernel<false>, n, kWideNormThreads,
               static_cast<size_t>(H) * sizeof(__nv_bfloat16), s, x, add, w, H, eps, out);
  else if (gNormLoop || H > kNormPerThread * kNormThreads)
    launch(addRmsNormLoopKernel, n, kNormThreads, s, x, add, w, H, eps, out);
  else if (add)
    launch(addRmsNormKernel<true>, n, kNormThreads, s, x, add, w, H, eps, out);
  else
    launch(addRmsNormKernel<false>, n, kNormThreads, s, x, add, w, H, eps, out);
}

void rmsNormBf16(const __nv_bfloat16* in, int ldIn, const __nv_bfloat16* w, int n, int H, float eps, __nv_bfloat16* out,
                 int ldOut, cudaStream_t s) {
  launch(rmsNormKernel<__nv_bfloat16>, n, kNormThreads, s, in, ldIn, w, H, eps, out, ldOut);
}

}  // namespace gpu
}  // namespace qwen
