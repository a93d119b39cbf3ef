// fused_rmsnorm_common.cuh: the per-row residual add + RMSNorm every norm kernel runs (the
// unfused one after an all-reduce and the fused P2P ones), so all of them give the same bits as
// hostResidualRmsNorm() (fused_rmsnorm.h states the arithmetic).
//
// One row per block of kRmsNormThreads threads. The row is cut into 16-byte units (4 f32 or 8
// 16-bit elements; the last one may be partial when hidden is not a multiple); thread t owns
// units t, t + 512, ... (at most 8 f32 / 4 16-bit units: 32 values, kept in registers between
// the two passes). Pass 1: x (from the caller's functor), residual += x rounded to T, sum of
// squares with fmaf in element order. Block sum: xor butterfly in each warp, then thread 0 adds
// the 16 warp sums in order (fixed order: the same bits on every rank and every run). Pass 2:
// out = residual * inv_rms * weight. Between the passes the block synchronises, so a caller may
// alias out with x's source (each unit is read and written by the same thread).
#pragma once

#include "algos/common/device_common.cuh"
#include "algos/common/launch.cuh"
#include "algos/fused/fused_rmsnorm.h"

namespace tpcomm {
namespace dev {

template <typename T>
struct NormShape {
  static constexpr int kUnit = kPackBytes / sizeof(T);  // elements per unit
  static constexpr int kUnitsPerThread = static_cast<int>(kMaxRmsNormHidden / kUnit / kRmsNormThreads);
};

// Loads unit u (elements [u*kUnit, u*kUnit + n)) of `row` as floats; kVec: one 16-byte load.
// kCached false: past L1 (ld.global.cg / .cv) for data a peer wrote during this kernel.
template <typename T, bool kVec, bool kPeerData>
__device__ __forceinline__ void loadUnit(const T* row, size_t u, int n, float (&f)[NormShape<T>::kUnit]) {
  constexpr int kUnit = NormShape<T>::kUnit;
  if (kVec) {
    const Pack* q = reinterpret_cast<const Pack*>(row + u * kUnit);
    PackOf<T>::toFloats(kPeerData ? __ldcg(q) : *q, f);
  } else {
#pragma unroll
    for (int k = 0; k < kUnit; ++k)
      f[k] = k < n ? Elem<T>::toFloat(kPeerData ? loadUncached(row + u * kUnit + k) : row[u * kUnit + k]) : 0.0f;
  }
}

// Stores the first n values of unit u of `row`.
template <typename T, bool kVec>
__device__ __forceinline__ void storeUnit(T* row, size_t u, int n, const T (&v)[NormShape<T>::kUnit]) {
  constexpr int kUnit = NormShape<T>::kUnit;
  if (kVec) {
    *reinterpret_cast<Pack*>(row + u * kUnit) = *reinterpret_cast<const Pack*>(v);
  } else {
#pragma unroll
    for (int k = 0; k < kUnit; ++k)
      if (k < n) row[u * kUnit + k] = v[k];
  }
}

// An emitResidual / emitOut of residualRmsNormRow (below) for rows nobody else needs.
template <typename T>
struct NoEmit {
  __device__ __forceinline__ void operator()(size_t, int, const T (&)[NormShape<T>::kUnit]) const {}
};

// Sum over the block of `v`, in the fixed order described above; every thread gets it.
__device__ __forceinline__ float blockSumFixedOrder(float v) {
  __shared__ float warpSums[kWarpsPerBlock];
  __shared__ float total;
#pragma unroll
  for (int off = 16; off >= 1; off /= 2) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, off));
  if ((threadIdx.x & 31) == 0) warpSums[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = warpSums[0];
    for (int w = 1; w < kWarpsPerBlock; ++w) t = __fadd_rn(t, warpSums[w]);
    total = t;
  }
  __syncthreads();
  const float result = total;
  __syncthreads();  // warpSums / total may be reused by the next row
  return result;
}

