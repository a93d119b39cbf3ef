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

// Prefill rows: a block of 8 warps per token. The token's whole qkv row comes into shared memory
// in 16-byte loads, all in flight at once (one warp a head with 2-byte loads kept too few bytes in
// flight to stream); the rotary angles depend on the token and the element only, so the block
// computes them once (cos/sin of half elements) where the kernel above computes them for each of
// the token's heads. Then each warp takes heads warp, warp + 8, ... from shared memory. Lane l
// holds elements l + 32k of each half (k < kW, kW = the warps the kernel above gives a head), so
// the sum of squares is the kernel above's to the bit: each k a warp sum of the same lanes, then
// blockSum's second stage (a butterfly over kW warp sums, zeros beyond: (w0 + w2) + (w1 + w3)).
// The same angle, the same rounding of the normed head, the same rotation: the same bits.
// Needs D % 8 == 0 and 16-byte aligned qkv and V cache (checked by qkNormRopeStore).
constexpr int kRopeWarps = 8, kRowLoads = 4;

template <int kW>
__global__ void qkNormRopeTokenKernel(const __nv_bfloat16* qkv, int hq, int hk, int D, const __nv_bfloat16* qNorm,
                                      const __nv_bfloat16* kNorm, float eps, float theta, const int32_t* pos,
                                      int ropeOffset, __nv_bfloat16* q, __nv_bfloat16* kCache,
                                      __nv_bfloat16* vCache) {
  extern __shared__ uint4 rowVecs[];
  __shared__ float cosT[128], sinT[128];
  pdlLaunch();
  const int t = blockIdx.x, half = D / 2, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float wq1[kW], wq2[kW], wk1[kW], wk2[kW];
#pragma unroll
  for (int k = 0; k < kW; ++k) {
    const int i = lane + 32 * k;
    wq1[k] = i < half ? __bfloat162float(qNorm[i]) : 0.f;
    wq2[k] = i < half ? __bfloat162float(qNorm[i + half]) : 0.f;
    wk1[k] = i < half ? __bfloat162float(kNorm[i]) : 0.f;
    wk2[k] = i < half ? __bfloat162float(kNorm[i + half]) : 0.f;
  }
  pdlWait();
  const int heads = hq + 2 * hk, vecs = heads * D / 8;
  const uint4* src = reinterpret_cast<const uint4*>(qkv + static_cast<int64_t>(t) * heads * D);
  for (int v0 = threadIdx.x; v0 < vecs; v0 += kRowLoads * blockDim.x) {  // the loads first, then the stores
    uint4 r[kRowLoads];
#pragma unroll
    for (int j = 0; j < kRowLoads; ++j)
      if (v0 + j * static_cast<int>(blockDim.x) < vecs) r[j] = src[v0 + j * blockDim.x];
#pragma unroll
    for (int j = 0; j < kRowLoads; ++j)
      if (v0 + j * static_cast<int>(blockDim.x) < vecs) rowVecs[v0 + j * blockDim.x] = r[j];
  }
  const int p0 = *pos;
  if (threadIdx.x < half) {
    const int i = threadIdx.x;
    const float invFreq = 1.0f / powf(theta, static_cast<float>(2 * i) / static_cast<float>(D));
    sincosf(static_cast<float>(p0 + ropeOffset + t) * invFreq, &sinT[i], &cosT[i]);
  }
  __syncthreads();
  const __nv_bfloat16* row = reinterpret_cast<const __nv_bfloat16*>(rowVecs);
  const int slot = p0 + t;
  for (int h = warp; h < heads; h += kRopeWarps) {
    const __nv_bfloat16* x = row + h * D;
    if (h >= hq + hk) {  // v head: stored as is, 16 bytes a lane
      uint4* dst = reinterpret_cast<uint4*>(vCache + (static_cast<int64_t>(slot) * hk + (h - hq - hk)) * D);
      for (int v = lane; v < D / 8; v += 32) dst[v] = rowVecs[(h * D) / 8 + v];
      continue;
    }
    float x1[kW], x2[kW], part[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int k = 0; k < kW; ++k) {
      const int i = lane + 32 * k;
      x1[k] = i < half ? __bfloat162float(x[i]) : 0.f;
      x2[k] = i < half ? __bfloat162float(x[i + half]) : 0.f;
      part[k] = warpSum(x1[k] * x1[k] + x2[k] * x2[k]);
    }
    const float inv = rsqrtf(((part[0] + part[2]) + (part[1] + part[3])) / D + eps);
    const bool isQ = h < hq;
    __nv_bfloat16* dst =
        isQ ? q + (static_cast<int64_t>(t) * hq + h) * D : kCache + (static_cast<int64_t>(slot) * hk + (h - hq)) * D;
#pragma unroll
    for (int k = 0; k < kW; ++k) {
      const int i = lane + 32 * k;
      if (i >= half) break;
      const float a = __bfloat162float(__float2bfloat16_rn((isQ ? wq1[k] : wk1[k]) * (x1[k] * inv)));
      const float b = __bfloat162float(__float2bfloat16_rn((isQ ? wq2[k] : wk2[k]) * (x2[k] * inv)));
      const float cs = cosT[i], sn = sinT[i];
      dst[i] = __float2bfloat16_rn(a * cs - b * sn);
      dst[i + half] = __float2bfloat16_rn(b * cs + a * sn);
    }
  }
}

}  // namespace

void qkNormRopeStore(const __nv_bfloat16* qkv, int n, int hq, int hk, int D, const __nv_bfloat16* qNorm,
                     const __nv_bfloat16* kNorm, float eps, float theta, const int32_t* pos, int ropeOffset,
                     __nv_bfloat16* q, __nv_bfloat16* kCache, __nv_bfloat16* vCache, cudaStream_t s) {
  const size_t rowBytes = static_cast<size_t>(hq + 2 * hk) * D * sizeof(__nv_bfloat16);
  if (wideRows(n) && D % 8 == 0 && rowBytes <= 40 * 1024 && aligned16(qkv, vCache)) {
    decltype(&qkNormRopeTokenKernel<1>) const byWarps[] = {qkNormRopeTokenKernel<1>, qkNormRopeTokenKernel<2>,
                                                          qkNormRopeTokenKernel<3>, qkNormRopeTokenKernel<4>};
    const int warpsPerHead = roundWarp(D / 2) / 32;  // 1..4 (D <= 256)
    return launchSmem(byWarps[warpsPerHead - 1], n, kRopeWarps * 32, rowBytes, s, qkv, hq, hk, D, qNorm, kNorm, eps,
                      theta, pos, ropeOffset, q, kCache, vCache);
  }
  launch(qkNormRopeKernel, dim3(n, hq + 2 * hk), roundWarp(D / 2), s, qkv, hq, hk, D, qNorm, kNorm, eps, theta, pos,
         ropeOffset, q, kCache, vCache);
}

}  // namespace gpu
}  // namespace qwen
