// Pieces shared by the P2P kernels: the per-block flag barrier over peer-mapped memory, the
// per-block epoch counters, and range splitting in whole 16-byte packs.
#pragma once

#include "algos/common/device_common.cuh"
#include "algos/common/launch.cuh"
#include "algos/common/launch_params.h"

namespace tpcomm {
namespace dev {

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

// Offset of epoch e's parity buffer (inbox slots, then the gather area) in a rank's buffer.
__device__ __forceinline__ size_t twoshotBufferOffset(const P2pLayout& l, uint64_t epoch) {
  return l.twoshotOffset + (epoch & 1) * l.twoshotBufferBytes();
}

__device__ __forceinline__ uint64_t* flagAt(char* base, const P2pLayout& l, int algo, int from, int block) {
  return reinterpret_cast<uint64_t*>(base + l.flagsOffset) + l.flagIndex(algo, from, block);
}

__device__ __forceinline__ uint64_t* epochAt(char* base, const P2pLayout& l, int algo, int block) {
  return reinterpret_cast<uint64_t*>(base + l.epochsOffset) + static_cast<size_t>(algo) * l.maxBlocks + block;
}

// The poison word (P2pLayout::poisonOffset in every rank's buffer). A kernel whose bounded wait
// for a peer expires writes AsyncError::encode(kTimeout, missing peer) into its own poison word
// and every peer's (plain stores, made visible by a system fence), and into its error word. Every
// P2P kernel reads its own poison word after griddepcontrol.wait and before its first push
// (p2pBegin): once a wait expired, the per-block epochs of the ranks are out of step for good,
// so a poisoned communicator does nothing (its outputs are left untouched) and reports kTimeout,
// graph replays included. Waits read it too, so a peer's expiry ends them early.
__device__ __forceinline__ uint32_t* poisonAt(char* base, const P2pLayout& l) {
  return reinterpret_cast<uint32_t*>(base + l.poisonOffset);
}

__device__ __forceinline__ void p2pPoison(const P2pLaunch& p, int missing, Status why = Status::kTimeout) {
  const uint32_t code = static_cast<uint32_t>(why) | (static_cast<uint32_t>(missing + 1) << 16);
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

// Opening of every P2P kernel, after pdlWait(): false (for the whole block) when the
// communicator is poisoned (the poison is then copied into this rank's error word, so its host
// reports it); else the deadline of this call's waits, counted from now: the time spent waiting
// for the previous kernel (PDL) is not a wait for a peer.
__device__ __forceinline__ bool p2pBegin(const P2pLaunch& p, uint64_t* deadline) {
  __shared__ uint32_t poison;
  if (threadIdx.x == 0) {
    poison = loadVolatile(poisonAt(p.peers[p.rank], p.layout));
    if (poison != 0) atomicCAS_system(p.errorWord, 0u, poison);
  }
  __syncthreads();
  *deadline = globalTimerNs() + p.timeoutNs;
  return poison == 0;
}

// Spins until *flag >= target; false once the communicator is poisoned or, past the deadline,
// after poisoning it (naming `peer`). One thread per flag.
__device__ __forceinline__ bool p2pWaitFlag(const P2pLaunch& p, const uint64_t* flag, uint64_t target,
                                            uint64_t deadlineNs, int peer) {
  for (uint32_t spin = 0; loadAcquireSys(flag) < target; ++spin) {
    if ((spin & 1023u) == 1023u) {
      if (poisonedNow(p)) return false;
      if (globalTimerNs() > deadlineNs) {
        p2pPoison(p, peer);
        return false;
      }
    }
  }
  return true;
}

// Call signatures (TPCOMM_CHECK_CALLS=1, on in the GPU tests): ranks that make different calls
// (count, dtype, op, fused or not) would pair wrong data on the same epochs. Thread 0 of every
// block publishes (epoch, signature) into each peer's slot [algo][me][block][e % 3] (plain
// stores, made visible by the block's next release: peerBarrier's, or a system fence); each
// block then waits (bounded) for every peer's word of the same epoch and compares. A peer is at
// most one call ahead (it cannot finish a call without this rank), so three slots never mix two
// calls. A mismatch poisons the communicator with kInvalidArgument naming the peer, and the
// block leaves before touching data.
__device__ __forceinline__ uint64_t* signatureAt(char* base, const P2pLayout& l, int algo, int from, int block,
                                                 uint64_t e) {
  return reinterpret_cast<uint64_t*>(base + l.signaturesOffset) + l.signatureIndex(algo, from, block, e % 3);
}

__device__ __forceinline__ uint64_t signatureWord(const P2pLaunch& p, uint64_t e) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(e)) << 32) | p.signature;
}

__device__ __forceinline__ void signaturePublish(const P2pLaunch& p, int algo, uint64_t e) {
  if (!p.signature || threadIdx.x != 0) return;
  for (int r = 0; r < p.nRanks; ++r)
    if (r != p.rank)
      *reinterpret_cast<volatile uint64_t*>(signatureAt(p.peers[r], p.layout, algo, p.rank, blockIdx.x, e)) =
          signatureWord(p, e);
  __threadfence_system();
}

