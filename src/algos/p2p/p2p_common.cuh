// Pieces shared by the P2P kernels: the per-block flag barrier over peer-mapped memory, the
// per-block epoch counters and call signatures (all in the launching algorithm's channel of the
// cuda_p2p buffer: P2pLaunch::region), range splitting in whole 16-byte packs, and the preload
// and launch of the plain, fused and reduce-scatter / all-gather kernels.
#pragma once

#include "algos/common/device_common.cuh"
#include "algos/common/launch.cuh"
#include "algos/p2p/p2p_launch.h"
#include "common/async_error.h"

namespace tpcomm {
namespace dev {

// The P2P part of a kernel's parameters (a fused kernel's are the plain ones plus the norm's).
__device__ __forceinline__ const P2pLaunch& p2pOf(const P2pLaunch& p) { return p; }
__device__ __forceinline__ const P2pLaunch& p2pOf(const FusedP2pLaunch& f) { return f.p2p; }

// [begin, end) of part `p` of `count` elements cut into `parts`, starts on whole packs of `epp`.
__device__ __forceinline__ void splitRange(size_t count, int parts, int p, int epp, size_t* begin, size_t* end) {
  size_t units = (count + epp - 1) / epp, per = units / parts, extra = units % parts;
  size_t ub = p * per + (static_cast<size_t>(p) < extra ? p : extra);
  size_t ue = ub + per + (static_cast<size_t>(p) < extra ? 1 : 0);
  *begin = ub * epp < count ? ub * epp : count;
  *end = ue * epp < count ? ue * epp : count;
}

// Two-shot chunking (twoshot_p2p.cu, twoshot_p2p_compressed.cu): elements per chunk for a
// message of `count` cut into equal chunks of at most maxChunk (a multiple of unit), whole
// `unit`s each; the last chunk may be shorter.
__device__ __forceinline__ size_t twoshotChunkElems(size_t count, size_t maxChunk, size_t unit) {
  const size_t chunks = (count + maxChunk - 1) / maxChunk;
  return ((count + chunks - 1) / chunks + unit - 1) / unit * unit;
}

// Two-shot's part b of slice j (of n) of a chunk of `len` elements, chunk-relative [s + lo, s + hi),
// whole `unit`s. Every chunk uses the split of a full chunk of `per` elements, clipped to its
// length: a shorter last chunk must not hand block b bytes that another block owns in the full
// chunk of the same parity before it (the barriers order only blocks of equal index).
__device__ __forceinline__ void twoshotPart(size_t per, size_t len, int n, int j, size_t unit, size_t* s, size_t* lo,
                                            size_t* hi) {
  size_t e;
  splitRange(per, n, j, static_cast<int>(unit), s, &e);
  splitRange(e - *s, gridDim.x, blockIdx.x, static_cast<int>(unit), lo, hi);
  const size_t room = len > *s ? len - *s : 0;  // elements of slice j present in this chunk
  *lo = *lo < room ? *lo : room;
  *hi = *hi < room ? *hi : room;
}

// The launching algorithm's flag from rank `from`, block `block`, in the buffer at base.
__device__ __forceinline__ uint64_t* flagAt(const P2pLaunch& p, char* base, int from, int block) {
  return reinterpret_cast<uint64_t*>(base + p.layout.flagsOffset) + p.layout.flagIndex(p.region.channel, from, block);
}

// Slot `from` (a sending rank; n: the shared bytes after the slots) of the launching algorithm's
// buffer at `buffer` (P2pRegion::bufferAt) in rank owner's memory.
template <typename T>
__device__ __forceinline__ T* slotAt(const P2pLaunch& p, size_t buffer, int owner, int from) {
  return reinterpret_cast<T*>(p.peers[owner] + buffer + static_cast<size_t>(from) * p.region.slotBytes);
}

// This rank's epoch counter of the launching algorithm's block `block`.
__device__ __forceinline__ uint64_t* epochAt(const P2pLaunch& p, int block) {
  return reinterpret_cast<uint64_t*>(p.peers[p.rank] + p.layout.epochsOffset) +
         p.layout.epochIndex(p.region.channel, block);
}

// The poison word (P2pLayout::poisonOffset in every rank's buffer). A kernel whose bounded wait
// for a peer expires writes the timeout's code (common/async_error.h: kTimeout, the missing peer,
// and why it was late, from the peer's host call counter and arrival word) into its own poison
// word and every peer's (plain stores, made visible by a system fence), and into its error word. Every
// P2P kernel reads its own poison word after griddepcontrol.wait and before its first push
// (p2pBegin): once a wait expired, the per-block epochs of the ranks are out of step for good,
// so a poisoned communicator does nothing (its outputs are left untouched) and reports kTimeout,
// graph replays included. Waits read it too, so a peer's expiry ends them early.
__device__ __forceinline__ uint32_t* poisonAt(char* base, const P2pLayout& l) {
  return reinterpret_cast<uint32_t*>(base + l.poisonOffset);
}

// The arrival word (P2pLayout::arrivalOffset) of the rank whose buffer is at base: block 0 of
// every P2P kernel writes arrivalStarted(call) once past its PDL wait (p2pBegin) and
// arrivalDone(call) at its end (p2pFinish), plain stores into its own buffer. A waiter reads a
// peer's only when its bound expired: started with this call's number means the peer's kernel was
// running; anything else (an earlier call, or this call done by a previous replay of a CUDA graph)
// that it had not started.
__device__ __forceinline__ uint64_t* arrivalAt(char* base, const P2pLayout& l) {
  return reinterpret_cast<uint64_t*>(base + l.arrivalOffset);
}

__device__ __forceinline__ void p2pPoison(const P2pLaunch& p, int missing, Status why = Status::kTimeout) {
  uint32_t code = asyncErrorCode(why, missing);
  if (why == Status::kTimeout && missing >= 0 && p.callNumber != 0)
    code = timeoutCode(missing, p.callNumber,
                       *reinterpret_cast<const volatile uint64_t*>(p.hostCalls + missing * kCallCounterWords),
                       *reinterpret_cast<const volatile uint64_t*>(arrivalAt(p.peers[missing], p.layout)), true);
  for (int r = 0; r < p.nRanks; ++r) *reinterpret_cast<volatile uint32_t*>(poisonAt(p.peers[r], p.layout)) = code;
  __threadfence_system();
  atomicCAS_system(p.errorWord, 0u, code);
}

// A wait that ends because a peer poisoned the communicator: this rank's host learns why too.
__device__ __forceinline__ bool poisonedNow(const P2pLaunch& p) {
  const uint32_t v = loadVolatile(poisonAt(p.peers[p.rank], p.layout));
  if (v != 0) atomicCAS_system(p.errorWord, 0u, v);
  return v != 0;
}

// Opening of every P2P kernel, after pdlWait(): block 0 records the kernel's start in this rank's
// arrival word; false (for the whole block) when the communicator is poisoned (the poison is then
// copied into this rank's error word, so its host reports it); else the deadline of this call's
// waits, counted from now: the time spent waiting for the previous kernel (PDL) is not a wait for
// a peer.
__device__ __forceinline__ bool p2pBegin(const P2pLaunch& p, uint64_t* deadline) {
  __shared__ uint32_t poison;
  if (threadIdx.x == 0 && blockIdx.x == 0 && p.callNumber != 0)
    *arrivalAt(p.peers[p.rank], p.layout) = arrivalStarted(p.callNumber);
  if (threadIdx.x == 0) {
    poison = loadVolatile(poisonAt(p.peers[p.rank], p.layout));
    if (poison != 0) atomicCAS_system(p.errorWord, 0u, poison);
  }
  __syncthreads();
  *deadline = globalTimerNs() + p.timeoutNs;
  return poison == 0;
}

// The opening of an epoch-counted P2P kernel: the PDL handshake (inputs and the epoch may come
// from the previous kernel), p2pBegin's poison check and deadline, this block's epoch counter, and
// the call signature published under the call's first epoch, *epoch + 1. false: poisoned, do
// nothing.
struct P2pOpening {
  uint64_t deadline;
  uint64_t* epochPtr;
  uint64_t epoch;  // the block's epoch before this call
};
__device__ __forceinline__ bool p2pOpen(const P2pLaunch& p, P2pOpening* o);

// Spins until *flag >= target; false once the communicator is poisoned or, past the deadline,
// after poisoning it (naming `peer`). One thread per flag.
__device__ __forceinline__ bool p2pWaitFlag(const P2pLaunch& p, const uint64_t* flag, uint64_t target,
                                            uint64_t deadlineNs, int peer) {
  return spinFlagAtLeast(
      flag, target, deadlineNs, [&] { return poisonedNow(p); }, [&] { p2pPoison(p, peer); });
}

// Call signatures (TPCOMM_CHECK_CALLS=1, on in the GPU tests): ranks that make different calls
// (count, dtype, op, fused or not) would pair wrong data on the same epochs. Thread 0 of every
// block publishes (epoch, signature) into each peer's slot [algo][me][block][e % 3] (plain
// stores, made visible by the block's next release: peerBarrier's, or a system fence); each
// block then waits (bounded) for every peer's word of the same epoch and compares. A peer is at
// most one call ahead (it cannot finish a call without this rank), so three slots never mix two
// calls. A mismatch poisons the communicator with kInvalidArgument naming the peer, and the
// block leaves before touching data. The slots are the launching algorithm's (its channel).
__device__ __forceinline__ uint64_t* signatureAt(const P2pLaunch& p, char* base, int from, int block, uint64_t e) {
  return reinterpret_cast<uint64_t*>(base + p.layout.signaturesOffset) +
         p.layout.signatureIndex(p.region.channel, from, block, e % 3);
}

__device__ __forceinline__ uint64_t signatureWord(const P2pLaunch& p, uint64_t e) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(e)) << 32) | p.signature;
}

