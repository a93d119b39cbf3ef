// gemv.cu: small-n GEMM ("GEMV") on the tensor cores (mma.sync m16n8k16 bf16, fp32 accumulation).
#include <algorithm>
#include <cfloat>
#include <cstdint>

#include "kernels/common.cuh"
#include "kernels/gemv.cuh"

namespace qwen {
namespace gpu {
namespace {

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

// What a block does with a tile's fp32 sums: kStore: Y = bf16 or fp32; kResidual: Y += bf16(sum),
// Y the bf16 residual stream; kSwiglu: A rows 0..7 are gate rows 8 b + g of W, rows 8..15 the up
// rows I + 8 b + g, and Y[t, 8 b + g] = silu(bf16(gate)) * bf16(up), swiglu's math.
enum GemvEpi { kStore = 0, kResidual = 1, kSwiglu = 2 };

// The sum of the squares of 8 bf16 (one 16-byte chunk of a residual row), fma in order from 0.
__device__ __forceinline__ float sumSq8(uint4 v) {
  const uint32_t* vs = &v.x;
  float ss = 0.f;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float lo = __uint_as_float(vs[j] << 16), hi = __uint_as_float(vs[j] & 0xffff0000u);
    ss = __fmaf_rn(lo, lo, ss);
    ss = __fmaf_rn(hi, hi, ss);
  }
  return ss;
}

// 1 / rms of a row of `in` values whose squares sum to ss.
__device__ __forceinline__ float invRms(float ss, int in, float eps) {
  return __fdiv_rn(1.f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, static_cast<float>(in)), eps)));
}

// 8 bf16 of a residual row -> bf16((x * inv) * w), addRmsNorm's rounding (norm_rows.cuh).
__device__ __forceinline__ uint4 normScale8(uint4 x, uint4 w, float inv) {
  uint32_t* xs = &x.x;
  const uint32_t* ws = &w.x;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float lo = __uint_as_float(xs[j] << 16), hi = __uint_as_float(xs[j] & 0xffff0000u);
    const float wl = __uint_as_float(ws[j] << 16), wh = __uint_as_float(ws[j] & 0xffff0000u);
    const __nv_bfloat162 v =
        __floats2bfloat162_rn(__fmul_rn(__fmul_rn(lo, inv), wl), __fmul_rn(__fmul_rn(hi, inv), wh));
    xs[j] = *reinterpret_cast<const uint32_t*>(&v);
  }
  return x;
}

// kResidual: the residual values a tile's stores add to, in the D fragment's order (0 where
// nothing is stored). Loaded together, ahead of the stores (one L2 round trip, not four).
template <int kEpi>
__device__ __forceinline__ void gemvLoadResidual(int rLo, int rHi, int t0, int n, int out, const void* Y,
                                                 float (&r)[4]) {
  if (kEpi != kResidual) return;
  const __nv_bfloat16* R = static_cast<const __nv_bfloat16*>(Y);
  auto at = [&](int t, int o) {
    return o < out && t < n ? __bfloat162float(R[static_cast<int64_t>(t) * out + o]) : 0.f;
  };
  r[0] = at(t0, rLo), r[1] = at(t0 + 1, rLo), r[2] = at(t0, rHi), r[3] = at(t0 + 1, rHi);
}

// One tile's D fragment to Y [n, out]: d0, d1 = (row rLo, tokens t0, t0 + 1); d2, d3 = (row rHi,
// the same tokens). kSwiglu: rLo is the act column, d0, d1 its gate and d2, d3 its up sums.
// kResidual: r holds gemvLoadResidual's values. Rows >= out and tokens >= n are not stored.
template <int kEpi, bool kF32>
__device__ __forceinline__ void gemvStoreTile(const float (&d)[4], const float (&r)[4], int rLo, int rHi, int t0, int n,
                                              int out, void* Y) {
  const int t1 = t0 + 1;
  if (kEpi == kSwiglu) {
    auto act = [&](int t, float gate, float up) {
      const float gt = __bfloat162float(__float2bfloat16_rn(gate)), u = __bfloat162float(__float2bfloat16_rn(up));
      static_cast<__nv_bfloat16*>(Y)[static_cast<int64_t>(t) * out + rLo] =
          __float2bfloat16_rn(gt / (1.f + __expf(-gt)) * u);
    };
    if (rLo < out && t0 < n) act(t0, d[0], d[2]);
    if (rLo < out && t1 < n) act(t1, d[1], d[3]);
    return;
  }
  auto store = [&](int t, int o, int e) {
    const int64_t i = static_cast<int64_t>(t) * out + o;
    if (kEpi == kResidual)
      static_cast<__nv_bfloat16*>(Y)[i] =
          __float2bfloat16_rn(__fadd_rn(r[e], __bfloat162float(__float2bfloat16_rn(d[e]))));
    else if (kF32)
      static_cast<float*>(Y)[i] = d[e];
    else
      static_cast<__nv_bfloat16*>(Y)[i] = __float2bfloat16_rn(d[e]);
  };
  if (rLo < out && t0 < n) store(t0, rLo, 0);
  if (rLo < out && t1 < n) store(t1, rLo, 1);
  if (rHi < out && t0 < n) store(t0, rHi, 2);
  if (rHi < out && t1 < n) store(t1, rHi, 3);
}

