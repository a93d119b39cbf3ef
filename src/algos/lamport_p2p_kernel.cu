// lamport_p2p_kernel.cu: low-latency one-shot all-reduce with the flag in the data (Lamport-style
// sentinels; TensorRT-LLM's low-latency one-shot). No barrier and no flag: every 32-bit word of
// a receive buffer holds the sentinel 0x80000000 until a peer's store lands there, so a reader
// knows a word has arrived when it stops being the sentinel. Payload words can never equal it:
// -0.0 (f32) and -0.0 halves (f16/bf16) are sent as +0.0, which leaves every value but the sign
// of a zero unchanged.
//   1. Push: block b stores part b of its input into every peer's buffer e%3, slot = own rank.
//   2. Poll and reduce: block b spins on its own buffer e%3 until part b of every slot has
//      arrived (ld.global.cv; the stores arrive in any order), then reduces in rank order in
//      fp32 and writes the output.
//   3. Clear: block b refills its share of buffer (e+2)%3 with sentinels, after the output is
//      written (off the latency path).
// Why three buffers, and why the clear needs no fence: buffer (e+2)%3 was read in call e-1 and
// is written next by peers in call e+2, which they start only after receiving this rank's call
// e+1 pushes; those come from the next kernel, which starts pushing only after this kernel has
// completed (stream order, or griddepcontrol.wait under PDL), and kernel completion makes the
// clear visible. The clear covers the bytes used in call e-1 (recorded per buffer), so messages
// may change size between calls.
// Any element count: the wire unit is the whole 16-byte pack, ceil(count / elements per pack) of
// them. The last pack may be partial; its missing elements are sent as zero bits (+0.0), so every
// word of every pushed pack is written (a word left unwritten would stay at the sentinel) and
// goes through the scrub like any payload word. No word can then be the sentinel: 0x80000000
// needs a high half 0x8000 (a 16-bit -0.0, scrubbed) over a zero low half, and a lone 16-bit
// element sits in the low half (elements fill a pack from the front) under a zero high half.
// Only the valid elements are written out, and the used bytes (what the clear covers) count the
// padded packs.
#include <cuda_runtime.h>

#include "algos/p2p_common.cuh"
#include "common/error.h"

