// gpu_kernels.cu: RMSNorm, q/k norm + rotary + KV store, split-sequence decode attention,
// SwiGLU, embedding, argmax, the synthetic initializer and a small-n tensor-core GEMV (gemvBf16).
// Plain CUDA, sm_80+; fp32 math.
#include "gpu_kernels.h"

#include <algorithm>
#include <cfloat>
#include <cstdint>

#include "synth.h"

namespace qwen {
namespace gpu {
namespace {

// Programmatic dependent launch (sm_90+; no-ops elsewhere and when a kernel was launched without
// the attribute). Every kernel launched through launch() below calls pdlWait before it touches memory
// an earlier kernel of the stream writes or reads (its inputs and its outputs); only constant
// weights are touched before (gemvKernel's L2 prefetch). pdlLaunch lets the next kernel's blocks
// be scheduled while this one runs; that kernel's pdlWait still waits for this grid to complete
// and its writes to be visible.
__device__ __forceinline__ void pdlWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdlLaunch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

__device__ __forceinline__ float warpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, <= 1024).
__device__ float blockSum(float v) {
  __shared__ float sh[32];
  __shared__ float total;
  v = warpSum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float w = lane < (blockDim.x >> 5) ? sh[lane] : 0.f;
    w = warpSum(w);
    if (lane == 0) total = w;
  }
  __syncthreads();
  float r = total;
  __syncthreads();
  return r;
}

__global__ void initSyntheticKernel(__nv_bfloat16* dst, int64_t rows, int64_t cols, int64_t fullCols, int64_t rowOff,
                                    int64_t colOff, uint64_t seed, uint32_t id, float scale, float offset) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t r = i / cols, c = i % cols;
    uint64_t g = static_cast<uint64_t>((rowOff + r) * fullCols + colOff + c);
    dst[i] = __float2bfloat16_rn(synthValue(seed, id, g, scale, offset));
  }
}

__global__ void embedKernel(const int32_t* tokens, const __nv_bfloat16* E, int vocabBegin, int vocabLocal, int H,
                            __nv_bfloat16* x) {
  pdlLaunch();
  pdlWait();
  const int t = blockIdx.x;
  const int local = tokens[t] - vocabBegin;
  const bool mine = local >= 0 && local < vocabLocal;
  for (int i = threadIdx.x; i < H; i += blockDim.x)
    x[static_cast<int64_t>(t) * H + i] = mine ? E[static_cast<int64_t>(local) * H + i] : __float2bfloat16_rn(0.f);
}

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
  const float inv = __fdiv_rn(1.f, __fsqrt_rn(__fadd_rn(__fdiv_rn(blockSum(ss), static_cast<float>(H)), eps)));
  for (int i = threadIdx.x; i < H; i += blockDim.x)
    out[static_cast<int64_t>(blockIdx.x) * H + i] =
        __float2bfloat16_rn(__fmul_rn(__fmul_rn(__bfloat162float(xr[i]), inv), __bfloat162float(w[i])));
}

template <typename T>
__device__ __forceinline__ float toF(T v);
template <>
__device__ __forceinline__ float toF<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__global__ void rmsNormKernel(const T* in, int ldIn, const __nv_bfloat16* w, int H, float eps, __nv_bfloat16* out, int ldOut) {
  pdlLaunch();
  pdlWait();
  const T* r = in + static_cast<int64_t>(blockIdx.x) * ldIn;
  float ss = 0.f;
  for (int i = threadIdx.x; i < H; i += blockDim.x) {
    float v = toF(r[i]);
    ss += v * v;
  }
  const float inv = rsqrtf(blockSum(ss) / H + eps);
  for (int i = threadIdx.x; i < H; i += blockDim.x)
    out[static_cast<int64_t>(blockIdx.x) * ldOut + i] = __float2bfloat16_rn(__bfloat162float(w[i]) * (toF(r[i]) * inv));
}

