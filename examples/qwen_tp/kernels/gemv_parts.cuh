// gemv_parts.cuh: what the two small-n GEMV kernels (gemv.cu's v1, gemv_v2.cu's v2) share: the
// fused epilogues' names, the RMSNorm prologue's arithmetic (a function of the row only, so both
// kernels give a token the same 1 / rms and the same normed operand), and the store of one
// m16n8k16 tile's sums. Device code: included by kernels/gemv*.cu only.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace qwen {
namespace gpu {
namespace {

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

}  // namespace
}  // namespace gpu
}  // namespace qwen