// Whole block: false (reported) on a mismatch, a timeout or poison.
__device__ __forceinline__ bool signatureCheck(const P2pLaunch& p, int algo, uint64_t e, uint64_t deadlineNs) {
  if (!p.signature) return true;
  __shared__ int bad;
  if (threadIdx.x == 0) bad = 0;
  __syncthreads();
  const int r = threadIdx.x;
  if (r < p.nRanks && r != p.rank) {
    const uint64_t* slot = signatureAt(p.peers[p.rank], p.layout, algo, r, blockIdx.x, e);
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

// Block-level barrier with every peer's block of the same index: make this block's earlier
// writes (pushes into peers) visible, release `value` into each peer's flag[algo][me][block],
// then acquire flag[algo][r][block] >= value for every peer r. Returns false (for the whole
// block) on timeout or poison. One thread per peer signals and waits, so the round trips overlap.
__device__ __forceinline__ bool peerBarrier(const P2pLaunch& p, int algo, uint64_t value, uint64_t deadline) {
  __shared__ int failed;
  if (threadIdx.x == 0) failed = 0;
  blockReleaseFence();
  const int r = threadIdx.x;
  if (r < p.nRanks && r != p.rank) storeReleaseSys(flagAt(p.peers[r], p.layout, algo, p.rank, blockIdx.x), value);
  if (r < p.nRanks && r != p.rank) {
    if (!p2pWaitFlag(p, flagAt(p.peers[p.rank], p.layout, algo, r, blockIdx.x), value, deadline, r)) failed = 1;
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

// One call's view of the Lamport triple buffer (the protocol is in lamport_p2p_kernel.cu),
// shared by lamport_p2p and fused_lamport_p2p, which interleave on the same epochs and buffers.
// Call e writes buffer e%3 and clears (e+2)%3; `used` records the bytes each buffer last
// carried (three words after the epoch table, reserved by P2pLayout). Construct after pdlWait():
// the epoch and the used words may come from the previous kernel.
struct LamportRound {
  const P2pLayout& L;
  uint64_t* epochPtr;
  uint64_t* used;
  uint64_t epoch;
  int buf, clearBuf;

  __device__ __forceinline__ explicit LamportRound(const P2pLaunch& p)
      : L(p.layout),
        epochPtr(epochAt(p.peers[p.rank], L, kP2pLamport, blockIdx.x)),
        used(epochAt(p.peers[p.rank], L, kP2pLamport, 0) + L.maxBlocks * kP2pAlgoCount),
        epoch(*epochPtr + 1),
        buf(static_cast<int>(epoch % 3)),
        clearBuf(static_cast<int>((epoch + 2) % 3)) {}

  // Rank `from`'s slot of buffer b in the scratch at base.
  __device__ __forceinline__ Pack* slot(char* base, int b, int from) const {
    return reinterpret_cast<Pack*>(base + L.lamportOffset + b * L.lamportBufferBytes() +
                                   static_cast<size_t>(from) * L.lamportBytes);
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

  // Last: the block's epoch advances and block 0 records the bytes buf carried this call.
  __device__ __forceinline__ void finish(uint64_t usedBytes) const {
    __syncthreads();
    if (threadIdx.x == 0) {
      *epochPtr = epoch;
      if (blockIdx.x == 0) used[buf] = usedBytes;
    }
  }
};

// The reduce-scatter / all-gather launch and preload that twoshot_p2p and ll_p2p share (by
// p.kind): rsKernel(TypeTag, IntTag<Op>, IntTag<flag>) and agKernel(TypeTag, IntTag<flag>) name
// the kernel for a type, op and the algorithm's one compile-time flag (its alignment variant).
template <typename RsKernelOf, typename AgKernelOf>
cudaError_t launchHalves(const P2pLaunch& p, bool flag, int threads, cudaStream_t stream, RsKernelOf rsKernel,
                         AgKernelOf agKernel) {
  if (p.kind == static_cast<int>(CollKind::kReduceScatter))
    return dispatchKernel(p.dtype, p.op, flag, [&](auto t, auto op, auto v) {
      return launch(rsKernel(t, op, v), p.blocks, threads, p.pdl != 0, stream, p);
    });
  return dispatchType(p.dtype, flag,
                      [&](auto t, auto v) { return launch(agKernel(t, v), p.blocks, threads, p.pdl != 0, stream, p); });
}

template <typename RsKernelOf, typename AgKernelOf>
cudaError_t preloadHalves(RsKernelOf rsKernel, AgKernelOf agKernel) {
  cudaError_t e = forEachKernelVariant([&](auto t, auto op, auto v) { return preload(rsKernel(t, op, v)); });
  if (e == cudaSuccess) e = forEachTypeVariant([&](auto t, auto v) { return preload(agKernel(t, v)); });
  return e;
}

}  // namespace dev
}  // namespace tpcomm
