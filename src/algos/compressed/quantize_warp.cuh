// quantize_warp.cuh: a warp quantizes, or reads back, kBlocksPerWarp = 8 blocks of
// kQuantBlockElems = 64 elements at a time with quantize.h's functions (so the bits are the
// host's). Lane l belongs to group g = l / 4, which holds the warp's block g; the lane holds its
// elements e .. e + 15, e = (l % 4) * kPerLane: 16 one-byte codes are one 16-byte load or store,
// so a warp moves 512 code bytes per round trip (the kernels read codes from host memory over
// PCIe or from a peer GPU, and are bound by the bytes in flight). A block's amax is reduced over
// its group's 4 lanes (lanes l ^ 1, l ^ 2), and the group's first lane stores its scale. Groups
// past the end of a range get m = 0: they take part in the shuffles, but load and store nothing.
// Shared by the compressed kernels (twoshot_p2p_compressed.cu, staged_host_compressed.cu).
//
// Alignment: a 16-byte access is used only where its address is 16-byte aligned (checked at run
// time; otherwise one element or code at a time) and the lane's 16 elements are all in the block
// (m >= e + 16). The kernels' wires keep code addresses aligned (each kernel says why), so the
// narrow path serves only partial blocks and inputs or outputs at an address not 16-byte aligned.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "algos/common/device_common.cuh"
#include "algos/common/launch.cuh"
#include "algos/compressed/quantize.h"

namespace tpcomm {
namespace dev {

constexpr int kPerLane = 16;                                   // elements (codes) per lane
constexpr int kLanesPerBlock = kQuantBlockElems / kPerLane;    // a group: 4 lanes
constexpr int kBlocksPerWarp = 32 / kLanesPerBlock;            // 8 blocks per warp per step
constexpr int kWarpElems = kBlocksPerWarp * kQuantBlockElems;  // 512 elements per warp per step
static_assert(kQuantBlockElems == 64 && kPerLane == 16 && kLanesPerBlock == 4,
              "a lane holds 16 elements of a block (one 16-byte code load); 4 lanes a block");

// The lane's first element within its group's block.
__device__ __forceinline__ int laneElem() { return (threadIdx.x & (kLanesPerBlock - 1)) * kPerLane; }
__device__ __forceinline__ bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & (kPackBytes - 1)) == 0;
}

// Calls fn(k, m) for the quantization blocks [k, k + m) of [lo, hi) that warp `warp` of
// `nWarps` handles (blocks start at lo + multiples of kQuantBlockElems; the last may be partial):
// at step t the warp's group g takes the block at lo + (t * nWarps + warp) * kWarpElems +
// g * kQuantBlockElems, with m = 0 if that is past hi. Every lane of the warp calls fn the same
// number of times (fn shuffles within the warp).
template <typename Fn>
__device__ __forceinline__ void forWarpBlocks(size_t lo, size_t hi, int warp, int nWarps, Fn fn) {
  const size_t group = (threadIdx.x & 31) / kLanesPerBlock;
  for (size_t k0 = lo + static_cast<size_t>(warp) * kWarpElems; k0 < hi;
       k0 += static_cast<size_t>(nWarps) * kWarpElems) {
    size_t k = k0 + group * kQuantBlockElems;
    const int m = k < hi ? static_cast<int>(hi - k < kQuantBlockElems ? hi - k : kQuantBlockElems) : 0;
    // k opaque to the optimizer: otherwise loop strength reduction keeps one 64-bit address per
    // element u of the byte-wise paths (base + u, hoisted out of the loop): 16 register pairs,
    // which spill.
    asm("" : "+l"(k));
    fn(k, m);
  }
}

// A wire: code bytes, then one fp32 scale per block.
struct Wire {
  uint8_t* codes;
  float* scales;
};
__device__ __forceinline__ Wire wireAt(char* base, size_t codeBytes) {
  return {reinterpret_cast<uint8_t*>(base), reinterpret_cast<float*>(base + codeBytes)};
}

// The block's amax as quantAmax computes it (max of |x| over the valid elements, NaN if any is
// NaN), over the group's 4 lanes x kPerLane values (invalid ones are 0). fmaxf of non-NaN values
// is exact and order-free, and fabsf makes -0 +0, so the order of the reduction changes no bit.
// All 32 lanes must call it.
__device__ __forceinline__ float groupAmax(const float (&x)[kPerLane]) {
  float a = 0.0f;
  bool nan = false;
#pragma unroll
  for (int u = 0; u < kPerLane; ++u) {
    nan = nan || !(x[u] == x[u]);
    a = fmaxf(a, fabsf(x[u]));
  }
  int anyNan = nan ? 1 : 0;
#pragma unroll
  for (int d = 1; d < kLanesPerBlock; d <<= 1) {  // the group's lanes differ in the low 2 bits
    a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, d));
    anyNan |= __shfl_xor_sync(0xffffffffu, anyNan, d);
  }
  return anyNan ? quantBitsFloat(0x7fc00000u) : a;
}

