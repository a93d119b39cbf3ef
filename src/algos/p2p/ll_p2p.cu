// ll_p2p.cu: low-latency reduce-scatter and all-gather with the flag in every store (NCCL's LL
// in shape), for small messages: no barrier, no clear. Lamport's sentinel cannot carry an
// all-gather (it sends -0.0 as +0.0, and a gather must move any bits), so each 16-byte line
// holds two 4-byte payload words, each beside a 4-byte copy of the call's flag:
// {data0, flag, data1, flag}. A line is one st.volatile.v4 store; each 8-byte (data, flag) half
// lands whole (the property NCCL's LL rests on), so a reader that sees the flag in both halves
// has both words of this call.
//
// Who writes what where, call e (per-block epoch counters, every block +1 per call, so all
// blocks' epochs are equal; flag f(e) = 1 + e mod (2^32 - 1), never 0, the scratch's initial
// value), buffer e%2 of every receiving rank, slot = sending rank, line i = payload bytes
// [8i, 8i+8) of the piece sent (the last line zero-padded):
//   all-gather: rank r pushes its input (the piece) into slot r of every peer, copies it into
//     its own piece of the output, then polls slot j of its own buffer for every j != r (line
//     by line, ld.volatile until both flags equal f(e)) and writes piece j of the output.
//   reduce-scatter: rank r pushes piece j of its input into slot r of rank j, for every j != r
//     ((n-1)/n of the input, doubled by the flags); then, for each line of its own piece, polls
//     slot j for every j != r and reduces in rank order 0..n-1 in fp32 with its own piece (the
//     zero rule, as every path: docs/determinism.md), and writes the output.
// Lines are spread over the whole grid (line i to thread i of the grid, grid-stride), so a
// thread polls exactly the lines it writes out.
// Why two buffers suffice and nothing is cleared: a line of buffer e%2 last written in call e'
// (same parity, e' < e) carries f(e') != f(e) unless e - e' is a multiple of 2 (2^32 - 1); lines
// past a shrunken message's end can keep an old flag that long, so once per 2^32 - 1 calls of
// each parity (e mod (2^32 - 1) < 2) the sender writes its whole slot with the current flag
// (NCCL's LL does the same before its flag wraps): every line's flag is then younger than one
// period, and no stale line can match. A sender writes buffer
// e%2 of a receiver again only in call e+2; it gets there only after finishing call e+1, which
// needs the receiver's call e+1 pushes (in both collectives every rank receives from every
// other), and the receiver makes those only after its call e kernel has completed (stream
// order, or griddepcontrol.wait under PDL) - after it has read buffer e%2. So a line is never
// overwritten while its reader still needs it. Reduce-scatter and all-gather share the epochs
// and buffers and may interleave in any order for the same reason.
// Call signatures (TPCOMM_CHECK_CALLS): published before the pushes and checked before any output
// is written, as two-shot does; off by default, so the latency path has no round trip.
// A wait past TPCOMM_TIMEOUT_MS poisons the communicator naming the missing rank (p2p_common.cuh):
// the output is then partly written or untouched, the block's epoch not advanced, and every
// later kernel of the communicator does nothing.
#include <cuda_runtime.h>

#include "algos/p2p/ll_p2p.h"
#include "algos/p2p/p2p_common.cuh"

namespace tpcomm {
namespace {

using dev::Elem;

__device__ __forceinline__ uint32_t llFlag(uint64_t epoch) { return 1u + static_cast<uint32_t>(epoch % 0xffffffffull); }

__device__ __forceinline__ void llStore(uint4* dst, uint64_t payload, uint32_t flag) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(dst), "r"(static_cast<uint32_t>(payload)),
               "r"(flag), "r"(static_cast<uint32_t>(payload >> 32)), "r"(flag)
               : "memory");
}

__device__ __forceinline__ uint4 llLoad(const uint4* src) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(src)
               : "memory");
  return v;
}