namespace tpcomm {
namespace {

using dev::Pack;
using dev::PackOf;
constexpr int kThreads = 512;

// Pack i of a user buffer of `count` elements: one 16-byte access when the buffer is 16-byte
// aligned, else element by element. Alignment must never make ranks choose different algorithms,
// so Lamport accepts any element-aligned buffer rather than declining on one rank only. A partial
// last pack is always read element by element (past `count` the buffer may end, and it is only
// element-aligned there); its missing elements read as zero bits.
template <typename T, bool kVec>
__device__ __forceinline__ Pack loadUserPack(const void* base, size_t i, size_t count) {
  constexpr int kEpp = PackOf<T>::kElems;
  const size_t valid = count - i * kEpp;
  const T* s = static_cast<const T*>(base) + i * kEpp;
  if (valid >= kEpp) {
    if (kVec) return static_cast<const Pack*>(base)[i];
    Pack v;
    T* e = reinterpret_cast<T*>(&v);
#pragma unroll
    for (int k = 0; k < kEpp; ++k) e[k] = s[k];
    return v;
  }
  Pack v = make_uint4(0, 0, 0, 0);  // +0.0, never the sentinel (opening comment)
  T* e = reinterpret_cast<T*>(&v);
#pragma unroll
  for (int k = 0; k < kEpp; ++k)  // unrolled with constant indices: v stays in registers
    if (k < static_cast<int>(valid)) e[k] = s[k];
  return v;
}
// Stores the first min(kEpp, count - i * kEpp) elements of pack i; the padding is dropped.
template <typename T, bool kVec>
__device__ __forceinline__ void storeUserPack(void* base, size_t i, size_t count, const Pack& v) {
  constexpr int kEpp = PackOf<T>::kElems;
  const size_t valid = count - i * kEpp;
  const T* e = reinterpret_cast<const T*>(&v);
  T* d = static_cast<T*>(base) + i * kEpp;
  if (valid < kEpp) {
#pragma unroll
    for (int k = 0; k < kEpp; ++k)
      if (k < static_cast<int>(valid)) d[k] = e[k];
  } else if (kVec) {
    static_cast<Pack*>(base)[i] = v;
  } else {
#pragma unroll
    for (int k = 0; k < kEpp; ++k) d[k] = e[k];
  }
}

template <typename T, int Op, bool kVec>
__global__ void __launch_bounds__(kThreads) lamportKernel(P2pLaunch p) {
  constexpr int kEpp = PackOf<T>::kElems;
  const uint64_t deadline = dev::globalTimerNs() + p.timeoutNs;
  const int me = p.rank, n = p.nRanks;
  char* local = p.peers[me];
  dev::pdlLaunchDependents();
  dev::pdlWait();  // inputs, the epoch and the used-bytes words may come from the previous kernel
  const dev::LamportRound round(p);
  const int buf = round.buf;
  const size_t packs = (p.count + kEpp - 1) / kEpp;  // the last one may be partial

  // 1. push
  size_t lo, hi;
  dev::splitRange(packs, gridDim.x, blockIdx.x, 1, &lo, &hi);
  for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    Pack v = dev::lamportScrub<T>(loadUserPack<T, kVec>(p.send, i, p.count));
    for (int r = 0; r < n; ++r)
      if (r != me) round.slot(p.peers[r], buf, me)[i] = v;
  }
  // 2. poll and reduce
  for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    Pack in[kMaxP2pRanks];
    for (int r = 0; r < n; ++r) {
      if (r == me) {
        in[r] = loadUserPack<T, kVec>(p.send, i, p.count);
        continue;
      }
      const Pack* q = round.slot(local, buf, r) + i;
      Pack v = __ldcv(q);
      if (!dev::lamportWait(q, v, deadline, p.errorWord, r)) return;
      in[r] = v;
    }
    float acc[kEpp];
    PackOf<T>::toFloats(in[0], acc);
    for (int r = 1; r < n; ++r) PackOf<T>::template accumulate<Op>(acc, in[r]);
    storeUserPack<T, kVec>(p.recv, i, p.count, PackOf<T>::fromFloats(acc));
  }
  // 3. clear the buffer read in the previous call
  round.clearPrevious(local, n, me);
  round.finish(packs * sizeof(Pack));  // padded: peers wrote whole packs
}

__global__ void fillSentinel(uint32_t* p, size_t words) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < words; i += gridDim.x * blockDim.x)
    p[i] = kLamportSentinel;
}

}  // namespace

Status preloadLamportKernels() {
  cudaError_t e = dev::forEachP2pVariant([](auto t, auto op, auto vec) {
    return dev::preload(lamportKernel<typename decltype(t)::type, decltype(op)::value, decltype(vec)::value != 0>);
  });
  if (e == cudaSuccess) e = dev::preload(fillSentinel);
  return dev::preloaded(e, "lamport_p2p");
}

Status launchLamport(const P2pLaunch& p, cudaStream_t stream) {
  cudaError_t e = dev::dispatchKernel(p, p2pVectorizable(p.send, p.recv), [&](auto t, auto op, auto vec) {
    return dev::launchP2p(lamportKernel<typename decltype(t)::type, decltype(op)::value, decltype(vec)::value != 0>, p,
                          kThreads, stream);
  });
  if (e != cudaSuccess) return TPCOMM_ERROR(kCudaError, "lamport_p2p launch: %s", cudaGetErrorString(e));
  return Status::kOk;
}

Status launchLamportFill(char* p, size_t bytes, cudaStream_t stream) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(256);
  cfg.blockDim = dim3(256);
  cfg.stream = stream;
  cudaError_t e = cudaLaunchKernelEx(&cfg, fillSentinel, reinterpret_cast<uint32_t*>(p), bytes / 4);
  if (e != cudaSuccess) return TPCOMM_ERROR(kCudaError, "lamport sentinel fill: %s", cudaGetErrorString(e));
  return Status::kOk;
}

}  // namespace tpcomm
