// norm_rows.cuh: the RMSNorm arithmetic of one row, shared by the norm kernels (norms.cu) and the
// kernels that gather a row and norm it in the same launch (embed_norm.cu, mtp_prologue.cu), so a
// fused kernel gives the same bits as the separate launches it replaces. Device code: included
// by kernels/*.cu only. Every caller runs one row per block of 512 threads (the order of the sum
// of squares depends on the block size).
#pragma once

#include "kernels/common.cuh"

namespace qwen {
namespace gpu {
namespace {

constexpr int kNormThreads = 512;
// The elements a thread holds in registers in the kernels that load a whole row at once (rows up
// to kNormPerThread x kNormThreads = 8192).
constexpr int kNormPerThread = 16;

// addRmsNorm's arithmetic (round-to-nearest intrinsics, nothing left to contraction): each thread
// has summed v * v over its elements in stride order with fma; inv = 1 / sqrt(mean + eps), and
// an output element is bf16((v * inv) * w).
__device__ __forceinline__ float invRmsOfTotal(float total, int H, float eps) {
  return __fdiv_rn(1.f, __fsqrt_rn(__fadd_rn(__fdiv_rn(total, static_cast<float>(H)), eps)));
}
__device__ __forceinline__ float invRmsRn(float ss, int H, float eps) { return invRmsOfTotal(blockSum(ss), H, eps); }
__device__ __forceinline__ __nv_bfloat16 scaleRn(float v, float inv, __nv_bfloat16 w) {
  return __float2bfloat16_rn(__fmul_rn(__fmul_rn(v, inv), __bfloat162float(w)));
}

// rmsNormBf16's row: out[i] = bf16(w[i] * (in(i) * inv)) with in(i) the row's i-th value.
// Rows up to kNormPerThread x kNormThreads: each thread's values and weights all loaded before
// the first is used (clamped indices, no branch between the loads, as in addRmsNormKernel), so
// the row costs one round trip where the loop below, whose stores may alias its loads, pays one
// an element; the sum in the loop's order, so the same bits. Longer rows: the loop.
template <typename In>
__device__ __forceinline__ void rmsNormRow(In in, const __nv_bfloat16* w, int H, float eps, __nv_bfloat16* out) {
  if (H <= kNormPerThread * kNormThreads) {
    float v[kNormPerThread];
    __nv_bfloat16 wv[kNormPerThread];
#pragma unroll
    for (int k = 0; k < kNormPerThread; ++k) {
      const int i = min(static_cast<int>(threadIdx.x) + k * kNormThreads, H - 1);
      v[k] = in(i), wv[k] = w[i];
    }
    float ss = 0.f;
#pragma unroll
    for (int k = 0; k < kNormPerThread; ++k) {
      if (static_cast<int>(threadIdx.x) + k * kNormThreads >= H) break;
      ss += v[k] * v[k];
    }
    const float inv = rsqrtf(blockSum(ss) / H + eps);
#pragma unroll
    for (int k = 0; k < kNormPerThread; ++k) {
      const int i = threadIdx.x + k * kNormThreads;
      if (i < H) out[i] = __float2bfloat16_rn(__bfloat162float(wv[k]) * (v[k] * inv));
    }
    return;
  }
  float ss = 0.f;
  for (int i = threadIdx.x; i < H; i += blockDim.x) {
    const float v = in(i);
    ss += v * v;
  }
  const float inv = rsqrtf(blockSum(ss) / H + eps);
  for (int i = threadIdx.x; i < H; i += blockDim.x)
    out[i] = __float2bfloat16_rn(__bfloat162float(w[i]) * (in(i) * inv));
}

}  // namespace
}  // namespace gpu
}  // namespace qwen
