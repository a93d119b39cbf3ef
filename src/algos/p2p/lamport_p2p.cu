// lamport_p2p.cu: low-latency one-shot all-reduce with the flag in the data (Lamport-style
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
//
// The fused twin (all-reduce + residual add + RMSNorm):
// low-latency one-shot all-reduce (Lamport sentinels, no barrier)
// + residual add + RMSNorm in one kernel (TensorRT-LLM's low-latency fused all-reduce + norm).
// It is the plain kernel above with whole rows per block (splitRange over rows), so the block that
// reduces a row also normalises it:
//   1. Push: block b stores its rows of `in` (-0.0 sent as +0.0) into every peer's buffer e%3,
//      slot = own rank, at the rows' pack offsets: the bytes and places the plain kernel uses.
//   2. Poll, reduce, normalise: per row, each thread polls its units in every peer slot
//      (ld.global.cv until no word is the sentinel), reduces in rank order in fp32 (allReduce's
//      bits), then the residual add and the norm (fused_rmsnorm_common.cuh).
//   3. Clear: the plain kernel's step 3 unchanged: block b refills its splitRange share of buffer
//      (e+2)%3, sized by the bytes recorded for it, and block 0 records this call's bytes.
// It shares the Lamport epoch counters, buffers and used-bytes words with lamport_p2p (same grid,
// TPCOMM_P2P_BLOCKS, every block +1 per call), so plain and fused calls interleave freely; the
// three-buffer argument of the plain kernel holds as is because it rests on kernel
// completion, not on which block touched which bytes. Needs 16-byte aligned buffers and rows of
// whole 16-byte units (the launcher declines otherwise and the caller falls back).
// A timed-out poll reports kTimeout and stops waiting (the block still runs to its end, so no
// thread is left at a barrier); the communicator is unusable afterwards anyway.
#include <cuda_runtime.h>

#include "algos/fused/fused_rmsnorm_common.cuh"
#include "algos/p2p/lamport_p2p.h"
#include "algos/p2p/p2p_common.cuh"

namespace tpcomm {
namespace {

using dev::Pack;
using dev::PackOf;

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
  const int me = p.rank, n = p.nRanks;
  char* local = p.peers[me];
  dev::pdlLaunchDependents();
  dev::pdlWait();  // inputs, the epoch and the used-bytes words may come from the previous kernel
  uint64_t deadline;
  if (!dev::p2pBegin(p, &deadline)) return;  // poisoned: do nothing (p2p_common.cuh)
  const dev::LamportRound round(p);
  dev::signaturePublish(p, round.epoch);
  const int buf = round.buf;
  const size_t packs = (p.count + kEpp - 1) / kEpp;  // the last one may be partial

  // 1. push
  size_t lo, hi;
  dev::splitRange(packs, gridDim.x, blockIdx.x, 1, &lo, &hi);
  for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    Pack v = dev::lamportScrub<T>(loadUserPack<T, kVec>(p.send, i, p.count));
    for (int r = 0; r < n; ++r)
      if (r != me) dev::storeVolatilePack(round.slot(p.peers[r], buf, me) + i, v);
  }
  if (!dev::signatureCheck(p, round.epoch, deadline)) return;
  // 2. poll and reduce. The rank's own contribution is scrubbed like the copies its peers got,
  // so every rank reduces the same values (a -0.0 of its own would otherwise meet its peers'
  // +0.0 copies of theirs, and max/min could pick a zero's sign by rank).
  bool ok = true;
  for (size_t i = lo + threadIdx.x; ok && i < hi; i += blockDim.x) {
    Pack in[kMaxP2pRanks];
    for (int r = 0; ok && r < n; ++r) {
      if (r == me) {
        in[r] = dev::lamportScrub<T>(loadUserPack<T, kVec>(p.send, i, p.count));
        continue;
      }
      const Pack* q = round.slot(local, buf, r) + i;
      Pack v = __ldcv(q);
      ok = dev::lamportWait(p, q, v, deadline, r);
      in[r] = v;
    }
    if (!ok) break;
    float acc[kEpp];
    PackOf<T>::toFloatsForReduce(in[0], acc);
    for (int r = 1; r < n; ++r) PackOf<T>::template accumulate<Op>(acc, in[r]);
    storeUserPack<T, kVec>(p.recv, i, p.count, PackOf<T>::fromFloats(acc));
  }
  // A thread whose wait failed leaves with the whole block: none may stop short of a barrier
  // the others reach (finish synchronises the block).
  if (__syncthreads_or(!ok)) return;
  // 3. clear the buffer read in the previous call
  round.clearPrevious(local, n, me);
  round.finish(p, packs * sizeof(Pack));  // padded: peers wrote whole packs
}

__global__ void fillSentinel(uint32_t* p, size_t words) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < words; i += gridDim.x * blockDim.x)
    p[i] = kLamportSentinel;
}