// grid (n, hq + 2 hk), block D/2 threads (D <= 256 so <= 128 threads, rounded up to a warp).
__global__ void qkNormRopeKernel(const __nv_bfloat16* qkv, int hq, int hk, int D, const __nv_bfloat16* qNorm,
                                 const __nv_bfloat16* kNorm, float eps, float theta, const int32_t* pos, int ropeOffset,
                                 __nv_bfloat16* q, __nv_bfloat16* kCache, __nv_bfloat16* vCache) {
  pdlLaunch();
  pdlWait();
  const int t = blockIdx.x, h = blockIdx.y, half = D / 2, i = threadIdx.x;
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
  const __nv_bfloat16* nw = h < hq ? qNorm : kNorm;
  // HF rounds the normed head to bf16 before rotary; so do we.
  x1 = __bfloat162float(__float2bfloat16_rn(__bfloat162float(nw[i]) * (x1 * inv)));
  x2 = __bfloat162float(__float2bfloat16_rn(__bfloat162float(nw[i + half]) * (x2 * inv)));
  const float invFreq = 1.0f / powf(theta, static_cast<float>(2 * i) / static_cast<float>(D));
  float sn, cs;
  sincosf(static_cast<float>(*pos + ropeOffset + t) * invFreq, &sn, &cs);
  const float o1 = x1 * cs - x2 * sn, o2 = x2 * cs + x1 * sn;
  __nv_bfloat16* dst = h < hq ? q + (static_cast<int64_t>(t) * hq + h) * D
                              : kCache + (static_cast<int64_t>(slot) * hk + (h - hq)) * D;
  dst[i] = __float2bfloat16_rn(o1);
  dst[i + half] = __float2bfloat16_rn(o2);
}

constexpr int kAttnWarps = 4;
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
  const int s0 = sp * chunk, s1 = min(s0 + chunk, last + 1);
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
constexpr int kAttnUnroll = 4;

template <int KL>
__global__ void __launch_bounds__(32 * kAttnWarps)
    attnPartialVecKernel(const __nv_bfloat16* q, const __nv_bfloat16* kCache, const __nv_bfloat16* vCache,
                         const int32_t* pos, int hq, int hk, int splits, int chunk, float* part) {
  pdlLaunch();
  pdlWait();
  constexpr int D = 8 * KL, P = 32 / KL, kParts = kAttnWarps * P, kStep = kParts * kAttnUnroll;
  const int sp = blockIdx.x, h = blockIdx.y, t = blockIdx.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, grp = lane / KL, sub = lane % KL;
  const int last = *pos + t;
  const int s0 = sp * chunk, s1 = min(s0 + chunk, last + 1);
  const int kvh = h / (hq / hk);
  const float scale = rsqrtf(static_cast<float>(D));
  float qv[8], acc[8];
  {
    const uint4 raw = *reinterpret_cast<const uint4*>(q + (static_cast<int64_t>(t) * hq + h) * D + sub * 8);
    const __nv_bfloat16* e = reinterpret_cast<const __nv_bfloat16*>(&raw);
#pragma unroll
    for (int k = 0; k < 8; ++k) qv[k] = __bfloat162float(e[k]) * scale, acc[k] = 0.f;
  }
  float m = -FLT_MAX, l = 0.f;
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
      float d = 0.f;
#pragma unroll
      for (int k = 0; k < 8; ++k) d += qv[k] * __bfloat162float(ke[k]);
#pragma unroll
      for (int o = KL / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);  // within the group
      if (s < s1) {
        const __nv_bfloat16* ve = reinterpret_cast<const __nv_bfloat16*>(&vr[u]);
        const float mNew = fmaxf(m, d), corr = __expf(m - mNew), p = __expf(d - mNew);
#pragma unroll
        for (int k = 0; k < 8; ++k) acc[k] = acc[k] * corr + p * __bfloat162float(ve[k]);
        l = l * corr + p;
        m = mNew;
      }
    }
  }
  __shared__ float shM[kParts], shL[kParts];
  __shared__ float shAcc[kParts * D];
  const int j = warp * P + grp;
  if (sub == 0) shM[j] = m, shL[j] = l;
#pragma unroll
  for (int k = 0; k < 8; ++k) shAcc[j * D + sub * 8 + k] = acc[k];
  __syncthreads();
  float* out = part + ((static_cast<int64_t>(t) * hq + h) * splits + sp) * (D + 2);
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

