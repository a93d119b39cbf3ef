// attention_decode.cu: flash-decoding GQA attention for calls of 1..16 tokens:
// per (split, query head, token) block a partial online softmax over one chunk of the cache,
// then a combine kernel merging the chunks in a fixed order.
#include <algorithm>
#include <cfloat>
#include <cstdint>

#include "kernels/attention_decode.cuh"
#include "kernels/common.cuh"

namespace qwen {
namespace gpu {
namespace {

constexpr int kAttnWarps = 4;

// Split-K over the cache, sized per query: a query attending to `len` slots cuts them into
// chunks of at least minChunk slots, a multiple of 64 (one load round of the vector kernel at
// head_dim 128), as few as fit in `splits` (the grid's fixed bound, so one captured graph serves
// every position: blocks past the last chunk only write an empty partial). The cut depends on
// len only: a query's bits are the same in a verify call as in a one-token decode.
__device__ __forceinline__ int queryChunk(int len, int splits, int minChunk) {
  const int c = max(minChunk, (len + splits - 1) / splits);
  return (c + 63) / 64 * 64;
}
constexpr int kMaxDPerLane = 8;  // D <= 256

// grid (splits, hq, n), block 128. Each warp walks keys s = s0 + warp, s0 + warp + 4, ...
// keeping an online softmax (m, l, acc); the 4 warps merge in shared memory; the block writes
// its chunk's (m, l, acc[D]) to part.
__global__ void attnPartialKernel(const __nv_bfloat16* q, const __nv_bfloat16* kCache, const __nv_bfloat16* vCache,
                                  const int32_t* pos, int hq, int hk, int D, int splits, int chunk, float* part) {
  pdlLaunch();
  pdlWait();
  const int sp = blockIdx.x, h = blockIdx.y, t = blockIdx.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int last = *pos + t;  // attend slots 0..last
  const int ch = queryChunk(last + 1, splits, chunk);
  const int s0 = sp * ch, s1 = min(s0 + ch, last + 1);
  const int kvh = h / (hq / hk), per = (D + 31) / 32;  // element j * 32 + lane, < D
  const float scale = rsqrtf(static_cast<float>(D));
  float qv[kMaxDPerLane], acc[kMaxDPerLane];
  const __nv_bfloat16* qh = q + (static_cast<int64_t>(t) * hq + h) * D;
  for (int j = 0; j < per; ++j) {
    const int e = j * 32 + lane;
    qv[j] = e < D ? __bfloat162float(qh[e]) * scale : 0.f;
    acc[j] = 0.f;
  }
  float m = -FLT_MAX, l = 0.f;
  for (int s = s0 + warp; s < s1; s += kAttnWarps) {
    const __nv_bfloat16* kr = kCache + (static_cast<int64_t>(s) * hk + kvh) * D;
    float d = 0.f;
    for (int j = 0; j < per; ++j)
      if (j * 32 + lane < D) d += qv[j] * __bfloat162float(kr[j * 32 + lane]);
    d = warpSum(d);
    const float mNew = fmaxf(m, d), corr = __expf(m - mNew), p = __expf(d - mNew);
    const __nv_bfloat16* vr = vCache + (static_cast<int64_t>(s) * hk + kvh) * D;
    for (int j = 0; j < per; ++j)
      if (j * 32 + lane < D) acc[j] = acc[j] * corr + p * __bfloat162float(vr[j * 32 + lane]);
    l = l * corr + p;
    m = mNew;
  }
  __shared__ float shM[kAttnWarps], shL[kAttnWarps];
  __shared__ float shAcc[kAttnWarps][256];
  if (lane == 0) shM[warp] = m, shL[warp] = l;
  for (int j = 0; j < per; ++j)
    if (j * 32 + lane < D) shAcc[warp][j * 32 + lane] = acc[j];
  __syncthreads();
  float* out = part + ((static_cast<int64_t>(t) * hq + h) * splits + sp) * (D + 2);
  float M = -FLT_MAX;
  for (int w = 0; w < kAttnWarps; ++w) M = fmaxf(M, shM[w]);
  for (int i = threadIdx.x; i < D; i += blockDim.x) {
    float a = 0.f;
    for (int w = 0; w < kAttnWarps; ++w) a += shL[w] > 0.f ? shAcc[w][i] * __expf(shM[w] - M) : 0.f;
    out[2 + i] = a;
  }
  if (threadIdx.x == 0) {
    float L = 0.f;
    for (int w = 0; w < kAttnWarps; ++w) L += shL[w] > 0.f ? shL[w] * __expf(shM[w] - M) : 0.f;
    out[0] = L > 0.f ? M : -FLT_MAX;
    out[1] = L;
  }
}

// The same partial attention, fast path for D = 8 KL with KL a power of two <= 32 (Qwen's 128:
// KL = 8). attnPartialKernel walks a warp's keys one at a time, two dependent memory round trips
// (K, then V) per key: ~1.4 us a key, ~90 us per layer at a 768-token context, more than the
// layer's weight GEMMs. Here a key belongs to a group of KL lanes, lane `sub` of the group owning
// dims [8 sub, 8 sub + 8) (one 16-byte load of K, one of V), so a warp holds 32 / KL keys at once,
// and each warp issues kAttnUnroll such batches' loads before using any: 2 kAttnUnroll
// independent 16-byte loads per lane in flight, one round trip per batch of
// kAttnWarps * 32 / KL * kAttnUnroll keys. Each group keeps its own online softmax (m, l, acc[8])
// over keys base + (u kAttnWarps + warp) (32 / KL) + group; the block merges its groups' partials
// in shared memory (fixed order) into part, in attnPartialKernel's format. The key assignment
// depends on the chunk only, not on n or t: a query's bits are the same in a verify call as in a
// one-token decode (speculative == greedy relies on it).
//
// GQA: a block serves the G query heads of one KV head (grid (splits, hk, n) for G > 1), so each
// K/V row is loaded once for the group (before, G blocks each read it: at long context the cache
// reads, not the weights, dominated the step). Per head, every lane does the arithmetic of the
// G = 1 kernel in the same order; a query's bits still depend on the chunk only, not on n.
constexpr int kAttnUnroll = 4;

template <int KL, int G>
__global__ void __launch_bounds__(32 * kAttnWarps)
    attnPartialVecKernel(const __nv_bfloat16* q, const __nv_bfloat16* kCache, const __nv_bfloat16* vCache,
                         const int32_t* pos, int hq, int hk, int splits, int chunk, float* part) {
  pdlLaunch();
  pdlWait();
  constexpr int D = 8 * KL, P = 32 / KL, kParts = kAttnWarps * P, kStep = kParts * kAttnUnroll;
  const int sp = blockIdx.x, t = blockIdx.z;
  const int kvh = G == 1 ? blockIdx.y / (hq / hk) : blockIdx.y, h0 = G == 1 ? blockIdx.y : blockIdx.y * G;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, grp = lane / KL, sub = lane % KL;
  const int last = *pos + t;
  const int ch = queryChunk(last + 1, splits, chunk);
  const int s0 = sp * ch, s1 = min(s0 + ch, last + 1);
  const float scale = rsqrtf(static_cast<float>(D));
  float qv[G][8], acc[G][8], m[G], l[G];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    const uint4 raw = *reinterpret_cast<const uint4*>(q + (static_cast<int64_t>(t) * hq + h0 + g) * D + sub * 8);
    const __nv_bfloat16* e = reinterpret_cast<const __nv_bfloat16*>(&raw);
#pragma unroll
    for (int k = 0; k < 8; ++k) qv[g][k] = __bfloat162float(e[k]) * scale, acc[g][k] = 0.f;
    m[g] = -FLT_MAX;
    l[g] = 0.f;
  }
  const int64_t rowStride = static_cast<int64_t>(hk) * D;
  const __nv_bfloat16* kBase = kCache + static_cast<int64_t>(kvh) * D + sub * 8;
  const __nv_bfloat16* vBase = vCache + static_cast<int64_t>(kvh) * D + sub * 8;
  for (int base = s0; base < s1; base += kStep) {
    uint4 kr[kAttnUnroll], vr[kAttnUnroll];
#pragma unroll
    for (int u = 0; u < kAttnUnroll; ++u) {
      const int s = base + (u * kAttnWarps + warp) * P + grp;
      if (s < s1) {
        kr[u] = *reinterpret_cast<const uint4*>(kBase + s * rowStride);
        vr[u] = *reinterpret_cast<const uint4*>(vBase + s * rowStride);
      } else {
        kr[u] = vr[u] = make_uint4(0u, 0u, 0u, 0u);
      }
    }
#pragma unroll
    for (int u = 0; u < kAttnUnroll; ++u) {
      const int s = base + (u * kAttnWarps + warp) * P + grp;
      const __nv_bfloat16* ke = reinterpret_cast<const __nv_bfloat16*>(&kr[u]);
      const __nv_bfloat16* ve = reinterpret_cast<const __nv_bfloat16*>(&vr[u]);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float d = 0.f;
#pragma unroll
        for (int k = 0; k < 8; ++k) d += qv[g][k] * __bfloat162float(ke[k]);
#pragma unroll
        for (int o = KL / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);  // within the group
        if (s < s1) {
          const float mNew = fmaxf(m[g], d), corr = __expf(m[g] - mNew), p = __expf(d - mNew);
#pragma unroll
          for (int k = 0; k < 8; ++k) acc[g][k] = acc[g][k] * corr + p * __bfloat162float(ve[k]);
          l[g] = l[g] * corr + p;
          m[g] = mNew;
        }
      }
    }
  }
  __shared__ float shM[kParts], shL[kParts];
  __shared__ float shAcc[kParts * D];
  const int j = warp * P + grp;
#pragma unroll
  for (int g = 0; g < G; ++g) {  // merge the block's partials, one head at a time
    if (g > 0) __syncthreads();  // the previous head's merge has read the buffers
    if (sub == 0) shM[j] = m[g], shL[j] = l[g];
#pragma unroll
    for (int k = 0; k < 8; ++k) shAcc[j * D + sub * 8 + k] = acc[g][k];
    __syncthreads();
    float* out = part + ((static_cast<int64_t>(t) * hq + h0 + g) * splits + sp) * (D + 2);
    float M = -FLT_MAX;
    for (int i = 0; i < kParts; ++i) M = fmaxf(M, shM[i]);
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
      float a = 0.f;
      for (int p = 0; p < kParts; ++p) a += shL[p] > 0.f ? shAcc[p * D + i] * __expf(shM[p] - M) : 0.f;
      out[2 + i] = a;
    }
    if (threadIdx.x == 0) {
      float L = 0.f;
      for (int p = 0; p < kParts; ++p) L += shL[p] > 0.f ? shL[p] * __expf(shM[p] - M) : 0.f;
      out[0] = L > 0.f ? M : -FLT_MAX;
      out[1] = L;
    }
  }
}

