// gpu_kernels.cu: RMSNorm, q/k norm + rotary + KV store, split-sequence decode attention,
// SwiGLU, embedding, argmax and the synthetic initializer. Plain CUDA, sm_80+; fp32 math.
#include "gpu_kernels.h"

#include <cfloat>

#include "synth.h"

namespace qwen {
namespace gpu {
namespace {

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

// grid (hq, n), block D threads (rounded to a warp): merge the splits of one (query, head).
__global__ void attnCombineKernel(const float* part, int hq, int D, int splits, __nv_bfloat16* out) {
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
  const int t = blockIdx.y;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < I; i += gridDim.x * blockDim.x) {
    const float g = __bfloat162float(gu[static_cast<int64_t>(t) * 2 * I + i]);
    const float u = __bfloat162float(gu[static_cast<int64_t>(t) * 2 * I + I + i]);
    act[static_cast<int64_t>(t) * I + i] = __float2bfloat16_rn(g / (1.f + __expf(-g)) * u);
  }
}

// One block per row; lowest index wins ties.
__global__ void localArgmaxKernel(const float* logits, int V, int vocabBegin, int tp, int rank, float* table) {
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
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= n) return;
  int br = 0;
  for (int r = 1; r < tp; ++r)
    if (table[(t * tp + r) * 2] > table[(t * tp + br) * 2]) br = r;
  tokens[t] = static_cast<int32_t>(table[(t * tp + br) * 2 + 1]);
}

__global__ void copyRowsKernel(const __nv_bfloat16* src, int ldSrc, __nv_bfloat16* dst, int ldDst, int cols) {
  for (int i = threadIdx.x; i < cols; i += blockDim.x)
    dst[static_cast<int64_t>(blockIdx.x) * ldDst + i] = src[static_cast<int64_t>(blockIdx.x) * ldSrc + i];
}

int roundWarp(int n) { return (n + 31) / 32 * 32; }

}  // namespace

void initSynthetic(__nv_bfloat16* dst, int64_t rows, int64_t cols, int64_t fullCols, int64_t rowOff, int64_t colOff,
                   uint64_t seed, uint32_t id, float scale, float offset, cudaStream_t s) {
  int64_t n = rows * cols;
  int blocks = static_cast<int>(std::min<int64_t>((n + 255) / 256, 65535));
  if (n > 0) initSyntheticKernel<<<blocks, 256, 0, s>>>(dst, rows, cols, fullCols, rowOff, colOff, seed, id, scale, offset);
}

void embed(const int32_t* tokens, int n, const __nv_bfloat16* E, int vocabBegin, int vocabLocal, int H, __nv_bfloat16* x,
           cudaStream_t s) {
  embedKernel<<<n, 256, 0, s>>>(tokens, E, vocabBegin, vocabLocal, H, x);
}

void addRmsNorm(__nv_bfloat16* x, const __nv_bfloat16* add, const __nv_bfloat16* w, int n, int H, float eps, __nv_bfloat16* out,
                cudaStream_t s) {
  addRmsNormKernel<<<n, 512, 0, s>>>(x, add, w, H, eps, out);
}

void rmsNormBf16(const __nv_bfloat16* in, int ldIn, const __nv_bfloat16* w, int n, int H, float eps, __nv_bfloat16* out,
                 int ldOut, cudaStream_t s) {
  rmsNormKernel<__nv_bfloat16><<<n, 512, 0, s>>>(in, ldIn, w, H, eps, out, ldOut);
}

void qkNormRopeStore(const __nv_bfloat16* qkv, int n, int hq, int hk, int D, const __nv_bfloat16* qNorm,
                     const __nv_bfloat16* kNorm, float eps, float theta, const int32_t* pos, int ropeOffset,
                     __nv_bfloat16* q, __nv_bfloat16* kCache, __nv_bfloat16* vCache, cudaStream_t s) {
  qkNormRopeKernel<<<dim3(n, hq + 2 * hk), roundWarp(D / 2), 0, s>>>(qkv, hq, hk, D, qNorm, kNorm, eps, theta, pos,
                                                                     ropeOffset, q, kCache, vCache);
}

void attention(const __nv_bfloat16* q, const __nv_bfloat16* kCache, const __nv_bfloat16* vCache, const int32_t* pos, int n,
               int hq, int hk, int D, int splits, int chunk, float* part, __nv_bfloat16* out, cudaStream_t s) {
  attnPartialKernel<<<dim3(splits, hq, n), 32 * kAttnWarps, 0, s>>>(q, kCache, vCache, pos, hq, hk, D, splits, chunk, part);
  attnCombineKernel<<<dim3(hq, n), roundWarp(D), 0, s>>>(part, hq, D, splits, out);
}

void swiglu(const __nv_bfloat16* gu, int n, int I, __nv_bfloat16* act, cudaStream_t s) {
  swigluKernel<<<dim3((I + 255) / 256, n), 256, 0, s>>>(gu, I, act);
}

void localArgmax(const float* logits, int n, int V, int vocabBegin, int tp, int rank, float* table, cudaStream_t s) {
  localArgmaxKernel<<<n, 1024, 0, s>>>(logits, V, vocabBegin, tp, rank, table);
}

void pickArgmax(const float* table, int n, int tp, int32_t* tokens, cudaStream_t s) {
  pickArgmaxKernel<<<(n + 127) / 128, 128, 0, s>>>(table, n, tp, tokens);
}

void copyRowsBf16(const __nv_bfloat16* src, int ldSrc, __nv_bfloat16* dst, int ldDst, int n, int cols, cudaStream_t s) {
  copyRowsKernel<<<n, 256, 0, s>>>(src, ldSrc, dst, ldDst, cols);
}

}  // namespace gpu
}  // namespace qwen