// One row: xAt(u, n, float(&)[kUnit]) gives the all-reduced x of unit u (already rounded to T);
// emitResidual(u, n, const T(&)[kUnit]) and emitOut(...) receive the updated residual and the
// normalised values after they are stored to residualRow / outRow (two-shot pushes them to its
// peers there). Call with all kRmsNormThreads threads of the block.
template <typename T, bool kVec, typename XFn, typename ResFn, typename OutFn>
__device__ __forceinline__ void residualRmsNormRow(size_t hidden, T* residualRow, const T* weight, T* outRow, float eps,
                                                   XFn xAt, ResFn emitResidual, OutFn emitOut) {
  constexpr int kUnit = NormShape<T>::kUnit, kMaxUnits = NormShape<T>::kUnitsPerThread;
  // Residual and weight do not depend on x: the first kPrefetch units of each are loaded before
  // xAt, so their memory latency overlaps the wait for x (the fused kernels poll peers' data
  // there) instead of following it. Same values, same arithmetic: the bits do not change. Raw
  // 16-byte packs (4 registers each), and only 2 units, to stay clear of spills at 512 threads.
  constexpr int kPrefetch = kVec ? (kMaxUnits < 2 ? kMaxUnits : 2) : 0;
  const size_t units = (hidden + kUnit - 1) / kUnit;
  Pack resAhead[kPrefetch > 0 ? kPrefetch : 1], wAhead[kPrefetch > 0 ? kPrefetch : 1];
#pragma unroll
  for (int j = 0; j < kPrefetch; ++j) {
    const size_t u = threadIdx.x + static_cast<size_t>(j) * kRmsNormThreads;
    if (u < units) {
      resAhead[j] = reinterpret_cast<const Pack*>(residualRow)[u];
      wAhead[j] = reinterpret_cast<const Pack*>(weight)[u];
    }
  }
  float vals[kMaxUnits][kUnit];
  float sumSquares = 0.0f;
#pragma unroll
  for (int j = 0; j < kMaxUnits; ++j) {
    const size_t u = threadIdx.x + static_cast<size_t>(j) * kRmsNormThreads;
    if (u >= units) break;
    const int n = hidden - u * kUnit < static_cast<size_t>(kUnit) ? static_cast<int>(hidden - u * kUnit) : kUnit;
    float x[kUnit], res[kUnit];
    xAt(u, n, x);
    if (j < kPrefetch)
      PackOf<T>::toFloats(resAhead[j], res);
    else
      loadUnit<T, kVec, false>(residualRow, u, n, res);
    T updated[kUnit];
#pragma unroll
    for (int k = 0; k < kUnit; ++k) {
      updated[k] = Elem<T>::fromFloat(__fadd_rn(res[k], x[k]));
      vals[j][k] = Elem<T>::toFloat(updated[k]);
      if (k < n) sumSquares = __fmaf_rn(vals[j][k], vals[j][k], sumSquares);
    }
    storeUnit<T, kVec>(residualRow, u, n, updated);
    emitResidual(u, n, updated);
  }
  const float total = blockSumFixedOrder(sumSquares);
  const float invRms = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(total, static_cast<float>(hidden)), eps)));
#pragma unroll
  for (int j = 0; j < kMaxUnits; ++j) {
    const size_t u = threadIdx.x + static_cast<size_t>(j) * kRmsNormThreads;
    if (u >= units) break;
    const int n = hidden - u * kUnit < static_cast<size_t>(kUnit) ? static_cast<int>(hidden - u * kUnit) : kUnit;
    float w[kUnit];
    if (j < kPrefetch)
      PackOf<T>::toFloats(wAhead[j], w);
    else
      loadUnit<T, kVec, false>(weight, u, n, w);
    T y[kUnit];
#pragma unroll
    for (int k = 0; k < kUnit; ++k) y[k] = Elem<T>::fromFloat(__fmul_rn(__fmul_rn(vals[j][k], invRms), w[k]));
    storeUnit<T, kVec>(outRow, u, n, y);
    emitOut(u, n, y);
  }
}

// x of one unit reduced from n sources in rank order 0..n-1 in fp32, rounded to T (allReduce's
// bits): srcAt(r) is rank r's row (the local input for r == me, peer data otherwise).
template <typename T, bool kVec, typename SrcFn>
__device__ __forceinline__ void reduceUnit(int me, int nRanks, SrcFn srcAt, size_t u, int n,
                                           float (&x)[NormShape<T>::kUnit]) {
  constexpr int kUnit = NormShape<T>::kUnit;
  float acc[kUnit], v[kUnit];
  if (me == 0)
    loadUnit<T, kVec, false>(srcAt(0), u, n, acc);
  else
    loadUnit<T, kVec, true>(srcAt(0), u, n, acc);
#pragma unroll
  for (int k = 0; k < kUnit; ++k) acc[k] = __fadd_rn(acc[k], 0.0f);  // -0.0 reads as +0.0 (kZeroRule)
  for (int r = 1; r < nRanks; ++r) {
    if (r == me)
      loadUnit<T, kVec, false>(srcAt(r), u, n, v);
    else
      loadUnit<T, kVec, true>(srcAt(r), u, n, v);
#pragma unroll
    for (int k = 0; k < kUnit; ++k) acc[k] = __fadd_rn(acc[k], v[k]);
  }
#pragma unroll
  for (int k = 0; k < kUnit; ++k) x[k] = Elem<T>::toFloat(Elem<T>::fromFloat(acc[k]));
}

// Copies elements [0, count) from src to dst with the block's threads (16-byte packs when kVec).
template <typename T, bool kVec, bool kPeerData>
__device__ __forceinline__ void copyRow(T* dst, const T* src, size_t count) {
  constexpr int kUnit = NormShape<T>::kUnit;
  if (kVec) {
    for (size_t i = threadIdx.x; i < count / kUnit; i += blockDim.x) {
      const Pack* q = reinterpret_cast<const Pack*>(src) + i;
      reinterpret_cast<Pack*>(dst)[i] = kPeerData ? __ldcg(q) : *q;
    }
  } else {
    for (size_t i = threadIdx.x; i < count; i += blockDim.x) dst[i] = kPeerData ? loadUncached(src + i) : src[i];
  }
}

}  // namespace dev
}  // namespace tpcomm
