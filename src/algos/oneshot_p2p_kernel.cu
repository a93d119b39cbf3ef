// oneshot_p2p_kernel.cu: one-shot all-reduce over peer-mapped buffers (NCCL's all-to-all
// one-shot; TensorRT-LLM's one-shot; vLLM's custom all-reduce for small sizes). Phase 1: block b
// pushes part b of its input into every peer's inbox (slot = own rank), posted NVLink/PCIe
// stores. Barrier: each block releases an epoch into its peers' flags and acquires theirs
// (p2p_common.cuh). Phase 2: block b reduces part b from its own input and the n-1 inboxes, in
// rank order 0..n-1, in fp32, and writes the output. The inbox is double-buffered by epoch
// parity: a peer overwrites buffer e%2 only after this rank's barrier of call e+1, which this
// rank passes only after it finished reading call e-1's (same parity) data.
#include <cuda_runtime.h>

#include "algos/p2p_common.cuh"
#include "common/error.h"

namespace tpcomm {
namespace {

using dev::Pack;
using dev::PackOf;
constexpr int kThreads = 512;

template <typename T, int Op, bool kVec>
__global__ void __launch_bounds__(kThreads) oneshotKernel(P2pLaunch p) {
  constexpr int kEpp = PackOf<T>::kElems;
  const uint64_t deadline = dev::globalTimerNs() + p.timeoutNs;
  const int me = p.rank, n = p.nRanks;
  dev::pdlLaunchDependents();
  dev::pdlWait();  // inputs and the epoch may come from the previous kernel
  uint64_t* epochPtr = dev::epochAt(p.peers[me], p.layout, kP2pOneshot, blockIdx.x);
  const uint64_t epoch = *epochPtr + 1;
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
  cudaError_t e = dev::forEachP2pVariant([](auto t, auto op, auto vec) {
    return dev::preload(oneshotKernel<typename decltype(t)::type, decltype(op)::value, decltype(vec)::value != 0>);
  });
  return dev::preloaded(e, "oneshot_p2p");
}

Status launchOneshot(const P2pLaunch& p, cudaStream_t stream) {
  cudaError_t e = dev::dispatchKernel(p, p2pVectorizable(p.send, p.recv), [&](auto t, auto op, auto vec) {
    return dev::launchP2p(oneshotKernel<typename decltype(t)::type, decltype(op)::value, decltype(vec)::value != 0>, p,
                          kThreads, stream);
  });
  if (e != cudaSuccess) return TPCOMM_ERROR(kCudaError, "oneshot_p2p launch: %s", cudaGetErrorString(e));
  return Status::kOk;
}

}  // namespace tpcomm