// grid (hq, n), block D threads (rounded to a warp): merge the splits of one (query, head).
__global__ void attnCombineKernel(const float* part, int hq, int D, int splits, __nv_bfloat16* out) {
  pdlLaunch();
  pdlWait();
  const int h = blockIdx.x, t = blockIdx.y, i = threadIdx.x;
  const float* p = part + (static_cast<int64_t>(t) * hq + h) * splits * (D + 2);
  float M = -FLT_MAX;
  for (int s = 0; s < splits; ++s) M = fmaxf(M, p[s * (D + 2)]);
  if (i >= D) return;
  float L = 0.f, a = 0.f;
  for (int s = 0; s < splits; ++s) {
    const float* ps = p + s * (D + 2);
    if (ps[1] <= 0.f) continue;
    const float w = __expf(ps[0] - M);
    L += ps[1] * w;
    a += ps[2 + i] * w;
  }
  out[(static_cast<int64_t>(t) * hq + h) * D + i] = __float2bfloat16_rn(a / L);
}

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

// One block per row; lowest index wins ties.
__global__ void localArgmaxKernel(const float* logits, int V, int vocabBegin, int tp, int rank, float* table) {
  pdlLaunch();
  pdlWait();
  const int t = blockIdx.x;
  const float* l = logits + static_cast<int64_t>(t) * V;
  float best = -FLT_MAX;
  int bi = 0x7fffffff;
  for (int i = threadIdx.x; i < V; i += blockDim.x)
    if (l[i] > best) best = l[i], bi = i;  // per thread, i ascends: first max kept
  __shared__ float sv[1024];
  __shared__ int si[1024];
  sv[threadIdx.x] = best;
  si[threadIdx.x] = bi;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) {
      float v2 = sv[threadIdx.x + o];
      int i2 = si[threadIdx.x + o];
      if (v2 > sv[threadIdx.x] || (v2 == sv[threadIdx.x] && i2 < si[threadIdx.x])) sv[threadIdx.x] = v2, si[threadIdx.x] = i2;
    }
    __syncthreads();
  }
  if (threadIdx.x < tp * 2) table[static_cast<int64_t>(t) * tp * 2 + threadIdx.x] = 0.f;
  __syncthreads();
  if (threadIdx.x == 0) {
    table[(static_cast<int64_t>(t) * tp + rank) * 2] = sv[0];
    table[(static_cast<int64_t>(t) * tp + rank) * 2 + 1] = static_cast<float>(vocabBegin + si[0]);
  }
}

__global__ void pickArgmaxKernel(const float* table, int n, int tp, int32_t* tokens) {
  pdlLaunch();
  pdlWait();
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= n) return;
  int br = 0;
  for (int r = 1; r < tp; ++r)
    if (table[(t * tp + r) * 2] > table[(t * tp + br) * 2]) br = r;
  tokens[t] = static_cast<int32_t>(table[(t * tp + br) * 2 + 1]);
}

__global__ void copyRowsKernel(const __nv_bfloat16* src, int ldSrc, __nv_bfloat16* dst, int ldDst, int cols) {
  pdlLaunch();
  pdlWait();
  for (int i = threadIdx.x; i < cols; i += blockDim.x)
    dst[static_cast<int64_t>(blockIdx.x) * ldDst + i] = src[static_cast<int64_t>(blockIdx.x) * ldSrc + i];
}

// ---- small-n GEMM ("GEMV") on the tensor cores: Y[t, o] = sum_i X[t, i] W[o, i], t < n <= 8 ----
// A block owns 16 consecutive rows of W: one m16n8k16 row tile, whose 8 columns are the n <= 8
// tokens (columns past n are computed from a repeated token and never stored). `in` is cut into
// units of 32 columns; warp w of the block takes units w, w + warps, w + 2 warps, ... In a unit,
// lane (g = lane / 4, c = lane % 4) loads 16 bytes (8 bf16 from column 32 u + 8 c) of W rows g
// and g + 8 and of X row g: the 4 lanes of a group read 64 contiguous bytes of each of the 16
// rows (whole 32-byte sectors; the neighbouring units, on the other warps, read the rest of the
// lines at the same time). The MMA's k order is a permutation of the physical columns (any
// permutation applied to A and B alike gives the same dot products): the lane's {w.x, w.y} of
// row g feed A's {a0, a2}, those of row g + 8 {a1, a3}, and X's {x.x, x.y} B's {b0, b1}, for
// the first MMA; .z, .w for the second. kGemvUnroll units are loaded before any MMA, so a warp
// keeps 4 KB of W in flight. The warps' 16 x 8 fp32 tiles are summed through shared memory in
// warp order. Every sum has a fixed order (a function of `in` only, not of n or of the run):
// deterministic, and a token's result does not depend on the other tokens of the call.
constexpr int kGemvUnroll = 4;
constexpr int kGemvMaxWarps = 8;

