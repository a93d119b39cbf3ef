// quantize_warp.cuh: one warp quantizes, or reads back, one block of kQuantBlockElems elements
// with quantize.h's functions (so the bits are the host's): lane l holds elements
// l * kPerLane .. + kPerLane - 1. Shared by the compressed kernels (twoshot_p2p_compressed.cu,
// staged_host_compressed.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "algos/device_common.cuh"
#include "algos/launch.cuh"
#include "algos/quantize.h"

namespace tpcomm {
namespace dev {

constexpr int kPerLane = kQuantBlockElems / 32;
static_assert(kQuantBlockElems % 32 == 0 && kPerLane == 2,
              "a lane holds two elements of a block (one 16-bit code store)");

// A wire: code bytes, then one fp32 scale per block.
struct Wire {
  uint8_t* codes;
  float* scales;
};
__device__ __forceinline__ Wire wireAt(char* base, size_t codeBytes) {
  return {reinterpret_cast<uint8_t*>(base), reinterpret_cast<float*>(base + codeBytes)};
}

// The block's amax as quantAmax computes it (max of |x| over the valid elements, NaN if any is
// NaN), over the warp's 32 lanes x kPerLane values (invalid ones are 0).
__device__ __forceinline__ float warpAmax(const float (&x)[kPerLane]) {
  float a = 0.0f;
  bool nan = false;
#pragma unroll
  for (int u = 0; u < kPerLane; ++u) {
    nan = nan || !(x[u] == x[u]);
    a = fmaxf(a, fabsf(x[u]));
  }
  nan = __any_sync(0xffffffffu, nan);
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, d));
  return nan ? quantBitsFloat(0x7fc00000u) : a;
}

// Quantizes one block held by the warp (m valid elements, x[u] of lane at element lane*kPerLane+u):
// the codes into code[0..m) (at element offset i of `w`) and the scale into w.scales[s] (lane 0),
// for every wire in `ws`; returns the lane's values read back.
template <int F, int kWires>
__device__ __forceinline__ void quantizeWarp(const float (&x)[kPerLane], int m, const Wire (&ws)[kWires], int used,
                                             size_t i, size_t s, float (&back)[kPerLane]) {
  constexpr QuantFormat f = static_cast<QuantFormat>(F);
  const int lane = threadIdx.x & 31;
  const float scale = quantScale(f, warpAmax(x));
  uint8_t c[kPerLane];
#pragma unroll
  for (int u = 0; u < kPerLane; ++u) {
    c[u] = quantEncode(f, x[u], scale);
    back[u] = quantDecode(f, c[u], scale);
  }
  const int e = lane * kPerLane;
  for (int k = 0; k < used; ++k) {
    if (m == kQuantBlockElems) {
      *reinterpret_cast<uint16_t*>(ws[k].codes + i + e) = static_cast<uint16_t>(c[0] | (c[1] << 8));
    } else {
#pragma unroll
      for (int u = 0; u < kPerLane; ++u)
        if (e + u < m) ws[k].codes[i + e + u] = c[u];
    }
    if (lane == 0) ws[k].scales[s] = scale;
  }
}

// One block's values read back from a wire a peer wrote: ld.global.cg (past L1) for a peer GPU's
// memory, or with kUncached ld.global.cv (past every cache) for host memory another GPU rewrote
// over PCIe since this GPU may have cached it (staged_host's rule).
template <int F, bool kUncached>
__device__ __forceinline__ void readBack(const Wire& w, size_t i, size_t s, int m, float (&v)[kPerLane]) {
  constexpr QuantFormat f = static_cast<QuantFormat>(F);
  const int e = (threadIdx.x & 31) * kPerLane;
  const float scale = kUncached ? __ldcv(w.scales + s) : __ldcg(w.scales + s);
  uint8_t c[kPerLane];
  if (m == kQuantBlockElems) {  // both codes in one 16-bit load (i is a multiple of the block)
    const auto* p = reinterpret_cast<const unsigned short*>(w.codes + i + e);
    const unsigned short two = kUncached ? __ldcv(p) : __ldcg(p);
    c[0] = static_cast<uint8_t>(two & 0xffu);
    c[1] = static_cast<uint8_t>(two >> 8);
  } else {
#pragma unroll
    for (int u = 0; u < kPerLane; ++u)
      c[u] = e + u < m ? (kUncached ? __ldcv(w.codes + i + e + u) : __ldcg(w.codes + i + e + u)) : 0;
  }
#pragma unroll
  for (int u = 0; u < kPerLane; ++u) v[u] = e + u < m ? quantDecode(f, c[u], scale) : 0.0f;
}

template <typename T>
__device__ __forceinline__ void loadBlock(const T* x, int m, float (&v)[kPerLane]) {
  const int e = (threadIdx.x & 31) * kPerLane;
#pragma unroll
  for (int u = 0; u < kPerLane; ++u) v[u] = e + u < m ? dev::Elem<T>::toFloat(x[e + u]) : 0.0f;
}

template <typename T>
__device__ __forceinline__ void storeBlock(T* y, int m, const float (&v)[kPerLane]) {
  const int e = (threadIdx.x & 31) * kPerLane;
#pragma unroll
  for (int u = 0; u < kPerLane; ++u)
    if (e + u < m) y[e + u] = dev::Elem<T>::fromFloat(v[u]);
}

// The reduce step of the compressed kernels for one block held by the warp: this rank's own
// values x (0 past m) quantized and read back locally (the bits it sent its peers), summed with
// every other rank's read-back values in fp32 in rank order 0..n-1 (quantAdd: never an FMA);
// readPeer(r, v) fills v with rank r's. Lanes past m get 0, so they take no part in the sum's amax.
template <int F, typename ReadPeer>
__device__ __forceinline__ void sumReadBack(const float (&x)[kPerLane], int m, int n, int me, ReadPeer readPeer,
                                            float (&acc)[kPerLane]) {
  constexpr QuantFormat f = static_cast<QuantFormat>(F);
  float own[kPerLane], v[kPerLane];
  const float scale = quantScale(f, warpAmax(x));
#pragma unroll
  for (int u = 0; u < kPerLane; ++u) own[u] = quantDecode(f, quantEncode(f, x[u], scale), scale);
  for (int r = 0; r < n; ++r) {
    if (r != me) readPeer(r, v);
#pragma unroll
    for (int u = 0; u < kPerLane; ++u) {
      const float y = r == me ? own[u] : v[u];
      acc[u] = r == 0 ? y : quantAdd(acc[u], y);
    }
  }
  const int e = (threadIdx.x & 31) * kPerLane;
#pragma unroll
  for (int u = 0; u < kPerLane; ++u)
    if (e + u >= m) acc[u] = 0.0f;
}

// Calls launch(TypeTag<T>, IntTag<format>) for the call's dtype and format (dispatchKernel's op
// slot carries the format: 0 fp8, 1 int8).
template <typename Launch>
cudaError_t dispatchCompressed(int dtype, int format, Launch launch) {
  return dispatchKernel(dtype, format, false, [&](auto t, auto fmt, auto) { return launch(t, fmt); });
}

}  // namespace dev
}  // namespace tpcomm
