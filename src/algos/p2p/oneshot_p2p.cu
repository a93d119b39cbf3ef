// oneshot_p2p.cu: one-shot all-reduce over peer-mapped buffers (NCCL's all-to-all
// one-shot; TensorRT-LLM's one-shot; vLLM's custom all-reduce for small sizes). Phase 1: block b
// pushes part b of its input into every peer's inbox (slot = own rank), posted NVLink/PCIe
// stores. Barrier: each block releases an epoch into its peers' flags and acquires theirs
// (p2p_common.cuh). Phase 2: block b reduces part b from its own input and the n-1 inboxes, in
// rank order 0..n-1, in fp32, and writes the output. The inbox is double-buffered by epoch
// parity: a peer overwrites buffer e%2 only after this rank's barrier of call e+1, which this
// rank passes only after it finished reading call e-1's (same parity) data.
//
// The fused twin (all-reduce + residual add + RMSNorm):
// one-shot all-reduce + residual add + RMSNorm in one kernel (NCCL's
// all-to-all one-shot with the norm as its epilogue; TensorRT-LLM's fused all-reduce + norm). It
// is the plain kernel above with whole rows per block: block b takes rows [lo, hi) of
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

#include "algos/fused/fused_rmsnorm_common.cuh"
#include "algos/common/launch_params.h"