__device__ __forceinline__ void mmaBf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                        uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
  __trap();  // gemvBf16 is only launched on sm_80+ (GpuModel::init checks the device)
#endif
}

// 8 bf16 of `row` from column k; columns >= len read as 0. kVec: 16-byte loads (row 16-byte
// aligned and len % 8 == 0, so a chunk is whole or past the end); kStream: evict-first (W is
// read once per step; keep L2 for X and the KV cache).
template <bool kVec, bool kStream>
__device__ __forceinline__ uint4 gemvLoad8(const __nv_bfloat16* row, int k, int len) {
  if (kVec) {
    if (k >= len) return make_uint4(0u, 0u, 0u, 0u);
    const uint4* p = reinterpret_cast<const uint4*>(row + k);
    return kStream ? __ldcs(p) : __ldg(p);
  }
  const unsigned short* r = reinterpret_cast<const unsigned short*>(row);
  uint32_t v[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t lo = k + 2 * j < len ? r[k + 2 * j] : 0u;
    const uint32_t hi = k + 2 * j + 1 < len ? r[k + 2 * j + 1] : 0u;
    v[j] = lo | (hi << 16);
  }
  return make_uint4(v[0], v[1], v[2], v[3]);
}

// minBlocks 2 (<= 128 registers): without it ptxas (CUDA 13) schedules each unit's loads right
// before its MMAs, one unit in flight per warp; with it the kGemvUnroll units' 12 loads issue
// back to back (checked in the SASS, 72 registers).
template <bool kVec, bool kF32>
__global__ void __launch_bounds__(kGemvMaxWarps * 32, 2)
    gemvKernel(const __nv_bfloat16* W, int out, int in, const __nv_bfloat16* X, int n, void* Y) {
  __shared__ float part[kGemvMaxWarps][32][4];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int g = lane >> 2, c = lane & 3;
  const int rLo = blockIdx.x * 16 + g, rHi = rLo + 8;
  // Rows past `out` and tokens past n read a valid row (the last one) and are never stored: a
  // row of A only reaches the same row of D, a column of B the same column of D.
  const __nv_bfloat16* wLo = W + static_cast<int64_t>(min(rLo, out - 1)) * in;
  const __nv_bfloat16* wHi = W + static_cast<int64_t>(min(rHi, out - 1)) * in;
  const __nv_bfloat16* xr = X + static_cast<int64_t>(min(g, n - 1)) * in;
  const int units = (in + 31) / 32;
  float d[4] = {0.f, 0.f, 0.f, 0.f};
  int u = warp;
  // W is constant: its first kGemvUnroll units per warp are prefetched into L2 before waiting for
  // the previous kernel (which produced X), so the weight stream starts during its tail.
  pdlLaunch();
  if (kVec)
    for (int j = 0; j < kGemvUnroll && u + j * warps < in / 32; ++j) {
      const int k = (u + j * warps) * 32 + c * 8;
      asm volatile("prefetch.global.L2 [%0];" ::"l"(wLo + k));
      asm volatile("prefetch.global.L2 [%0];" ::"l"(wHi + k));
    }
  pdlWait();
  if (kVec) {
    // Rounds of kGemvUnroll whole units: unpredicated 16-byte loads, all issued before the MMAs
    // (guarded loads let ptxas interleave load -> MMA pairs, one unit in flight per warp).
    const int whole = in / 32;
    for (; u + (kGemvUnroll - 1) * warps < whole; u += kGemvUnroll * warps) {
      uint4 a[kGemvUnroll], b[kGemvUnroll], x[kGemvUnroll];
#pragma unroll
      for (int j = 0; j < kGemvUnroll; ++j) {
        const int k = (u + j * warps) * 32 + c * 8;
        a[j] = __ldcs(reinterpret_cast<const uint4*>(wLo + k));
        b[j] = __ldcs(reinterpret_cast<const uint4*>(wHi + k));
        x[j] = __ldg(reinterpret_cast<const uint4*>(xr + k));
      }
#pragma unroll
      for (int j = 0; j < kGemvUnroll; ++j) {
        mmaBf16(d, a[j].x, b[j].x, a[j].y, b[j].y, x[j].x, x[j].y);
        mmaBf16(d, a[j].z, b[j].z, a[j].w, b[j].w, x[j].z, x[j].w);
      }
    }
  }
  // The rest (all of it on the scalar path), a unit at a time, columns past `in` read as 0.
  for (; u < units; u += warps) {
    const int k = u * 32 + c * 8;
    const uint4 a = gemvLoad8<kVec, true>(wLo, k, in), b = gemvLoad8<kVec, true>(wHi, k, in),
                x = gemvLoad8<kVec, false>(xr, k, in);
    mmaBf16(d, a.x, b.x, a.y, b.y, x.x, x.y);
    mmaBf16(d, a.z, b.z, a.w, b.w, x.z, x.w);
  }
  if (warps > 1) {
#pragma unroll
    for (int j = 0; j < 4; ++j) part[warp][lane][j] = d[j];
    __syncthreads();
    if (warp != 0) return;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      float s = part[0][lane][j];
      for (int w = 1; w < warps; ++w) s += part[w][lane][j];
      d[j] = s;
    }
  }
  // D fragment: d0, d1 = (row g, tokens 2c, 2c + 1); d2, d3 = (row g + 8, the same tokens).
  const int t0 = 2 * c, t1 = t0 + 1;
  auto store = [&](int t, int o, float v) {
    const int64_t i = static_cast<int64_t>(t) * out + o;
    if (kF32)
      static_cast<float*>(Y)[i] = v;
    else
      static_cast<__nv_bfloat16*>(Y)[i] = __float2bfloat16_rn(v);
  };
  if (rLo < out && t0 < n) store(t0, rLo, d[0]);
  if (rLo < out && t1 < n) store(t1, rLo, d[1]);
  if (rHi < out && t0 < n) store(t0, rHi, d[2]);
  if (rHi < out && t1 < n) store(t1, rHi, d[3]);
}

