// rope.cu: q/k per-head RMSNorm + rotate-half rotary + KV store, one block per (token, head).
#include <algorithm>
#include <cfloat>
#include <cstdint>

#include "kernels/common.cuh"
#include "kernels/rope.cuh"

namespace qwen {
namespace gpu {
namespace {

// grid (n, hq + 2 hk), block D/2 threads (D <= 256 so <= 128 threads, rounded up to a warp).
__global__ void qkNormRopeKernel(const __nv_bfloat16* qkv, int hq, int hk, int D, const __nv_bfloat16* qNorm,
                                 const __nv_bfloat16* kNorm, float eps, float theta, const int32_t* pos, int ropeOffset,
                                 __nv_bfloat16* q, __nv_bfloat16* kCache, __nv_bfloat16* vCache) {
  pdlLaunch();
  const int t = blockIdx.x, h = blockIdx.y, half = D / 2, i = threadIdx.x;
  // The norm weights before the PDL wait (no kernel writes them): their round trip overlaps the
  // previous kernel's tail instead of following the sum of squares.
  const __nv_bfloat16* nw = h < hq ? qNorm : kNorm;
  const bool normed = h < hq + hk && i < half;
  const float w1 = normed ? __bfloat162float(nw[i]) : 0.f, w2 = normed ? __bfloat162float(nw[i + half]) : 0.f;
  pdlWait();
  const int width = (hq + 2 * hk) * D;
  const __nv_bfloat16* src = qkv + static_cast<int64_t>(t) * width + static_cast<int64_t>(h) * D;
  const int slot = *pos + t;
  if (h >= hq + hk) {  // v head: store as is
    const int vh = h - hq - hk;
    __nv_bfloat16* dst = vCache + (static_cast<int64_t>(slot) * hk + vh) * D;
    if (i < half) dst[i] = src[i], dst[i + half] = src[i + half];
    return;
  }
  float x1 = i < half ? __bfloat162float(src[i]) : 0.f, x2 = i < half ? __bfloat162float(src[i + half]) : 0.f;
  const float inv = rsqrtf(blockSum(x1 * x1 + x2 * x2) / D + eps);
  if (i >= half) return;
  // HF rounds the normed head to bf16 before rotary; so do we.
  x1 = __bfloat162float(__float2bfloat16_rn(w1 * (x1 * inv)));
  x2 = __bfloat162float(__float2bfloat16_rn(w2 * (x2 * inv)));
  const float invFreq = 1.0f / powf(theta, static_cast<float>(2 * i) / static_cast<float>(D));
  float sn, cs;
  sincosf(static_cast<float>(*pos + ropeOffset + t) * invFreq, &sn, &cs);
  const float o1 = x1 * cs - x2 * sn, o2 = x2 * cs + x1 * sn;
  __nv_bfloat16* dst =
      h < hq ? q + (static_cast<int64_t>(t) * hq + h) * D : kCache + (static_cast<int64_t>(slot) * hk + (h - hq)) * D;
  dst[i] = __float2bfloat16_rn(o1);
  dst[i + half] = __float2bfloat16_rn(o2);
}

// Prefill rows: a warp per (token, head), four to a 128-thread block, where the kernel above
// spends a 64-thread block and three block barriers on each. Lane l holds elements l + 32k of
// each half (k < kW, kW = warps the kernel above gives a head), so the sum of squares is the
// kernel above's to the bit: each k a warp sum of the same lanes, then blockSum's second stage
// (a butterfly over kW warp sums, zeros beyond: (w0 + w2) + (w1 + w3)); the rest per element as
// above.
template <int kW>
__global__ void qkNormRopeWarpKernel(const __nv_bfloat16* qkv, int n, int hq, int hk, int D,
                                     const __nv_bfloat16* qNorm, const __nv_bfloat16* kNorm, float eps, float theta,
                                     const int32_t* pos, int ropeOffset, __nv_bfloat16* q, __nv_bfloat16* kCache,
                                     __nv_bfloat16* vCache) {
  pdlLaunch();
  const int heads = hq + 2 * hk, lane = threadIdx.x & 31;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const bool live = item < static_cast<int64_t>(n) * heads;
  const int t = live ? static_cast<int>(item / heads) : 0, h = live ? static_cast<int>(item % heads) : 0;
  const int half = D / 2;
  const __nv_bfloat16* nw = h < hq ? qNorm : kNorm;
  float w1[kW], w2[kW];
#pragma unroll
  for (int k = 0; k < kW; ++k) {
    const int i = lane + 32 * k;
    const bool normed = live && h < hq + hk && i < half;
    w1[k] = normed ? __bfloat162float(nw[i]) : 0.f;
    w2[k] = normed ? __bfloat162float(nw[i + half]) : 0.f;
  }
  pdlWait();
  if (!live) return;
  const int width = heads * D;
  const __nv_bfloat16* src = qkv + static_cast<int64_t>(t) * width + static_cast<int64_t>(h) * D;
  const int slot = *pos + t;
  if (h >= hq + hk) {  // v head: store as is
    __nv_bfloat16* dst = vCache + (static_cast<int64_t>(slot) * hk + (h - hq - hk)) * D;
#pragma unroll
    for (int k = 0; k < kW; ++k) {
      const int i = lane + 32 * k;
      if (i < half) dst[i] = src[i], dst[i + half] = src[i + half];
    }
    return;
  }
  float x1[kW], x2[kW], part[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int k = 0; k < kW; ++k) {
    const int i = lane + 32 * k;
    x1[k] = i < half ? __bfloat162float(src[i]) : 0.f;
    x2[k] = i < half ? __bfloat162float(src[i + half]) : 0.f;
    part[k] = warpSum(x1[k] * x1[k] + x2[k] * x2[k]);
  }
  const float inv = rsqrtf(((part[0] + part[2]) + (part[1] + part[3])) / D + eps);
  __nv_bfloat16* dst =
      h < hq ? q + (static_cast<int64_t>(t) * hq + h) * D : kCache + (static_cast<int64_t>(slot) * hk + (h - hq)) * D;
#pragma unroll
  for (int k = 0; k < kW; ++k) {
    const int i = lane + 32 * k;
    if (i >= half) break;
    const float a = __bfloat162float(__float2bfloat16_rn(w1[k] * (x1[k] * inv)));
    const float b = __bfloat162float(__float2bfloat16_rn(w2[k] * (x2[k] * inv)));
    const float invFreq = 1.0f / powf(theta, static_cast<float>(2 * i) / static_cast<float>(D));
    float sn, cs;
    sincosf(static_cast<float>(*pos + ropeOffset + t) * invFreq, &sn, &cs);
    dst[i] = __float2bfloat16_rn(a * cs - b * sn);
    dst[i + half] = __float2bfloat16_rn(b * cs + a * sn);
  }
}

}  // namespace

void qkNormRopeStore(const __nv_bfloat16* qkv, int n, int hq, int hk, int D, const __nv_bfloat16* qNorm,
                     const __nv_bfloat16* kNorm, float eps, float theta, const int32_t* pos, int ropeOffset,
                     __nv_bfloat16* q, __nv_bfloat16* kCache, __nv_bfloat16* vCache, cudaStream_t s) {
  const int warpsPerHead = roundWarp(D / 2) / 32;  // 1..4 (D <= 256)
  if (wideRows(n)) {
    const int64_t items = static_cast<int64_t>(n) * (hq + 2 * hk);
    const dim3 grid(static_cast<unsigned>((items + 3) / 4));
    switch (warpsPerHead) {
      case 1: return launch(qkNormRopeWarpKernel<1>, grid, 128, s, qkv, n, hq, hk, D, qNorm, kNorm, eps, theta, pos,
                            ropeOffset, q, kCache, vCache);
      case 2: return launch(qkNormRopeWarpKernel<2>, grid, 128, s, qkv, n, hq, hk, D, qNorm, kNorm, eps, theta, pos,
                            ropeOffset, q, kCache, vCache);
      case 3: return launch(qkNormRopeWarpKernel<3>, grid, 128, s, qkv, n, hq, hk, D, qNorm, kNorm, eps, theta, pos,
                            ropeOffset, q, kCache, vCache);
      default: return launch(qkNormRopeWarpKernel<4>, grid, 128, s, qkv, n, hq, hk, D, qNorm, kNorm, eps, theta, pos,
                             ropeOffset, q, kCache, vCache);
    }
  }
  launch(qkNormRopeKernel, dim3(n, hq + 2 * hk), roundWarp(D / 2), s, qkv, hq, hk, D, qNorm, kNorm, eps, theta, pos,
         ropeOffset, q, kCache, vCache);
}

}  // namespace gpu
}  // namespace qwen