__device__ __forceinline__ void signaturePublish(const P2pLaunch& p, uint64_t e) {
  if (!p.signature || threadIdx.x != 0) return;
  for (int r = 0; r < p.nRanks; ++r)
    if (r != p.rank)
      *reinterpret_cast<volatile uint64_t*>(signatureAt(p, p.peers[r], p.rank, blockIdx.x, e)) = signatureWord(p, e);
  __threadfence_system();
}

__device__ __forceinline__ bool p2pOpen(const P2pLaunch& p, P2pOpening* o) {
  pdlLaunchDependents();
  pdlWait();
  if (!p2pBegin(p, &o->deadline)) return false;
  o->epochPtr = epochAt(p, blockIdx.x);
  o->epoch = *o->epochPtr;
  signaturePublish(p, o->epoch + 1);
  return true;
}

// Closing of every P2P kernel that completed its call, by the whole block: the block's epoch
// advances and block 0 marks this rank's arrival word done.
__device__ __forceinline__ void p2pFinish(const P2pLaunch& p, uint64_t* epochPtr, uint64_t epoch) {
  if (threadIdx.x != 0) return;
  *epochPtr = epoch;
  if (blockIdx.x == 0 && p.callNumber != 0) *arrivalAt(p.peers[p.rank], p.layout) = arrivalDone(p.callNumber);
}