// minBlocks 2 (<= 128 registers): without it ptxas (CUDA 13) schedules each unit's loads right
// before its MMAs, one unit in flight per warp; with it the kGemvUnroll units' 12 loads issue
// back to back (checked in the SASS, 72 registers).
// The fused decode variants (gemvNormBf16, gemvNormSwiglu, gemvResidual in gemv.cuh): kNorm feeds the MMAs bf16(rmsnorm(X) * nw) instead
// of X (the block computes each token's 1 / rms itself, in a fixed order: a function of the row
// only); kEpi says what the block does with its fp32 sums (GemvEpi).
struct GemvFuse {
  const __nv_bfloat16* normW = nullptr;  // kNorm: the RMSNorm weight [in]
  float eps = 0.f;
};

template <bool kVec, bool kF32, bool kNorm = false, int kEpi = kStore>
__global__ void __launch_bounds__(kGemvMaxWarps * 32, 2)
    gemvKernel(const __nv_bfloat16* W, int out, int in, const __nv_bfloat16* X, int n, void* Y, GemvFuse fuse) {
  __shared__ float part[kGemvMaxWarps][32][4];
  __shared__ float shInv[kGemvMaxTokens];
  __shared__ float shSq[kNorm ? kGemvMaxTokens * kGemvNormMaxIn / 8 : 1];  // kNorm: squares per 16-byte chunk
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int g = lane >> 2, c = lane & 3;
  // kSwiglu: `out` is I, the act width; W has 2 I rows.
  const int rLo = kEpi == kSwiglu ? blockIdx.x * 8 + g : blockIdx.x * 16 + g;
  const int rHi = kEpi == kSwiglu ? out + rLo : rLo + 8;
  const int rows = kEpi == kSwiglu ? 2 * out : out;
  // Rows past `out` and tokens past n read a valid row (the last one) and are never stored: a
  // row of A only reaches the same row of D, a column of B the same column of D.
  const __nv_bfloat16* wLo = W + static_cast<int64_t>(min(rLo, out - 1)) * in;
  const __nv_bfloat16* wHi = W + static_cast<int64_t>(min(rHi, rows - 1)) * in;
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
  float inv = 1.f;  // kNorm: 1 / rms of this lane's token
  if (kNorm) {
    // Every 16-byte chunk's sum of 8 squares (fma, in order) into shared memory, all tokens' chunks
    // loaded at once (one L2 round trip per 8 chunks a thread); then token tt's sum by warp
    // tt % warps: lane l adds chunks l, l + 32, ... in order, then the butterfly. The order
    // depends on `in` only (not on n or the warp count).
    const int chunks = in / 8;
#pragma unroll 8
    for (int i = threadIdx.x; i < n * chunks; i += blockDim.x) {
      shSq[i] = sumSq8(__ldg(reinterpret_cast<const uint4*>(X + static_cast<int64_t>(i) * 8)));
    }
    __syncthreads();
    for (int tt = warp; tt < n; tt += warps) {
      float ss = 0.f;
      for (int ch = lane; ch < chunks; ch += 32) ss = __fadd_rn(ss, shSq[tt * chunks + ch]);
      ss = warpSum(ss);
      if (lane == 0) shInv[tt] = invRms(ss, in, fuse.eps);
    }
    __syncthreads();
    inv = shInv[min(g, n - 1)];
  }
  // X's 8 values at column k as the MMA takes them (normed with kNorm).
  auto loadX = [&](int k) {
    const uint4 x = __ldg(reinterpret_cast<const uint4*>(xr + k));
    return kNorm ? normScale8(x, __ldg(reinterpret_cast<const uint4*>(fuse.normW + k)), inv) : x;
  };
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
        x[j] = loadX(k);
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
                x = kNorm ? (k < in ? loadX(k) : make_uint4(0u, 0u, 0u, 0u)) : gemvLoad8<kVec, false>(xr, k, in);
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
  float r[4];
  gemvLoadResidual<kEpi>(rLo, rHi, 2 * c, n, out, Y, r);
  gemvStoreTile<kEpi, kF32>(d, r, rLo, rHi, 2 * c, n, out, Y);
}

}  // namespace

