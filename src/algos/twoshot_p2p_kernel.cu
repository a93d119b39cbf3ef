// twoshot_p2p_kernel.cu: all-reduce as reduce-scatter then all-gather over peer-mapped buffers,
// both phases by push (NCCL's RSxST_AGxST shape; TensorRT-LLM's two-shot / MultiShot without
// multicast). The message is processed in chunks of twoshotChunk bytes; each chunk is cut into n
// slices (slice j is owned by rank j) and each slice into one part per block.
//   Phase 1 (reduce-scatter): block b pushes part b of slice j of its input into rank j's inbox
//     (slot = own rank), for every j != me. Barrier (flag value 2e).
//   Reduce: block b reduces part b of its own slice from its input and the n-1 inbox slots, rank
//     order 0..n-1 in fp32, writes it to its output and pushes it into every peer's gather area.
//     Barrier (flag value 2e+1).
//   Phase 2 (all-gather): block b copies part b of every other slice from its gather area to its
//     output.
// e is the block's epoch, one per chunk, kept in device memory so CUDA-graph replays continue
// the sequence. Inbox and gather area are double-buffered by e's parity: a peer writes parity
// e%2 again only after passing the first barrier of chunk e+1, which needs this rank's block to
// have finished chunk e-1 (same parity) entirely. Each rank sends and receives 2(n-1)/n of the
// message, all as posted stores.
#include <cuda_runtime.h>

#include "algos/p2p_common.cuh"
#include "common/error.h"

namespace tpcomm {
namespace {

using dev::Pack;
using dev::PackOf;
constexpr int kThreads = 512;

template <typename T, int Op, bool kVec>
__global__ void __launch_bounds__(kThreads) twoshotKernel(P2pLaunch p) {
  constexpr int kEpp = PackOf<T>::kElems;
  const uint64_t deadline = dev::globalTimerNs() + p.timeoutNs;
  const int me = p.rank, n = p.nRanks, b = blockIdx.x, nb = gridDim.x;
  const P2pLayout& L = p.layout;
  dev::pdlLaunchDependents();
  dev::pdlWait();  // inputs and the epoch may come from the previous kernel
  uint64_t* epochPtr = dev::epochAt(p.peers[me], L, kP2pTwoshot, b);
  uint64_t epoch = *epochPtr;
  const T* src = static_cast<const T*>(p.send);
  T* dst = static_cast<T*>(p.recv);
  // Equal chunks of `per` elements (whole packs, at most the scratch's chunk), the last one
  // possibly shorter.
  const size_t maxChunk = L.twoshotChunk / sizeof(T);
  const size_t chunks = (p.count + maxChunk - 1) / maxChunk;
  const size_t per = ((p.count + chunks - 1) / chunks + kEpp - 1) / kEpp * kEpp;

  for (size_t c0 = 0; c0 < p.count; c0 += per) {
    ++epoch;
    const size_t len = p.count - c0 < per ? p.count - c0 : per;
    const size_t bufOff = L.twoshotOffset + (epoch & 1) * L.twoshotBufferBytes();
    auto inbox = [&](int owner, int from) {
      return reinterpret_cast<T*>(p.peers[owner] + bufOff + static_cast<size_t>(from) * L.twoshotSliceCap);
    };
    auto gather = [&](int owner) {
      return reinterpret_cast<T*>(p.peers[owner] + bufOff + static_cast<size_t>(n) * L.twoshotSliceCap);
    };
    // Part b of slice j, chunk-relative: [s + lo, s + hi).
    // Every chunk uses the split of a full chunk, clipped to its length: a shorter last chunk
    // must not hand block b bytes that another block owns in the full chunk of the same parity
    // before it (the barriers order only blocks of equal index).
    auto part = [&](int j, size_t* s, size_t* lo, size_t* hi) {
      size_t e;
      dev::splitRange(per, n, j, kEpp, s, &e);
      dev::splitRange(e - *s, nb, b, kEpp, lo, hi);
      const size_t room = len > *s ? len - *s : 0;  // elements of slice j present in this chunk
      *lo = *lo < room ? *lo : room;
      *hi = *hi < room ? *hi : room;
    };

    for (int j = 0; j < n; ++j) {
      if (j == me) continue;
      size_t s, lo, hi;
      part(j, &s, &lo, &hi);
      T* out = inbox(j, me);
      const T* in = src + c0 + s;
      dev::forRange<T, kVec>(
          lo, hi, [&](size_t i) { return *reinterpret_cast<const Pack*>(in + i); },
          [&](size_t i, const Pack& v) { *reinterpret_cast<Pack*>(out + i) = v; }, [&](size_t i) { out[i] = in[i]; });
    }
    if (!dev::peerBarrier(p, kP2pTwoshot, 2 * epoch, deadline)) return;

    {
      size_t s, lo, hi;
      part(me, &s, &lo, &hi);
      const T* own = src + c0 + s;
      T* out = dst + c0 + s;
      auto from = [&](int r) { return inbox(me, r); };
      dev::forRange<T, kVec>(
          lo, hi, [&](size_t i) { return dev::reduceRanksPack<T, Op>(n, me, own, from, i); },
          [&](size_t i, const Pack& v) {
            *reinterpret_cast<Pack*>(out + i) = v;
            for (int r = 0; r < n; ++r)
              if (r != me) *reinterpret_cast<Pack*>(gather(r) + s + i) = v;
          },
          [&](size_t i) {
            T v = dev::reduceRanksElem<T, Op>(n, me, own, from, i);
            out[i] = v;
            for (int r = 0; r < n; ++r)
              if (r != me) gather(r)[s + i] = v;
          });
    }
    if (!dev::peerBarrier(p, kP2pTwoshot, 2 * epoch + 1, deadline)) return;

    for (int j = 0; j < n; ++j) {
      if (j == me) continue;
      size_t s, lo, hi;
      part(j, &s, &lo, &hi);
      const T* in = gather(me) + s;
      T* out = dst + c0 + s;
      dev::forRange<T, kVec>(
          lo, hi, [&](size_t i) { return __ldcg(reinterpret_cast<const Pack*>(in + i)); },
          [&](size_t i, const Pack& v) { *reinterpret_cast<Pack*>(out + i) = v; },
          [&](size_t i) { out[i] = dev::loadUncached(in + i); });
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) *epochPtr = epoch;
}

}  // namespace

Status preloadTwoshotKernels() {
  cudaError_t e = dev::forEachP2pVariant([](auto t, auto op, auto vec) {
    return dev::preload(twoshotKernel<typename decltype(t)::type, decltype(op)::value, decltype(vec)::value != 0>);
  });
  return dev::preloaded(e, "twoshot_p2p");
}

Status launchTwoshot(const P2pLaunch& p, cudaStream_t stream) {
  cudaError_t e = dev::dispatchKernel(p, p2pVectorizable(p.send, p.recv), [&](auto t, auto op, auto vec) {
    return dev::launchP2p(twoshotKernel<typename decltype(t)::type, decltype(op)::value, decltype(vec)::value != 0>, p,
                          kThreads, stream);
  });
  if (e != cudaSuccess) return TPCOMM_ERROR(kCudaError, "twoshot_p2p launch: %s", cudaGetErrorString(e));
  return Status::kOk;
}

}  // namespace tpcomm