int roundWarp(int n) { return (n + 31) / 32 * 32; }

bool gPdl = false;

// kernel<<<grid, block, 0, s>>>(args...), with programmatic dependent launch when setPdl(true).
template <typename... KArgs, typename... Args>
void launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, cudaStream_t s, Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = gPdl ? 1 : 0;
  cudaLaunchKernelEx(&cfg, kernel, static_cast<KArgs>(args)...);
}

}  // namespace

void initSynthetic(__nv_bfloat16* dst, int64_t rows, int64_t cols, int64_t fullCols, int64_t rowOff, int64_t colOff,
                   uint64_t seed, uint32_t id, float scale, float offset, cudaStream_t s) {
  int64_t n = rows * cols;
  int blocks = static_cast<int>(std::min<int64_t>((n + 255) / 256, 65535));
  if (n > 0) initSyntheticKernel<<<blocks, 256, 0, s>>>(dst, rows, cols, fullCols, rowOff, colOff, seed, id, scale, offset);
}

void embed(const int32_t* tokens, int n, const __nv_bfloat16* E, int vocabBegin, int vocabLocal, int H, __nv_bfloat16* x,
           cudaStream_t s) {
  launch(embedKernel, n, 256, s, tokens, E, vocabBegin, vocabLocal, H, x);
}

void addRmsNorm(__nv_bfloat16* x, const __nv_bfloat16* add, const __nv_bfloat16* w, int n, int H, float eps, __nv_bfloat16* out,
                cudaStream_t s) {
  launch(addRmsNormKernel, n, 512, s, x, add, w, H, eps, out);
}

void rmsNormBf16(const __nv_bfloat16* in, int ldIn, const __nv_bfloat16* w, int n, int H, float eps, __nv_bfloat16* out,
                 int ldOut, cudaStream_t s) {
  launch(rmsNormKernel<__nv_bfloat16>, n, 512, s, in, ldIn, w, H, eps, out, ldOut);
}

void qkNormRopeStore(const __nv_bfloat16* qkv, int n, int hq, int hk, int D, const __nv_bfloat16* qNorm,
                     const __nv_bfloat16* kNorm, float eps, float theta, const int32_t* pos, int ropeOffset,
                     __nv_bfloat16* q, __nv_bfloat16* kCache, __nv_bfloat16* vCache, cudaStream_t s) {
  launch(qkNormRopeKernel, dim3(n, hq + 2 * hk), roundWarp(D / 2), s, qkv, hq, hk, D, qNorm, kNorm, eps, theta, pos,
                                                                     ropeOffset, q, kCache, vCache);
}