// Whole block: false (reported) on a mismatch, a timeout or poison.
__device__ __forceinline__ bool signatureCheck(const P2pLaunch& p, uint64_t e, uint64_t deadlineNs) {
  if (!p.signature) return true;
  __shared__ int bad;
  if (threadIdx.x == 0) bad = 0;
  __syncthreads();
  const int r = threadIdx.x;
  if (r < p.nRanks && r != p.rank) {
    const uint64_t* slot = signatureAt(p, p.peers[p.rank], r, blockIdx.x, e);
    const uint64_t want = signatureWord(p, e);
    uint64_t got = loadAcquireSys(slot);
    for (uint32_t spin = 0; (got >> 32) != (want >> 32); ++spin) {
      if ((spin & 1023u) == 1023u) {
        if (poisonedNow(p)) {
          bad = 1;
          break;
        }
        if (globalTimerNs() > deadlineNs) {
          p2pPoison(p, r);
          bad = 1;
          break;
        }
      }
      got = loadAcquireSys(slot);
    }
    if (!bad && got != want) {
      p2pPoison(p, r, Status::kInvalidArgument);
      bad = 1;
    }
  }
  __syncthreads();
  return bad == 0;
}

// A chunked kernel (one epoch per chunk) checks the call's signature once, after its first
// chunk's barrier: true for every other chunk.
__device__ __forceinline__ bool firstChunkSignatureCheck(const P2pLaunch& p, const P2pOpening& o, uint64_t epoch) {
  return epoch != o.epoch + 1 || signatureCheck(p, o.epoch + 1, o.deadline);
}