namespace tpcomm {
namespace {

using dev::Pack;
using dev::PackOf;
constexpr int kThreads = 512;

template <typename T, int Op, bool kVec>
__global__ void __launch_bounds__(kThreads) oneshotKernel(P2pLaunch p) {
  constexpr int kEpp = PackOf<T>::kElems;
  const int me = p.rank, n = p.nRanks;
  dev::pdlLaunchDependents();
  dev::pdlWait();  // inputs and the epoch may come from the previous kernel
  uint64_t deadline;
  if (!dev::p2pBegin(p, &deadline)) return;  // poisoned: do nothing (p2p_common.cuh)
  uint64_t* epochPtr = dev::epochAt(p.peers[me], p.layout, kP2pOneshot, blockIdx.x);
  const uint64_t epoch = *epochPtr + 1;
  dev::signaturePublish(p, kP2pOneshot, epoch);
  const size_t bufOff = p.layout.oneshotOffset + (epoch & 1) * p.layout.oneshotBufferBytes();
  auto inbox = [&](int owner, int from) {
    return reinterpret_cast<T*>(p.peers[owner] + bufOff + static_cast<size_t>(from) * p.layout.oneshotBytes);
  };
  const T* src = static_cast<const T*>(p.send);
  T* dst = static_cast<T*>(p.recv);
  size_t lo, hi;
  dev::splitRange(p.count, gridDim.x, blockIdx.x, kEpp, &lo, &hi);

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
  if (!dev::peerBarrier(p, kP2pOneshot, epoch, deadline)) return;
  if (!dev::signatureCheck(p, kP2pOneshot, epoch, deadline)) return;
  auto from = [&](int r) { return inbox(me, r); };
  dev::forRange<T, kVec>(
      lo, hi, [&](size_t i) { return dev::reduceRanksPack<T, Op>(n, me, src, from, i); },
      [&](size_t i, const Pack& v) { *reinterpret_cast<Pack*>(dst + i) = v; },
      [&](size_t i) { dst[i] = dev::reduceRanksElem<T, Op>(n, me, src, from, i); });
  __syncthreads();
  if (threadIdx.x == 0) *epochPtr = epoch;
}

}  // namespace

Status preloadOneshotKernels() {
  cudaError_t e = dev::forEachKernelVariant([](auto t, auto op, auto vec) {
    return dev::preload(oneshotKernel<typename decltype(t)::type, decltype(op)::value, decltype(vec)::value != 0>);
  });
  return dev::toStatus(e, "oneshot_p2p");
}

Status launchOneshot(const P2pLaunch& p, cudaStream_t stream) {
  cudaError_t e = dev::dispatchKernel(p.dtype, p.op, p2pVectorizable(p.send, p.recv), [&](auto t, auto op, auto vec) {
    return dev::launch(oneshotKernel<typename decltype(t)::type, decltype(op)::value, decltype(vec)::value != 0>, p.blocks, kThreads, p.pdl, stream, p);
  });
  return dev::toStatus(e, "oneshot_p2p launch");
}

namespace {

using dev::Pack;

template <typename T, bool kVec>
__global__ void __launch_bounds__(kRmsNormThreads) fusedOneshotKernel(FusedP2pLaunch f) {
  const P2pLaunch& p = f.p2p;
  const int me = p.rank, n = p.nRanks;
  dev::pdlLaunchDependents();
  dev::pdlWait();  // inputs, residual and the epoch may come from the previous kernel
  uint64_t deadline;
  if (!dev::p2pBegin(p, &deadline)) return;  // poisoned: do nothing (p2p_common.cuh)
  uint64_t* epochPtr = dev::epochAt(p.peers[me], p.layout, kP2pOneshot, blockIdx.x);
  const uint64_t epoch = *epochPtr + 1;
  dev::signaturePublish(p, kP2pOneshot, epoch);
  const size_t bufOff = p.layout.oneshotOffset + (epoch & 1) * p.layout.oneshotBufferBytes();
  auto inbox = [&](int owner, int from) {
    return reinterpret_cast<T*>(p.peers[owner] + bufOff + static_cast<size_t>(from) * p.layout.oneshotBytes);
  };
  const T* src = static_cast<const T*>(p.send);
  T* dst = static_cast<T*>(p.recv);
  T* residual = static_cast<T*>(f.residual);
  const T* weight = static_cast<const T*>(f.weight);
  size_t rowLo, rowHi;
  dev::splitRange(f.rows, gridDim.x, blockIdx.x, 1, &rowLo, &rowHi);
  const size_t lo = rowLo * f.hidden, hi = rowHi * f.hidden;  // kVec: whole packs (hidden % unit == 0)

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
  if (!dev::peerBarrier(p, kP2pOneshot, epoch, deadline)) return;
  if (!dev::signatureCheck(p, kP2pOneshot, epoch, deadline)) return;

  for (size_t row = rowLo; row < rowHi; ++row) {
    const size_t base = row * f.hidden;
    auto srcAt = [&](int r) -> const T* { return r == me ? src + base : inbox(me, r) + base; };
    dev::residualRmsNormRow<T, kVec>(
        f.hidden, residual + base, weight, dst + base, f.eps,
        [&](size_t u, int cnt, float(&x)[dev::NormShape<T>::kUnit]) {
          dev::reduceUnit<T, kVec>(me, n, srcAt, u, cnt, x);
        },
        [](size_t, int, const T(&)[dev::NormShape<T>::kUnit]) {},
        [](size_t, int, const T(&)[dev::NormShape<T>::kUnit]) {});
  }
  __syncthreads();
  if (threadIdx.x == 0) *epochPtr = epoch;
}

}  // namespace

Status preloadFusedOneshotKernels() {
  return dev::toStatus(dev::forEachTypeVariant([](auto t, auto v) {
                          return dev::preload(fusedOneshotKernel<typename decltype(t)::type, decltype(v)::value != 0>);
                        }),
                        "fused oneshot_p2p");
}

Status launchFusedOneshot(const FusedP2pLaunch& f, cudaStream_t stream) {
  const size_t bytes = f.rows * f.hidden * dataTypeSize(static_cast<DataType>(f.p2p.dtype));
  if (bytes > f.p2p.layout.oneshotBytes)
    return TPCOMM_ERROR(kNotSupported, "fused oneshot_p2p: %zu bytes exceed the %zu-byte inbox", bytes,
                        f.p2p.layout.oneshotBytes);
  cudaError_t e = dev::dispatchType(f.p2p.dtype, fusedVectorizable(f), [&](auto t, auto v) {
    return dev::launch(fusedOneshotKernel<typename decltype(t)::type, decltype(v)::value != 0>, f.p2p.blocks, kRmsNormThreads, f.p2p.pdl, stream, f);
  });
  return dev::toStatus(e, "fused oneshot_p2p launch");
}

}  // namespace tpcomm
