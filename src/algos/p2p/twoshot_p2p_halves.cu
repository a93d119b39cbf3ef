// twoshot_p2p_halves.cu: reduce-scatter and all-gather over peer-mapped buffers, the two halves
// of two-shot run as collectives of their own (NCCL's ReduceScatter / AllGather semantics:
// reduce-scatter's input is n pieces of `count` elements, piece j for rank j; all-gather's output
// is n pieces, piece r from rank r). Both by push, through twoshot_p2p's scratch, epochs and
// flags (same grid, TPCOMM_TWOSHOT_BLOCKS), so they interleave freely with its all-reduce. One
// device function (halvesRun) is the body of both kernels.
//
// The per-rank piece is processed in chunks of `per` elements (at most one inbox slot,
// the region's slotBytes; every chunk is split over blocks as a full chunk is, clipped to its
// length), one epoch e per chunk, inbox parity e%2:
//   reduce-scatter: block b pushes part b of piece j of its input into rank j's inbox slot
//     `me`, for every j != me. Barrier (flag value 2e+1). Block b then reduces part b of its own
//     piece from its input and the n-1 inbox slots, rank order 0..n-1 in fp32 (the zero rule
//     applied, as every all-reduce path: docs/determinism.md), into its output.
//   all-gather: block b pushes part b of its input into every peer's inbox slot `me`. Barrier.
//     Block b copies part b of its input into its own piece of the output and part b of every
//     inbox slot r into piece r.
// Writes to peers are plain stores published by the barrier's system-scope release
// (p2p_common.cuh); inbox data is read past L1 (ld.global.cg). A slot is known free by the
// barrier of the chunk after: a peer writes parity e%2 again only in chunk e+2, after passing
// the barrier of chunk e+1, which this rank's block reaches only after it has read chunk e
// (kernels on a rank are stream-ordered, so this holds across calls and across the all-reduce
// kernels sharing the epochs; the barriers order only blocks of equal index, and block b reads
// exactly what its peers' blocks b wrote). One barrier per chunk: the output is written only
// after it, so nothing but scratch is touched before the call signature is checked. A timeout
// poisons the communicator (the user's output is then untouched or partly written, never
// written after the call failed: later kernels see the poison word and do nothing).
// Each rank sends (n-1)/n of the reduce-scatter's input, and (n-1) x its all-gather input.
#include <cuda_runtime.h>

#include "algos/p2p/p2p_common.cuh"
#include "algos/p2p/twoshot_p2p.h"