// Block-level barrier with every peer's block of the same index: make this block's earlier
// writes (pushes into peers) visible, release `value` into each peer's flag[channel][me][block],
// then acquire flag[channel][r][block] >= value for every peer r (the launching algorithm's
// channel). Returns false (for the whole block) on timeout or poison. One thread per peer signals
// and waits, so the round trips overlap.
__device__ __forceinline__ bool peerBarrier(const P2pLaunch& p, uint64_t value, uint64_t deadline) {
  __shared__ int failed;
  if (threadIdx.x == 0) failed = 0;
  blockReleaseFence();
  const int r = threadIdx.x;
  if (r < p.nRanks && r != p.rank) storeReleaseSys(flagAt(p, p.peers[r], p.rank, blockIdx.x), value);
  if (r < p.nRanks && r != p.rank) {
    if (!p2pWaitFlag(p, flagAt(p, p.peers[p.rank], r, blockIdx.x), value, deadline, r)) failed = 1;
  }
  __syncthreads();
  return failed == 0;
}

}  // namespace dev
}  // namespace tpcomm

namespace tpcomm {
namespace dev {

// For each whole 16-byte pack i of [lo, hi) (when kVec): store(i, load(i)); elemFn(i) for the
// rest, spread over the block's threads; lo must start a pack. Each thread first issues the
// loads of kUnroll packs, then their stores, so several accesses are in flight per thread: that
// is what hides NVLink and HBM latency at large sizes.
constexpr int kUnroll = 4;
template <typename T, bool kVec, typename LoadFn, typename StoreFn, typename ElemFn>
__device__ __forceinline__ void forRange(size_t lo, size_t hi, LoadFn load, StoreFn store, ElemFn elemFn) {
  constexpr int kEpp = PackOf<T>::kElems;
  const size_t vend = kVec ? lo + (hi - lo) / kEpp * kEpp : lo;
  const size_t stride = static_cast<size_t>(blockDim.x) * kEpp;
  size_t i = lo + threadIdx.x * kEpp;
  for (; i + (kUnroll - 1) * stride < vend; i += kUnroll * stride) {
    Pack v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = load(i + u * stride);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) store(i + u * stride, v[u]);
  }
  for (; i < vend; i += stride) store(i, load(i));
  for (size_t j = vend + threadIdx.x; j < hi; j += blockDim.x) elemFn(j);
}

// Element i reduced over ranks 0..n-1 in rank order with fp32 accumulation: rank `me` from its
// own input `own`, every other rank r from the copy r pushed into this rank's scratch, `from(r)`
// (read past L1: peers rewrite it between calls). Pack and scalar forms.
template <typename T, int Op, typename FromFn>
__device__ __forceinline__ Pack reduceRanksPack(int n, int me, const T* own, FromFn from, size_t i) {
  auto at = [&](int r) {
    return r == me ? *reinterpret_cast<const Pack*>(own + i) : __ldcg(reinterpret_cast<const Pack*>(from(r) + i));
  };
  float acc[PackOf<T>::kElems];
  PackOf<T>::toFloatsForReduce(at(0), acc);
  for (int r = 1; r < n; ++r) PackOf<T>::template accumulate<Op>(acc, at(r));
  return PackOf<T>::fromFloats(acc);
}
template <typename T, int Op, typename FromFn>
__device__ __forceinline__ T reduceRanksElem(int n, int me, const T* own, FromFn from, size_t i) {
  auto at = [&](int r) { return __fadd_rn(Elem<T>::toFloat(r == me ? own[i] : loadUncached(from(r) + i)), 0.0f); };
  float acc = at(0);
  for (int r = 1; r < n; ++r) acc = combine<Op>(acc, at(r));
  return Elem<T>::fromFloat(acc);
}

// Lamport wire format (lamport_p2p.cu): a pack has arrived when none of its 32-bit words
// is the sentinel; lamportScrub sends -0.0 as +0.0 so no payload word can equal it.
template <typename T>
__device__ __forceinline__ Pack lamportScrub(Pack v) {
  uint32_t* w = reinterpret_cast<uint32_t*>(&v);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    if (sizeof(T) == 4) {
      if (w[k] == kLamportSentinel) w[k] = 0;
    } else {
      if ((w[k] & 0xffffu) == 0x8000u) w[k] &= 0xffff0000u;
      if ((w[k] >> 16) == 0x8000u) w[k] &= 0x0000ffffu;
    }
  }
  return v;
}
__device__ __forceinline__ bool lamportArrived(const Pack& v) {
  return v.x != kLamportSentinel && v.y != kLamportSentinel && v.z != kLamportSentinel && v.w != kLamportSentinel;
}