// A lane's 16 codes (code u is byte u % 4 of w[u / 4], the little-endian order of the bytes in
// memory) and its block's scale.
struct Codes {
  uint32_t w[kPerLane / 4];
  float scale;
};
__device__ __forceinline__ uint8_t codeAt(const Codes& c, int u) {
  return static_cast<uint8_t>(c.w[u / 4] >> (8 * (u % 4)));
}

// Quantizes one block per group (x[u] of a lane at element laneElem() + u of the block, 0 past
// the valid elements): the block's scale and the lane's codes. All 32 lanes must call it.
template <int F>
__device__ __forceinline__ Codes quantizeGroup(const float (&x)[kPerLane]) {
  constexpr QuantFormat f = static_cast<QuantFormat>(F);
  Codes c;
  c.scale = quantScale(f, groupAmax(x));
#pragma unroll
  for (int w = 0; w < kPerLane / 4; ++w) c.w[w] = 0;
#pragma unroll
  for (int u = 0; u < kPerLane; ++u)
    c.w[u / 4] |= static_cast<uint32_t>(quantEncode(f, x[u], c.scale)) << (8 * (u % 4));
  return c;
}

// Stores a block's codes [0, m) at element offset i of `w` and, from the group's first lane, its
// scale into w.scales[s] (nothing when m = 0).
__device__ __forceinline__ void storeCodes(const Codes& c, int m, const Wire& w, size_t i, size_t s) {
  const int e = laneElem(), nv = m - e;  // the lane's valid elements: u < nv (nv <= 0: none)
  uint8_t* to = w.codes + i + e;
  if (nv >= kPerLane && aligned16(to)) {
    *reinterpret_cast<Pack*>(to) = make_uint4(c.w[0], c.w[1], c.w[2], c.w[3]);
  } else {
#pragma unroll
    for (int u = 0; u < kPerLane; ++u)
      if (u < nv) to[u] = codeAt(c, u);
  }
  if (e == 0 && m > 0) w.scales[s] = c.scale;
}

// Loads the codes and scale of one block per group from a wire a peer wrote: ld.global.cg (past
// L1) for a peer GPU's memory, or with kUncached ld.global.cv (past every cache) for host memory
// another GPU rewrote over PCIe since this GPU may have cached it (staged_host's rule). Nothing
// is loaded past m (m = 0: nothing at all).
template <bool kUncached>
__device__ __forceinline__ Codes loadCodes(const Wire& w, size_t i, size_t s, int m) {
  const int e = laneElem(), nv = m - e;  // the lane's valid elements: u < nv (nv <= 0: none)
  Codes c;
  c.scale = 0.0f;
  if (m > 0) c.scale = kUncached ? __ldcv(w.scales + s) : __ldcg(w.scales + s);
  const uint8_t* from = w.codes + i + e;
  if (nv >= kPerLane && aligned16(from)) {
    const Pack* p = reinterpret_cast<const Pack*>(from);
    const Pack q = kUncached ? __ldcv(p) : __ldcg(p);
    c.w[0] = q.x;
    c.w[1] = q.y;
    c.w[2] = q.z;
    c.w[3] = q.w;
  } else {
#pragma unroll
    for (int v = 0; v < kPerLane / 4; ++v) c.w[v] = 0;
#pragma unroll
    for (int u = 0; u < kPerLane; ++u)
      if (u < nv) c.w[u / 4] |= static_cast<uint32_t>(kUncached ? __ldcv(from + u) : __ldcg(from + u)) << (8 * (u % 4));
  }
  return c;
}

// The values of a lane's codes (0 past m).
template <int F>
__device__ __forceinline__ void decodeCodes(const Codes& c, int m, float (&v)[kPerLane]) {
  constexpr QuantFormat f = static_cast<QuantFormat>(F);
  const int e = laneElem(), nv = m - e;  // the lane's valid elements: u < nv (nv <= 0: none)
#pragma unroll
  for (int u = 0; u < kPerLane; ++u) v[u] = u < nv ? quantDecode(f, codeAt(c, u), c.scale) : 0.0f;
}

// One block per group read back from a wire a peer wrote (loadCodes' rules), 0 past m.
template <int F, bool kUncached>
__device__ __forceinline__ void readBack(const Wire& w, size_t i, size_t s, int m, float (&v)[kPerLane]) {
  decodeCodes<F>(loadCodes<kUncached>(w, i, s, m), m, v);
}

// The lane's elements of the block at x (m valid, 0 past m): 16-byte loads where aligned.
template <typename T>
__device__ __forceinline__ void loadBlock(const T* x, int m, float (&v)[kPerLane]) {
  constexpr int kPer = kPackBytes / sizeof(T);  // elements per 16-byte pack: 8 (bf16, f16) or 4 (f32)
  const int e = laneElem(), nv = m - e;         // the lane's valid elements: u < nv (nv <= 0: none)
  const T* p = x + e;
  if (nv >= kPerLane && aligned16(p)) {
#pragma unroll
    for (int q = 0; q < kPerLane / kPer; ++q) {
      const Pack raw = *reinterpret_cast<const Pack*>(p + q * kPer);
      T t[kPer];
      memcpy(t, &raw, sizeof(raw));
#pragma unroll
      for (int j = 0; j < kPer; ++j) v[q * kPer + j] = Elem<T>::toFloat(t[j]);
    }
  } else {
#pragma unroll
    for (int u = 0; u < kPerLane; ++u) v[u] = u < nv ? Elem<T>::toFloat(p[u]) : 0.0f;
  }
}