namespace tpcomm {
namespace {

using dev::Pack;
using dev::PackOf;

// The chunking both kernels share: `per` elements per chunk, whole packs, at most one slot.
template <typename T>
__device__ __forceinline__ size_t halvesChunk(const P2pLaunch& p) {
  constexpr int kEpp = PackOf<T>::kElems;
  const size_t maxChunk = p.region.slotBytes / sizeof(T) / kEpp * kEpp;
  const size_t chunks = (p.count + maxChunk - 1) / maxChunk;
  return ((p.count + chunks - 1) / chunks + kEpp - 1) / kEpp * kEpp;
}

// Block b's part [lo, hi) of a chunk of `len` elements: the split of a full chunk, clipped (a
// shorter last chunk must not hand block b elements another block owned in the full chunk of
// the same parity before it).
template <typename T>
__device__ __forceinline__ void blockPart(size_t per, size_t len, size_t* lo, size_t* hi) {
  dev::splitRange(per, gridDim.x, blockIdx.x, PackOf<T>::kElems, lo, hi);
  *lo = *lo < len ? *lo : len;
  *hi = *hi < len ? *hi : len;
}

template <typename T, bool kVec>
__device__ __forceinline__ void copyPart(T* out, const T* in, size_t lo, size_t hi, bool peerData) {
  if (peerData)
    dev::forRange<T, kVec>(
        lo, hi, [&](size_t i) { return __ldcg(reinterpret_cast<const Pack*>(in + i)); },
        [&](size_t i, const Pack& v) { *reinterpret_cast<Pack*>(out + i) = v; },
        [&](size_t i) { out[i] = dev::loadUncached(in + i); });
  else
    dev::forRange<T, kVec>(
        lo, hi, [&](size_t i) { return *reinterpret_cast<const Pack*>(in + i); },
        [&](size_t i, const Pack& v) { *reinterpret_cast<Pack*>(out + i) = v; }, [&](size_t i) { out[i] = in[i]; });
}

// Both kernels' body: the prologue, the chunk loop (push, barrier, signature check on the first
// chunk) and the epoch store are shared; kReduceScatter picks what is pushed (piece j, or the
// whole input) and what is written after the barrier. A compile-time flag, not a callback: the
// generated code is the same as the two kernels written out (a lambda moved ptxas's register
// choice and added spills). Returns early, the block's epoch not stored, on poison, timeout or a
// signature mismatch.
template <typename T, int Op, bool kVec, bool kReduceScatter>
__device__ __forceinline__ void halvesRun(const P2pLaunch& p) {
  const int me = p.rank, n = p.nRanks;
  dev::P2pOpening o;
  if (!dev::p2pOpen(p, &o)) return;  // poisoned: do nothing
  uint64_t epoch = o.epoch;          // + 1 per chunk; the first chunk's names this call
  const T* src = static_cast<const T*>(p.send);
  T* dst = static_cast<T*>(p.recv);
  const size_t per = halvesChunk<T>(p);
  for (size_t c0 = 0; c0 < p.count; c0 += per) {
    ++epoch;
    const size_t len = p.count - c0 < per ? p.count - c0 : per;
    const size_t bufOff = p.region.bufferAt(epoch & 1);
    auto inbox = [&](int owner, int from) { return dev::slotAt<T>(p, bufOff, owner, from); };
    size_t lo, hi;
    blockPart<T>(per, len, &lo, &hi);
    for (int j = 0; j < n; ++j)
      if (j != me) copyPart<T, kVec>(inbox(j, me), src + (kReduceScatter ? j * p.count : 0) + c0, lo, hi, false);
    if (!dev::peerBarrier(p, 2 * epoch + 1, o.deadline)) return;
    if (!dev::firstChunkSignatureCheck(p, o, epoch)) return;
    if constexpr (kReduceScatter) {  // own piece from the input and the n-1 inbox slots
      const T* own = src + static_cast<size_t>(me) * p.count + c0;
      T* out = dst + c0;
      auto from = [&](int r) { return inbox(me, r); };
      dev::forRange<T, kVec>(
          lo, hi, [&](size_t i) { return dev::reduceRanksPack<T, Op>(n, me, own, from, i); },
          [&](size_t i, const Pack& v) { *reinterpret_cast<Pack*>(out + i) = v; },
          [&](size_t i) { out[i] = dev::reduceRanksElem<T, Op>(n, me, own, from, i); });
    } else {  // output piece r from the input (r == me) or inbox slot r
      for (int r = 0; r < n; ++r) {
        T* out = dst + static_cast<size_t>(r) * p.count + c0;
        if (r == me)
          copyPart<T, kVec>(out, src + c0, lo, hi, false);
        else
          copyPart<T, kVec>(out, inbox(me, r), lo, hi, true);
      }
    }
  }
  __syncthreads();
  dev::p2pFinish(p, o.epochPtr, epoch);
}

struct TwoshotHalves {  // the kernels of launchHalves / preloadHalves (p2p_common.cuh)
  template <typename T, int Op, bool kVec, bool kReduceScatter>
  __device__ __forceinline__ static void run(const P2pLaunch& p) {
    halvesRun<T, Op, kVec, kReduceScatter>(p);
  }
};

// 16-byte vectors need every piece aligned: the bases and the piece length in bytes.
bool halvesVectorizable(const P2pLaunch& p) {
  const size_t pieceBytes = p.count * dataTypeSize(static_cast<DataType>(p.dtype));
  return p2pVectorizable(p.send, p.recv) && pieceBytes % 16 == 0;
}

}  // namespace

Status preloadTwoshotHalvesKernels() {
  return dev::preloadHalves<TwoshotHalves>("twoshot_p2p reduce-scatter / all-gather");
}

Status launchTwoshotHalves(const P2pLaunch& p, cudaStream_t stream) {
  if (p.region.slotBytes < 16)
    return TPCOMM_ERROR(kNotSupported, "twoshot_p2p: inbox slot of %zu bytes", p.region.slotBytes);
  return dev::launchHalves<TwoshotHalves>("twoshot_p2p reduce-scatter launch", "twoshot_p2p all-gather launch", p,
                                          halvesVectorizable(p), stream);
}

}  // namespace tpcomm
