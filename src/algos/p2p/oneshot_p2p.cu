// oneshot_p2p.cu: one-shot all-reduce over peer-mapped buffers (NCCL's all-to-all
// one-shot; TensorRT-LLM's one-shot; vLLM's custom all-reduce for small sizes). Phase 1: block b
// pushes part b of its input into every peer's inbox (slot = own rank), posted NVLink/PCIe
// stores. Barrier: each block releases an epoch into its peers' flags and acquires theirs
// (p2p_common.cuh). Phase 2: block b reduces part b from its own input and the n-1 inboxes, in
// rank order 0..n-1, in fp32, and writes the output. The inbox is double-buffered by epoch
// parity: a peer overwrites buffer e%2 only after this rank's barrier of call e+1, which this
// rank passes only after it finished reading call e-1's (same parity) data.
//
// The fused twin (all-reduce + residual add + RMSNorm): the same kernel template with
// FusedP2pLaunch parameters (NCCL's all-to-all one-shot with the norm as its epilogue;
// TensorRT-LLM's fused all-reduce + norm), whole rows per block: block b takes rows [lo, hi) of
// splitRange(rows, blocks, b), so it holds every element of a row it normalises.
//   Phase 1: block b pushes its rows of `in` into every peer's inbox (slot = own rank) at the
//     rows' element offsets: exactly the bytes and places the plain kernel uses.
//   Barrier: peerBarrier on the one-shot flags with the block's one-shot epoch, which this
//     kernel shares with oneshot_p2p (same grid, TPCOMM_P2P_BLOCKS, every block +1 per call,
//     blocks without rows included), so plain and fused calls interleave freely.
//   Phase 2: per row, x = sum of the n copies in rank order in fp32 (allReduce's bits), then the
//     residual add and the norm (fused_rmsnorm_common.cuh); out and residual are written here
//     only, on every rank alike, so every rank computes the same bits.
// Memory ordering is the plain kernel's: the inbox is double-buffered by epoch parity and a peer
// rewrites parity e%2 only after this rank's barrier of call e+1, which this rank passes only
// after the kernel of call e-1 has completed (stream order or griddepcontrol.wait). The parity is
// the same for every block of a call, so which block touches which bytes may differ from the
// plain kernel's split. `out` may equal `in` (each block reads and writes its own rows only).
#include <cuda_runtime.h>

#include <type_traits>

#include "algos/fused/fused_rmsnorm_common.cuh"
#include "algos/p2p/oneshot_p2p.h"
#include "algos/p2p/p2p_common.cuh"

namespace tpcomm {
namespace {

using dev::Pack;
using dev::PackOf;

// Launch is P2pLaunch (the all-reduce) or FusedP2pLaunch (+ residual + norm: Op is 0, the sum).
template <typename T, int Op, bool kVec, typename Launch>
__global__ void __launch_bounds__(kThreads) oneshotKernel(Launch l) {
  constexpr int kEpp = PackOf<T>::kElems;
  constexpr bool kFused = std::is_same<Launch, FusedP2pLaunch>::value;
  const P2pLaunch& p = dev::p2pOf(l);
  const int me = p.rank, n = p.nRanks;
  dev::pdlLaunchDependents();
  dev::pdlWait();  // inputs and the epoch may come from the previous kernel
  uint64_t deadline;
  if (!dev::p2pBegin(p, &deadline)) return;  // poisoned: do nothing (p2p_common.cuh)
  uint64_t* epochPtr = dev::epochAt(p, blockIdx.x);
  const uint64_t epoch = *epochPtr + 1;
  dev::signaturePublish(p, epoch);
  const size_t bufOff = p.region.bufferAt(epoch & 1);
  auto inbox = [&](int owner, int from) { return dev::slotAt<T>(p, bufOff, owner, from); };
  const T* src = static_cast<const T*>(p.send);
  T* dst = static_cast<T*>(p.recv);
  // The block's elements: its part of the message, or (fused) of its rows, whole packs then
  // (hidden % unit == 0 when kVec).
  size_t lo, hi, rowLo = 0, rowHi = 0;
  if constexpr (kFused) {
    dev::splitRange(l.rows, gridDim.x, blockIdx.x, 1, &rowLo, &rowHi);
    lo = rowLo * l.hidden;
    hi = rowHi * l.hidden;
  } else {
    dev::splitRange(p.count, gridDim.x, blockIdx.x, kEpp, &lo, &hi);
  }

  dev::forRange<T, kVec>(
      lo, hi, [&](size_t i) { return *reinterpret_cast<const Pack*>(src + i); },
      [&](size_t i, const Pack& v) {
        for (int r = 0; r < n; ++r)
          if (r != me) *reinterpret_cast<Pack*>(inbox(r, me) + i) = v;
      },
      [&](size_t i) {
        T v = src[i];
        for (int r = 0; r < n; ++r)
          if (r != me) inbox(r, me)[i] = v;
      });
  if (!dev::peerBarrier(p, epoch, deadline)) return;
  if (!dev::signatureCheck(p, epoch, deadline)) return;
  if constexpr (kFused) {
    T* residual = static_cast<T*>(l.residual);
    const T* weight = static_cast<const T*>(l.weight);
    for (size_t row = rowLo; row < rowHi; ++row) {
      const size_t base = row * l.hidden;
      auto srcAt = [&](int r) -> const T* { return r == me ? src + base : inbox(me, r) + base; };
      dev::residualRmsNormRow<T, kVec>(
          l.hidden, residual + base, weight, dst + base, l.eps,
          [&](size_t u, int cnt, float(&x)[dev::NormShape<T>::kUnit]) {
            dev::reduceUnit<T, kVec>(me, n, srcAt, u, cnt, x);
          },
          dev::NoEmit<T>{}, dev::NoEmit<T>{});
    }
  } else {
    auto from = [&](int r) { return inbox(me, r); };
    dev::forRange<T, kVec>(
        lo, hi, [&](size_t i) { return dev::reduceRanksPack<T, Op>(n, me, src, from, i); },
        [&](size_t i, const Pack& v) { *reinterpret_cast<Pack*>(dst + i) = v; },
        [&](size_t i) { dst[i] = dev::reduceRanksElem<T, Op>(n, me, src, from, i); });
  }
  __syncthreads();
  dev::p2pFinish(p, epochPtr, epoch);
}

constexpr auto kPlainKernel = [](auto t, auto op, auto v) {
  return oneshotKernel<typename decltype(t)::type, decltype(op)::value, decltype(v)::value != 0, P2pLaunch>;
};
constexpr auto kFusedKernel = [](auto t, auto v) {
  return oneshotKernel<typename decltype(t)::type, 0, decltype(v)::value != 0, FusedP2pLaunch>;
};

Status launchFused(const FusedP2pLaunch& f, cudaStream_t stream) {
  const size_t bytes = f.rows * f.hidden * dataTypeSize(static_cast<DataType>(f.p2p.dtype));
  if (bytes > f.p2p.region.slotBytes)
    return TPCOMM_ERROR(kNotSupported, "fused oneshot_p2p: %zu bytes exceed the %zu-byte inbox", bytes,
                        f.p2p.region.slotBytes);
  return dev::launchFused("fused oneshot_p2p launch", f, fusedVectorizable(f), stream, kFusedKernel);
}

}  // namespace

const P2pKernels kOneshotKernels = {
    [] { return dev::preloadP2pAndFused("oneshot_p2p", kPlainKernel, kFusedKernel); },
    [](const P2pLaunch& p, cudaStream_t s) { return dev::launchP2p("oneshot_p2p launch", p, s, kPlainKernel); },
    launchFused};

}  // namespace tpcomm