// Spins on a peer's pack at q (v holds a first ld.global.cv of it) until it has arrived; false
// once the communicator is poisoned or, past the deadline, after poisoning it (naming `peer`).
__device__ __forceinline__ bool lamportWait(const P2pLaunch& p, const Pack* q, Pack& v, uint64_t deadlineNs, int peer) {
  for (uint32_t spin = 0; !lamportArrived(v); ++spin) {
    if ((spin & 1023u) == 1023u) {
      if (poisonedNow(p)) return false;
      if (globalTimerNs() > deadlineNs) {
        p2pPoison(p, peer);
        return false;
      }
    }
    v = __ldcv(q);
  }
  return true;
}

// Lamport's pushes and clears: 16-byte stores marked volatile (relaxed, system scope), so the
// argument that a clear lands before the next call's writes (lamport_p2p.cu) holds in the PTX
// memory model, not only in practice. Same instruction count as a weak vector store.
__device__ __forceinline__ void storeVolatilePack(Pack* dst, const Pack& v) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(dst), "r"(v.x), "r"(v.y), "r"(v.z),
               "r"(v.w)
               : "memory");
}

// One call's view of the Lamport triple buffer (the protocol is in lamport_p2p.cu), shared by
// lamport_p2p and fused_lamport_p2p, which interleave on the same epochs and buffers. Call e
// writes buffer e%3 and clears (e+2)%3; `used` records the bytes each buffer last carried (the
// region's three local words: lamportScratch). Construct after pdlWait(): the epoch and the used
// words may come from the previous kernel.
struct LamportRound {
  const P2pRegion& R;
  uint64_t* epochPtr;
  uint64_t* used;
  uint64_t epoch;
  int buf, clearBuf;

  __device__ __forceinline__ explicit LamportRound(const P2pLaunch& p)
      : R(p.region),
        epochPtr(epochAt(p, blockIdx.x)),
        used(reinterpret_cast<uint64_t*>(p.peers[p.rank] + R.wordsOffset)),
        epoch(*epochPtr + 1),
        buf(static_cast<int>(epoch % 3)),
        clearBuf(static_cast<int>((epoch + 2) % 3)) {}

  // Rank `from`'s slot of buffer b in the scratch at base.
  __device__ __forceinline__ Pack* slot(char* base, int b, int from) const {
    return reinterpret_cast<Pack*>(base + R.bufferAt(b) + static_cast<size_t>(from) * R.slotBytes);
  }

  // Step 3: this block's share of every peer slot of clearBuf, (e+2)%3 = the buffer the
  // previous call read, back to the sentinel, over the bytes it carried (messages may change
  // size between calls). The third buffer, (e+1)%3, was cleared by the previous call.
  __device__ __forceinline__ void clearPrevious(char* local, int n, int me) const {
    size_t lo, hi;
    splitRange(used[clearBuf] / sizeof(Pack), gridDim.x, blockIdx.x, 1, &lo, &hi);
    const Pack s = make_uint4(kLamportSentinel, kLamportSentinel, kLamportSentinel, kLamportSentinel);
    for (int r = 0; r < n; ++r) {
      if (r == me) continue;
      Pack* q = slot(local, clearBuf, r);
      for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) storeVolatilePack(q + i, s);
    }
  }

  // Last: the block's epoch advances (p2pFinish) and block 0 records the bytes buf carried this call.
  __device__ __forceinline__ void finish(const P2pLaunch& p, uint64_t usedBytes) const {
    __syncthreads();
    if (threadIdx.x == 0 && blockIdx.x == 0) used[buf] = usedBytes;
    p2pFinish(p, epochPtr, epoch);
  }
};

// The grid of a P2P kernel: p.blocks blocks of kThreads, PDL as the communicator says.
inline LaunchShape p2pShape(const P2pLaunch& p) {
  return LaunchShape{static_cast<unsigned>(p.blocks), static_cast<unsigned>(kThreads), p.pdl != 0};
}