// grid (hq, n), block D threads (rounded to a warp, at least 64): merge the splits of one
// (query, head). The splits' weights exp(m_s - M) go through shared memory (one thread per
// split), then each thread sums its dimension over the splits in split order: independent,
// coalesced loads, no per-split exp in the loop.
constexpr int kMaxSplits = kAttentionMaxSplits;
__global__ void attnCombineKernel(const float* part, int hq, int D, int splits, __nv_bfloat16* out) {
  pdlLaunch();
  pdlWait();
  __shared__ float shW[kMaxSplits];
  __shared__ float shMax[32], shL;
  const int h = blockIdx.x, t = blockIdx.y, i = threadIdx.x;
  const float* p = part + (static_cast<int64_t>(t) * hq + h) * splits * (D + 2);
  float mine = -FLT_MAX;
  for (int s = i; s < splits; s += blockDim.x) mine = fmaxf(mine, p[static_cast<int64_t>(s) * (D + 2)]);
  for (int o = 16; o > 0; o >>= 1) mine = fmaxf(mine, __shfl_xor_sync(0xffffffffu, mine, o));
  if ((i & 31) == 0) shMax[i >> 5] = mine;
  __syncthreads();
  float M = -FLT_MAX;
  for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) M = fmaxf(M, shMax[w]);
  for (int s = i; s < splits; s += blockDim.x) {
    const float* ps = p + static_cast<int64_t>(s) * (D + 2);
    shW[s] = ps[1] > 0.f ? __expf(ps[0] - M) : 0.f;
  }
  __syncthreads();
  if (i == 0) {
    float L = 0.f;
    for (int s = 0; s < splits; ++s) L += p[static_cast<int64_t>(s) * (D + 2) + 1] * shW[s];
    shL = L;
  }
  __syncthreads();
  if (i >= D) return;
  float a = 0.f;
  for (int s = 0; s < splits; ++s) a += p[static_cast<int64_t>(s) * (D + 2) + 2 + i] * shW[s];
  out[(static_cast<int64_t>(t) * hq + h) * D + i] = __float2bfloat16_rn(a / shL);
}

}  // namespace