bool prepareGemv() {
  // cudaFuncGetAttributes loads a kernel (CUDA's lazy loading would otherwise load it at its
  // first launch, which may wait for the whole device: gemv.cuh).
  cudaFuncAttributes fa;
  const cudaError_t e[] = {cudaFuncGetAttributes(&fa, gemvKernel<true, true>),
                           cudaFuncGetAttributes(&fa, gemvKernel<true, false>),
                           cudaFuncGetAttributes(&fa, gemvKernel<false, true>),
                           cudaFuncGetAttributes(&fa, gemvKernel<false, false>),
                           cudaFuncGetAttributes(&fa, gemvKernel<true, false, true, kStore>),
                           cudaFuncGetAttributes(&fa, gemvKernel<true, false, true, kSwiglu>),
                           cudaFuncGetAttributes(&fa, gemvKernel<true, false, false, kResidual>)};
  for (cudaError_t x : e)
    if (x != cudaSuccess) return false;
  return true;
}

bool gemvVectorizable(const void* W, const void* X, int in) {
  return in % 8 == 0 && reinterpret_cast<uintptr_t>(W) % 16 == 0 && reinterpret_cast<uintptr_t>(X) % 16 == 0;
}

bool gemvBf16(const __nv_bfloat16* W, int out, int in, const __nv_bfloat16* X, int n, void* Y, bool yF32,
              cudaStream_t s) {
  if (n < 1 || n > kGemvMaxTokens || out < 0 || in < 0) return false;
  if (out == 0) return true;
  const bool vec = gemvVectorizable(W, X, in);
  const int units = (in + 31) / 32;
  // Split `in` over up to 8 warps, each with at least 2 unrolled rounds of units when possible.
  const int warps = std::max(1, std::min(kGemvMaxWarps, units / (2 * kGemvUnroll)));
  const dim3 grid((out + 15) / 16), block(32 * warps);
  if (vec && yF32)
    launch(gemvKernel<true, true>, grid, block, s, W, out, in, X, n, Y, GemvFuse{});
  else if (vec)
    launch(gemvKernel<true, false>, grid, block, s, W, out, in, X, n, Y, GemvFuse{});
  else if (yF32)
    launch(gemvKernel<false, true>, grid, block, s, W, out, in, X, n, Y, GemvFuse{});
  else
    launch(gemvKernel<false, false>, grid, block, s, W, out, in, X, n, Y, GemvFuse{});
  return true;
}

namespace {

// One launch per group of up to kGemvMaxTokens tokens (rows are independent: a token's bits do
// not depend on its group); rowsOut: output rows per block (16, or 8 act columns with kSwiglu).
template <bool kNorm, int kEpi>
bool gemvFused(const __nv_bfloat16* W, int out, int in, const __nv_bfloat16* X, int n, __nv_bfloat16* Y,
               const GemvFuse& fuse, cudaStream_t s) {
  if (n < 1 || n > kGemvFusedMaxTokens || out <= 0 || !gemvVectorizable(W, X, in) ||
      (kNorm && (reinterpret_cast<uintptr_t>(fuse.normW) % 16 != 0 || in > kGemvNormMaxIn)))
    return false;
  const int units = (in + 31) / 32, rowsOut = kEpi == kSwiglu ? 8 : 16;
  const int warps = std::max(1, std::min(kGemvMaxWarps, units / (2 * kGemvUnroll)));
  for (int t0 = 0; t0 < n; t0 += kGemvMaxTokens)
    launch(gemvKernel<true, false, kNorm, kEpi>, dim3((out + rowsOut - 1) / rowsOut), dim3(32 * warps), s, W, out, in,
           X + static_cast<int64_t>(t0) * in, std::min(kGemvMaxTokens, n - t0),
           static_cast<void*>(Y + static_cast<int64_t>(t0) * out), fuse);
  return true;
}

}  // namespace

bool gemvNormBf16(const __nv_bfloat16* W, int out, int in, const __nv_bfloat16* X, int n, const __nv_bfloat16* normW,
                  float eps, __nv_bfloat16* Y, cudaStream_t s) {
  return gemvFused<true, kStore>(W, out, in, X, n, Y, GemvFuse{normW, eps}, s);
}

bool gemvNormSwiglu(const __nv_bfloat16* W, int I, int in, const __nv_bfloat16* X, int n, const __nv_bfloat16* normW,
                    float eps, __nv_bfloat16* act, cudaStream_t s) {
  return gemvFused<true, kSwiglu>(W, I, in, X, n, act, GemvFuse{normW, eps}, s);
}

bool gemvResidual(const __nv_bfloat16* W, int out, int in, const __nv_bfloat16* X, int n, __nv_bfloat16* R,
                  cudaStream_t s) {
  return gemvFused<false, kResidual>(W, out, in, X, n, R, GemvFuse{}, s);
}

}  // namespace gpu
}  // namespace qwen