// Preload and launch of the plain kernels: kernelOf(TypeTag, IntTag<Op>, IntTag<Vec>) names the
// instantiation for a dtype, op and alignment (16-byte vectors when both buffers allow).
template <typename KernelOf>
Status preloadP2p(const char* what, KernelOf kernelOf) {
  return toStatus(forEachKernelVariant([&](auto t, auto op, auto v) { return preload(kernelOf(t, op, v)); }), what);
}
template <typename KernelOf>
Status launchP2p(const char* what, const P2pLaunch& p, cudaStream_t stream, KernelOf kernelOf) {
  return dispatchKernel(p.dtype, p.op, p2pVectorizable(p.send, p.recv), [&](auto t, auto op, auto v) {
    return launch(what, kernelOf(t, op, v), p2pShape(p), stream, p);
  });
}

// Preload and launch of the fused kernels (all-reduce sum + residual + norm, the plain kernel's
// grid): kernelOf(TypeTag, IntTag<Vec>) names the instantiation.
template <typename KernelOf>
Status preloadFused(const char* what, KernelOf kernelOf) {
  return toStatus(forEachTypeVariant([&](auto t, auto v) { return preload(kernelOf(t, v)); }), what);
}
template <typename KernelOf>
Status launchFused(const char* what, const FusedP2pLaunch& f, bool vec, cudaStream_t stream, KernelOf kernelOf) {
  return dispatchType(f.p2p.dtype, vec,
                      [&](auto t, auto v) { return launch(what, kernelOf(t, v), p2pShape(f.p2p), stream, f); });
}

// Both of an algorithm's plain and fused kernels (Algorithm::preload).
template <typename PlainOf, typename FusedOf>
Status preloadP2pAndFused(const char* what, PlainOf plainOf, FusedOf fusedOf) {
  TPCOMM_TRY(preloadP2p(what, plainOf));
  return preloadFused(what, fusedOf);
}

// The reduce-scatter and all-gather kernels of twoshot_p2p and ll_p2p, one body each:
// Halves::run<T, Op, kFlag, kReduceScatter>(p), kFlag the algorithm's one compile-time variant
// (its alignment). A compile-time flag, not a callback: the generated code is that of the two
// kernels written out (twoshot_p2p_halves.cu).
template <typename Halves, typename T, int Op, bool kFlag>
__global__ void __launch_bounds__(kThreads) halvesReduceScatterKernel(P2pLaunch p) {
  Halves::template run<T, Op, kFlag, true>(p);
}
template <typename Halves, typename T, bool kFlag>
__global__ void __launch_bounds__(kThreads) halvesAllGatherKernel(P2pLaunch p) {
  Halves::template run<T, 0, kFlag, false>(p);
}

// Launches the one of p.kind (reduce-scatter or all-gather); rsWhat / agWhat name it in errors.
template <typename Halves>
Status launchHalves(const char* rsWhat, const char* agWhat, const P2pLaunch& p, bool flag, cudaStream_t stream) {
  if (p.kind == static_cast<int>(CollKind::kReduceScatter))
    return dispatchKernel(p.dtype, p.op, flag, [&](auto t, auto op, auto v) {
      return launch(
          rsWhat,
          halvesReduceScatterKernel<Halves, typename decltype(t)::type, decltype(op)::value, decltype(v)::value != 0>,
          p2pShape(p), stream, p);
    });
  return dispatchType(p.dtype, flag, [&](auto t, auto v) {
    return launch(agWhat, halvesAllGatherKernel<Halves, typename decltype(t)::type, decltype(v)::value != 0>,
                  p2pShape(p), stream, p);
  });
}

template <typename Halves>
Status preloadHalves(const char* what) {
  cudaError_t e = forEachKernelVariant([](auto t, auto op, auto v) {
    return preload(
        halvesReduceScatterKernel<Halves, typename decltype(t)::type, decltype(op)::value, decltype(v)::value != 0>);
  });
  if (e == cudaSuccess)
    e = forEachTypeVariant([](auto t, auto v) {
      return preload(halvesAllGatherKernel<Halves, typename decltype(t)::type, decltype(v)::value != 0>);
    });
  return toStatus(e, what);
}

}  // namespace dev
}  // namespace tpcomm