// Stores the lane's valid elements (m) of the block at y: 16-byte stores where aligned.
template <typename T>
__device__ __forceinline__ void storeBlock(T* y, int m, const float (&v)[kPerLane]) {
  constexpr int kPer = kPackBytes / sizeof(T);
  const int e = laneElem(), nv = m - e;  // the lane's valid elements: u < nv (nv <= 0: none)
  T* p = y + e;
  if (nv >= kPerLane && aligned16(p)) {
#pragma unroll
    for (int q = 0; q < kPerLane / kPer; ++q) {
      T t[kPer];
#pragma unroll
      for (int j = 0; j < kPer; ++j) t[j] = Elem<T>::fromFloat(v[q * kPer + j]);
      Pack raw;
      memcpy(&raw, t, sizeof(raw));
      *reinterpret_cast<Pack*>(p + q * kPer) = raw;
    }
  } else {
#pragma unroll
    for (int u = 0; u < kPerLane; ++u)
      if (u < nv) p[u] = Elem<T>::fromFloat(v[u]);
  }
}

// The reduce step of the compressed kernels for one block per group: this rank's own codes
// (ownCodes(): the bits it sent its peers, with 0 codes past m) read back, summed with every
// other rank's read-back values in fp32 in rank order 0..n-1 (quantAdd: never an FMA);
// loadPeer(r) returns rank r's Codes (loadCodes). The first peer's codes are requested before
// ownCodes() runs, and each next peer's before the current one is decoded, so a load is in
// flight while the lane computes. Lanes past m get 0, so they take no part in the sum's amax.
// All 32 lanes must call it.
template <int F, typename OwnCodes, typename LoadPeer>
__device__ __forceinline__ void sumCodes(OwnCodes ownCodes, int m, int n, int me, LoadPeer loadPeer,
                                         float (&acc)[kPerLane]) {
  constexpr QuantFormat f = static_cast<QuantFormat>(F);
  auto peerAfter = [me](int r) { return r + 1 == me ? r + 2 : r + 1; };  // the next rank that is not me
  int q = peerAfter(-1);
  Codes pending{};
  if (q < n) pending = loadPeer(q);
  const Codes own = ownCodes();  // this rank's codes, decoded in its turn
  for (int r = 0; r < n; ++r) {
    Codes cur = own;
    if (r != me) {  // r == q
      cur = pending;
      q = peerAfter(r);
      if (q < n) pending = loadPeer(q);
    }
#pragma unroll
    for (int u = 0; u < kPerLane; ++u) {
      // Past m: this rank's codes are of x's zeros, a peer's are 0; all cleared below.
      const float y = quantDecode(f, codeAt(cur, u), cur.scale);
      acc[u] = r == 0 ? y : quantAdd(acc[u], y);
    }
  }
  const int e = laneElem(), nv = m - e;  // the lane's valid elements: u < nv (nv <= 0: none)
#pragma unroll
  for (int u = 0; u < kPerLane; ++u)
    if (u >= nv) acc[u] = 0.0f;
}

// sumCodes with this rank's codes quantized from its own values x (0 past m) here.
template <int F, typename LoadPeer>
__device__ __forceinline__ void sumReadBack(const float (&x)[kPerLane], int m, int n, int me, LoadPeer loadPeer,
                                            float (&acc)[kPerLane]) {
  sumCodes<F>([&] { return quantizeGroup<F>(x); }, m, n, me, loadPeer, acc);
}

// Calls launch(TypeTag<T>, IntTag<format>) for the call's dtype and format (dispatchKernel's op
// slot carries the format: 0 fp8, 1 int8).
template <typename Launch>
auto dispatchCompressed(int dtype, int format, Launch launch) {
  return dispatchKernel(dtype, format, false, [&](auto t, auto fmt, auto) { return launch(t, fmt); });
}

// Calls f(TypeTag<T>{}, IntTag<format>{}) for every dtype and format dispatchCompressed can pick;
// stops at the first error. For preloading (dev::preload).
template <typename F>
cudaError_t forEachCompressedVariant(F f) {
  cudaError_t e = cudaSuccess;
  for (int v = 0; v < 6 && e == cudaSuccess; ++v) e = dispatchCompressed(v / 2, v % 2, f);
  return e;
}

// Loads kernelOf(TypeTag, IntTag<format>) for every dtype and format, as a Status naming `what`.
template <typename KernelOf>
Status preloadCompressed(const char* what, KernelOf kernelOf) {
  return toStatus(forEachCompressedVariant([&](auto t, auto f) { return preload(kernelOf(t, f)); }), what);
}

}  // namespace dev
}  // namespace tpcomm