template <typename T>
__global__ void __launch_bounds__(kThreads) fusedLamportKernel(FusedP2pLaunch f) {
  constexpr int kEpp = PackOf<T>::kElems;
  const P2pLaunch& p = f.p2p;
  const int me = p.rank, n = p.nRanks;
  char* local = p.peers[me];
  dev::pdlLaunchDependents();
  dev::pdlWait();  // inputs, residual, the epoch and the used-bytes words may come from the previous kernel
  uint64_t deadline;
  if (!dev::p2pBegin(p, &deadline)) return;  // poisoned: do nothing (p2p_common.cuh)
  const dev::LamportRound round(p);
  dev::signaturePublish(p, round.epoch);
  const int buf = round.buf;
  const Pack* src = static_cast<const Pack*>(p.send);
  T* dst = static_cast<T*>(p.recv);
  T* residual = static_cast<T*>(f.residual);
  const T* weight = static_cast<const T*>(f.weight);
  const size_t packsPerRow = f.hidden / kEpp;
  size_t rowLo, rowHi;
  dev::splitRange(f.rows, gridDim.x, blockIdx.x, 1, &rowLo, &rowHi);

  // 1. push
  for (size_t i = rowLo * packsPerRow + threadIdx.x; i < rowHi * packsPerRow; i += blockDim.x) {
    Pack v = dev::lamportScrub<T>(src[i]);
    for (int r = 0; r < n; ++r)
      if (r != me) dev::storeVolatilePack(round.slot(p.peers[r], buf, me) + i, v);
  }
  if (!dev::signatureCheck(p, round.epoch, deadline)) return;
  // 2. poll, reduce, normalise
  bool failed = false;
  for (size_t row = rowLo; row < rowHi; ++row) {
    const size_t firstPack = row * packsPerRow;
    dev::residualRmsNormRow<T, true>(
        f.hidden, residual + row * f.hidden, weight, dst + row * f.hidden, f.eps,
        [&](size_t u, int, float(&x)[kEpp]) {
          const size_t i = firstPack + u;
          float acc[kEpp];
          for (int r = 0; r < n; ++r) {
            Pack v;
            if (r == me) {
              v = dev::lamportScrub<T>(src[i]);  // as its peers received it (the plain kernel's rule)
            } else {
              const Pack* q = round.slot(local, buf, r) + i;
              v = __ldcv(q);
              if (!failed && !dev::lamportWait(p, q, v, deadline, r)) failed = true;
            }
            if (r == 0)
              PackOf<T>::toFloatsForReduce(v, acc);
            else
              PackOf<T>::template accumulate<0>(acc, v);
          }
#pragma unroll
          for (int k = 0; k < kEpp; ++k) x[k] = dev::Elem<T>::toFloat(dev::Elem<T>::fromFloat(acc[k]));
        },
        dev::NoEmit<T>{}, dev::NoEmit<T>{});
  }
  // 3. clear the buffer read in the previous call (as the plain kernel)
  round.clearPrevious(local, n, me);
  round.finish(p, f.rows * f.hidden * sizeof(T));
}

constexpr auto kPlainKernel = [](auto t, auto op, auto v) {
  return lamportKernel<typename decltype(t)::type, decltype(op)::value, decltype(v)::value != 0>;
};
constexpr auto kFusedKernel = [](auto t, auto) { return fusedLamportKernel<typename decltype(t)::type>; };

Status preload() {
  TPCOMM_TRY(dev::toStatus(dev::preload(fillSentinel), "lamport_p2p"));
  return dev::preloadP2pAndFused("lamport_p2p", kPlainKernel, kFusedKernel);
}

Status launchFused(const FusedP2pLaunch& f, cudaStream_t stream) {
  const size_t bytes = f.rows * f.hidden * dataTypeSize(static_cast<DataType>(f.p2p.dtype));
  if (bytes > f.p2p.region.slotBytes)
    return TPCOMM_ERROR(kNotSupported, "fused lamport_p2p: %zu bytes exceed the %zu-byte buffer", bytes,
                        f.p2p.region.slotBytes);
  if (!fusedVectorizable(f))
    return TPCOMM_ERROR(kNotSupported,
                        "fused lamport_p2p: needs 16-byte aligned buffers and rows of whole 16-byte units");
  return dev::launchFused("fused lamport_p2p launch", f, true, stream, kFusedKernel);
}

}  // namespace

const P2pKernels kLamportKernels = {
    preload,
    [](const P2pLaunch& p, cudaStream_t s) { return dev::launchP2p("lamport_p2p launch", p, s, kPlainKernel); },
    launchFused};

Status fillLamportBuffers(char* base, const P2pRegion& region) {
  TPCOMM_TRY(dev::launch("lamport sentinel fill", fillSentinel, LaunchShape{256}, nullptr,
                         reinterpret_cast<uint32_t*>(base + region.offset), region.buffers * region.bufferBytes / 4));
  TPCOMM_CUDA_TRY(cudaDeviceSynchronize());  // filled before any peer can write (setUp's contract)
  return Status::kOk;
}

}  // namespace tpcomm