void attention(const __nv_bfloat16* q, const __nv_bfloat16* kCache, const __nv_bfloat16* vCache, const int32_t* pos,
               int n, int hq, int hk, int D, int splits, int chunk, float* part, __nv_bfloat16* out, cudaStream_t s) {
  const dim3 grid(splits, hq, n), block(32 * kAttnWarps);
  const bool vec = D % 8 == 0 && 32 % (D / 8) == 0 && reinterpret_cast<uintptr_t>(q) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(kCache) % 16 == 0 && reinterpret_cast<uintptr_t>(vCache) % 16 == 0;
  // head_dim 128: one block per KV head's group when the group size is 2, 4 or 8 (Qwen3: 4, 8).
  const int G = hq / hk;
  const dim3 gridG(splits, hk, n);
#define QWEN_ATTN_VEC(KL)                                                                                     \
  case KL:                                                                                                    \
    launch(attnPartialVecKernel<KL, 1>, grid, block, s, q, kCache, vCache, pos, hq, hk, splits, chunk, part); \
    break;
  switch (vec ? D / 8 : 0) {
    QWEN_ATTN_VEC(1)
    QWEN_ATTN_VEC(2)
    QWEN_ATTN_VEC(4)
    QWEN_ATTN_VEC(8)
    QWEN_ATTN_VEC(32)
    case 16:  // head_dim 128 (every Qwen3; D = 8 KL): one block per KV head's group
      if (G == 2)
        launch(attnPartialVecKernel<16, 2>, gridG, block, s, q, kCache, vCache, pos, hq, hk, splits, chunk, part);
      else if (G == 4)
        launch(attnPartialVecKernel<16, 4>, gridG, block, s, q, kCache, vCache, pos, hq, hk, splits, chunk, part);
      else if (G == 8)
        launch(attnPartialVecKernel<16, 8>, gridG, block, s, q, kCache, vCache, pos, hq, hk, splits, chunk, part);
      else
        launch(attnPartialVecKernel<16, 1>, grid, block, s, q, kCache, vCache, pos, hq, hk, splits, chunk, part);
      break;
    default:
      launch(attnPartialKernel, grid, block, s, q, kCache, vCache, pos, hq, hk, D, splits, chunk, part);
  }
#undef QWEN_ATTN_VEC
  launch(attnCombineKernel, dim3(hq, n), std::max(64, roundWarp(D)), s, part, hq, D, splits, out);
}

}  // namespace gpu
}  // namespace qwen