// Spins on line q until both halves carry `flag`; the payload in *out. false once the
// communicator is poisoned or, past the deadline, after poisoning it (naming `peer`).
__device__ __forceinline__ bool llWait(const P2pLaunch& p, const uint4* q, uint32_t flag, uint64_t deadlineNs, int peer,
                                       uint64_t* out) {
  uint4 v = llLoad(q);
  for (uint32_t spin = 0; v.y != flag || v.w != flag; ++spin) {
    if ((spin & 1023u) == 1023u) {
      if (dev::poisonedNow(p)) return false;
      if (dev::globalTimerNs() > deadlineNs) {
        dev::p2pPoison(p, peer);
        return false;
      }
    }
    v = llLoad(q);
  }
  *out = static_cast<uint64_t>(v.x) | (static_cast<uint64_t>(v.z) << 32);
  return true;
}

// Payload bytes [8i, 8i+8) of a piece of `bytes` bytes at `src` (zero past its end). kAligned:
// the piece starts 8-byte aligned and holds whole lines, so one 8-byte load; else element by
// element (elements never straddle a line: 8 is a multiple of every element size).
template <typename T, bool kAligned>
__device__ __forceinline__ uint64_t loadLine(const char* src, size_t bytes, size_t i) {
  if constexpr (kAligned) return *reinterpret_cast<const uint64_t*>(src + 8 * i);
  uint64_t v = 0;
  T* e = reinterpret_cast<T*>(&v);
  const size_t first = 8 * i / sizeof(T), n = bytes / sizeof(T);
#pragma unroll
  for (int k = 0; k < static_cast<int>(8 / sizeof(T)); ++k)
    if (first + k < n) e[k] = reinterpret_cast<const T*>(src)[first + k];
  return v;
}

template <typename T, bool kAligned>
__device__ __forceinline__ void storeLine(char* dst, size_t bytes, size_t i, uint64_t v) {
  if constexpr (kAligned) {
    *reinterpret_cast<uint64_t*>(dst + 8 * i) = v;
    return;
  }
  const T* e = reinterpret_cast<const T*>(&v);
  const size_t first = 8 * i / sizeof(T), n = bytes / sizeof(T);
#pragma unroll
  for (int k = 0; k < static_cast<int>(8 / sizeof(T)); ++k)
    if (first + k < n) reinterpret_cast<T*>(dst)[first + k] = e[k];
}