void attention(const __nv_bfloat16* q, const __nv_bfloat16* kCache, const __nv_bfloat16* vCache, const int32_t* pos, int n,
               int hq, int hk, int D, int splits, int chunk, float* part, __nv_bfloat16* out, cudaStream_t s) {
  const dim3 grid(splits, hq, n), block(32 * kAttnWarps);
  const bool vec = D % 8 == 0 && 32 % (D / 8) == 0 && reinterpret_cast<uintptr_t>(q) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(kCache) % 16 == 0 && reinterpret_cast<uintptr_t>(vCache) % 16 == 0;
  switch (vec ? D / 8 : 0) {
    case 1: launch(attnPartialVecKernel<1>, grid, block, s, q, kCache, vCache, pos, hq, hk, splits, chunk, part); break;
    case 2: launch(attnPartialVecKernel<2>, grid, block, s, q, kCache, vCache, pos, hq, hk, splits, chunk, part); break;
    case 4: launch(attnPartialVecKernel<4>, grid, block, s, q, kCache, vCache, pos, hq, hk, splits, chunk, part); break;
    case 8: launch(attnPartialVecKernel<8>, grid, block, s, q, kCache, vCache, pos, hq, hk, splits, chunk, part); break;
    case 16: launch(attnPartialVecKernel<16>, grid, block, s, q, kCache, vCache, pos, hq, hk, splits, chunk, part); break;
    case 32: launch(attnPartialVecKernel<32>, grid, block, s, q, kCache, vCache, pos, hq, hk, splits, chunk, part); break;
    default: launch(attnPartialKernel, grid, block, s, q, kCache, vCache, pos, hq, hk, D, splits, chunk, part);
  }
  launch(attnCombineKernel, dim3(hq, n), roundWarp(D), s, part, hq, D, splits, out);
}

void swiglu(const __nv_bfloat16* gu, int n, int I, __nv_bfloat16* act, cudaStream_t s) {
  launch(swigluKernel, dim3((I + 255) / 256, n), 256, s, gu, I, act);
}

void localArgmax(const float* logits, int n, int V, int vocabBegin, int tp, int rank, float* table, cudaStream_t s) {
  launch(localArgmaxKernel, n, 1024, s, logits, V, vocabBegin, tp, rank, table);
}

void pickArgmax(const float* table, int n, int tp, int32_t* tokens, cudaStream_t s) {
  launch(pickArgmaxKernel, (n + 127) / 128, 128, s, table, n, tp, tokens);
}

void copyRowsBf16(const __nv_bfloat16* src, int ldSrc, __nv_bfloat16* dst, int ldDst, int n, int cols, cudaStream_t s) {
  launch(copyRowsKernel, n, 256, s, src, ldSrc, dst, ldDst, cols);
}

void setPdl(bool on) { gPdl = on; }

bool gemvVectorizable(const void* W, const void* X, int in) {
  return in % 8 == 0 && reinterpret_cast<uintptr_t>(W) % 16 == 0 && reinterpret_cast<uintptr_t>(X) % 16 == 0;
}

bool gemvBf16(const __nv_bfloat16* W, int out, int in, const __nv_bfloat16* X, int n, void* Y, bool yF32,
              cudaStream_t s) {
  if (n < 1 || n > kGemvMaxTokens || out < 0 || in < 0) return false;
  if (out == 0) return true;
  const int units = (in + 31) / 32;
  // Split `in` over up to 8 warps, each with at least 2 unrolled rounds of units when possible.
  const int warps = std::max(1, std::min(kGemvMaxWarps, units / (2 * kGemvUnroll)));
  const dim3 grid((out + 15) / 16), block(32 * warps);
  const bool vec = gemvVectorizable(W, X, in);
  if (vec && yF32)
    launch(gemvKernel<true, true>, grid, block, s, W, out, in, X, n, Y);
  else if (vec)
    launch(gemvKernel<true, false>, grid, block, s, W, out, in, X, n, Y);
  else if (yF32)
    launch(gemvKernel<false, true>, grid, block, s, W, out, in, X, n, Y);
  else
    launch(gemvKernel<false, false>, grid, block, s, W, out, in, X, n, Y);
  return true;
}

}  // namespace gpu
}  // namespace qwen
