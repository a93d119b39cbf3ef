// fused_lamport_p2p_kernel.cu: low-latency one-shot all-reduce (Lamport sentinels, no barrier)
// + residual add + RMSNorm in one kernel (TensorRT-LLM's low-latency fused all-reduce + norm).
// It is lamport_p2p_kernel.cu with whole rows per block (splitRange over rows), so the block that
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
// three-buffer argument of lamport_p2p_kernel.cu holds as is because it rests on kernel
// completion, not on which block touched which bytes. Needs 16-byte aligned buffers and rows of
// whole 16-byte units (the launcher declines otherwise and the caller falls back).
// A timed-out poll reports kTimeout and stops waiting (the block still runs to its end, so no
// thread is left at a barrier); the communicator is unusable afterwards anyway.
#include <cuda_runtime.h>

#include "algos/fused_rmsnorm_common.cuh"
#include "common/error.h"

namespace tpcomm {
namespace {

using dev::Pack;
using dev::PackOf;

template <typename T>
__global__ void __launch_bounds__(kRmsNormThreads) fusedLamportKernel(FusedP2pLaunch f) {
  constexpr int kEpp = PackOf<T>::kElems;
  const P2pLaunch& p = f.p2p;
  const uint64_t deadline = dev::globalTimerNs() + p.timeoutNs;
  const int me = p.rank, n = p.nRanks;
  char* local = p.peers[me];
  dev::pdlLaunchDependents();
  dev::pdlWait();  // inputs, residual, the epoch and the used-bytes words may come from the previous kernel
  const dev::LamportRound round(p);
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
      if (r != me) round.slot(p.peers[r], buf, me)[i] = v;
  }
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
              v = src[i];
            } else {
              const Pack* q = round.slot(local, buf, r) + i;
              v = __ldcv(q);
              if (!failed && !dev::lamportWait(q, v, deadline, p.errorWord, r)) failed = true;
            }
            if (r == 0)
              PackOf<T>::toFloats(v, acc);
            else
              PackOf<T>::template accumulate<0>(acc, v);
          }
#pragma unroll
          for (int k = 0; k < kEpp; ++k) x[k] = dev::Elem<T>::toFloat(dev::Elem<T>::fromFloat(acc[k]));
        },
        [](size_t, int, const T(&)[kEpp]) {}, [](size_t, int, const T(&)[kEpp]) {});
  }
  // 3. clear the buffer read in the previous call (as lamport_p2p_kernel.cu)
  round.clearPrevious(local, n, me);
  round.finish(f.rows * f.hidden * sizeof(T));
}

}  // namespace

Status preloadFusedLamportKernels() {
  return dev::preloaded(dev::forEachNormVariant(
                            [](auto t, auto) { return dev::preload(fusedLamportKernel<typename decltype(t)::type>); }),
                        "fused lamport_p2p");
}

Status launchFusedLamport(const FusedP2pLaunch& f, cudaStream_t stream) {
  const size_t bytes = f.rows * f.hidden * dataTypeSize(static_cast<DataType>(f.p2p.dtype));
  if (bytes > f.p2p.layout.lamportBytes)
    return TPCOMM_ERROR(kNotSupported, "fused lamport_p2p: %zu bytes exceed the %zu-byte buffer", bytes,
                        f.p2p.layout.lamportBytes);
  if (!fusedVectorizable(f))
    return TPCOMM_ERROR(kNotSupported,
                        "fused lamport_p2p: needs 16-byte aligned buffers and rows of whole 16-byte units");
  cudaError_t e = dev::dispatchNorm(f.p2p.dtype, true, [&](auto t, auto) {
    return dev::launchFused(fusedLamportKernel<typename decltype(t)::type>, f, stream);
  });
  if (e != cudaSuccess) return TPCOMM_ERROR(kCudaError, "fused lamport_p2p launch: %s", cudaGetErrorString(e));
  return Status::kOk;
}

}  // namespace tpcomm