// One kernel body for both collectives (kReduceScatter picks what is pushed and what is written).
template <typename T, int Op, bool kAligned, bool kReduceScatter>
__device__ __forceinline__ void llRun(const P2pLaunch& p) {
  const int me = p.rank, n = p.nRanks;
  dev::P2pOpening o;
  if (!dev::p2pOpen(p, &o)) return;  // poisoned: do nothing
  const uint64_t deadline = o.deadline;
  const uint64_t epoch = o.epoch + 1;
  const uint32_t flag = llFlag(epoch);
  const size_t pieceBytes = p.count * sizeof(T);
  const size_t lines = (pieceBytes + 7) / 8;
  const size_t bufOff = p.region.bufferAt(epoch & 1);
  auto slot = [&](int owner, int from) { return dev::slotAt<uint4>(p, bufOff, owner, from); };
  const char* src = static_cast<const char*>(p.send);
  char* dst = static_cast<char*>(p.recv);
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;

  // Push: every peer's line i from this rank (piece j of the input for rank j, or the input);
  // the whole slot, zero past the piece, once per flag period (above).
  const size_t pushLines = epoch % 0xffffffffull < 2 ? p.region.slotBytes / 16 : lines;
  for (size_t i = first; i < pushLines; i += stride)
    for (int k = 1; k < n; ++k) {
      const int j = (me + k) % n;  // peers in a rotated order, so ranks do not all hit rank 0 first
      const char* piece = src + (kReduceScatter ? static_cast<size_t>(j) * pieceBytes : 0);
      llStore(slot(j, me) + i, i < lines ? loadLine<T, kAligned>(piece, pieceBytes, i) : 0, flag);
    }
  if (!dev::signatureCheck(p, epoch, deadline)) return;

  bool ok = true;
  if constexpr (kReduceScatter) {
    constexpr int kEpl = 8 / sizeof(T);
    const char* own = src + static_cast<size_t>(me) * pieceBytes;
    for (size_t i = first; ok && i < lines; i += stride) {
      float acc[kEpl];
      for (int r = 0; r < n && ok; ++r) {  // rank order, each rank's word as it arrives
        uint64_t word = 0;
        if (r == me)
          word = loadLine<T, kAligned>(own, pieceBytes, i);
        else
          ok = llWait(p, slot(me, r) + i, flag, deadline, r, &word);
        const T* w = reinterpret_cast<const T*>(&word);
#pragma unroll
        for (int k = 0; k < kEpl; ++k) {
          const float v = __fadd_rn(Elem<T>::toFloat(w[k]), 0.0f);  // the zero rule: -0.0 reads as +0.0
          acc[k] = r == 0 ? v : dev::combine<Op>(acc[k], v);
        }
      }
      if (!ok) break;
      uint64_t out = 0;
      T* o = reinterpret_cast<T*>(&out);
#pragma unroll
      for (int k = 0; k < kEpl; ++k) o[k] = Elem<T>::fromFloat(acc[k]);
      storeLine<T, kAligned>(dst, pieceBytes, i, out);
    }
  } else {
    for (size_t i = first; i < lines; i += stride)
      storeLine<T, kAligned>(dst + static_cast<size_t>(me) * pieceBytes, pieceBytes, i,
                             loadLine<T, kAligned>(src, pieceBytes, i));
    for (int k = 1; k < n && ok; ++k) {
      const int r = (me + k) % n;
      for (size_t i = first; ok && i < lines; i += stride) {
        uint64_t v;
        ok = llWait(p, slot(me, r) + i, flag, deadline, r, &v);
        if (ok) storeLine<T, kAligned>(dst + static_cast<size_t>(r) * pieceBytes, pieceBytes, i, v);
      }
    }
  }
  // The epoch advances only when every thread of the block got all its lines (a timed-out block
  // leaves it, as the other P2P kernels do; the communicator is poisoned anyway).
  if (__syncthreads_and(ok)) dev::p2pFinish(p, o.epochPtr, epoch);
}

struct LlHalves {  // the kernels of launchHalves / preloadHalves (p2p_common.cuh)
  template <typename T, int Op, bool kAligned, bool kReduceScatter>
  __device__ __forceinline__ static void run(const P2pLaunch& p) {
    llRun<T, Op, kAligned, kReduceScatter>(p);
  }
};

// 8-byte lines straight from and to memory: both bases 8-byte aligned and every piece whole lines.
bool llAligned(const P2pLaunch& p) {
  const size_t pieceBytes = p.count * dataTypeSize(static_cast<DataType>(p.dtype));
  return reinterpret_cast<uintptr_t>(p.send) % 8 == 0 && reinterpret_cast<uintptr_t>(p.recv) % 8 == 0 &&
         pieceBytes % 8 == 0;
}

Status launch(const P2pLaunch& p, cudaStream_t stream) {
  if (p.kind == static_cast<int>(CollKind::kAllReduce))
    return TPCOMM_ERROR(kNotSupported, "ll_p2p: reduce-scatter and all-gather only");
  const size_t pieceBytes = p.count * dataTypeSize(static_cast<DataType>(p.dtype));
  if (p.region.slotBytes / 16 * 8 < pieceBytes)
    return TPCOMM_ERROR(kNotSupported, "ll_p2p: a %zu-byte piece exceeds its %zu-byte slot (TPCOMM_LL_MAX_BYTES)",
                        pieceBytes, p.region.slotBytes / 2);
  return dev::launchHalves<LlHalves>("ll_p2p reduce-scatter launch", "ll_p2p all-gather launch", p, llAligned(p),
                                     stream);
}

}  // namespace

const P2pKernels kLlKernels = {[] { return dev::preloadHalves<LlHalves>("ll_p2p reduce-scatter / all-gather"); },
                               launch, nullptr};

}  // namespace tpcomm
