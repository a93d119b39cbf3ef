// scratch_test_p2p.cu: the test algorithm's kernel, a one-shot all-reduce over its own region.
// Block b pushes part b of its input into every peer's buffer e%2, slot = own rank (plain stores);
// peerBarrier on its own flags (release of the pushes, acquire of the peers'); then part b is
// reduced from its own input and the n-1 slots in rank order, in fp32 (reduceRanksElem). A peer
// rewrites buffer e%2 only after this rank's barrier of call e+1, which this rank reaches only
// after finishing call e (oneshot_p2p.cu's argument). One element per thread, no vectors.
#include <cuda_runtime.h>

#include "algos/p2p/p2p_common.cuh"
#include "scratch_test_p2p.h"

namespace tpcomm {
namespace {

template <typename T, int Op>
__global__ void __launch_bounds__(kThreads) scratchTestKernel(P2pLaunch p) {
  const int me = p.rank, n = p.nRanks;
  dev::P2pOpening o;
  if (!dev::p2pOpen(p, &o)) return;  // poisoned: do nothing
  const uint64_t epoch = o.epoch + 1;
  const size_t buffer = p.region.bufferAt(epoch & 1);
  auto slot = [&](int owner, int from) { return dev::slotAt<T>(p, buffer, owner, from); };
  const T* src = static_cast<const T*>(p.send);
  T* dst = static_cast<T*>(p.recv);
  size_t lo, hi;
  dev::splitRange(p.count, gridDim.x, blockIdx.x, 1, &lo, &hi);
  for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x)
    for (int r = 0; r < n; ++r)
      if (r != me) slot(r, me)[i] = src[i];
  if (!dev::peerBarrier(p, epoch, o.deadline)) return;
  if (!dev::signatureCheck(p, epoch, o.deadline)) return;
  auto from = [&](int r) { return slot(me, r); };
  for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) dst[i] = dev::reduceRanksElem<T, Op>(n, me, src, from, i);
  __syncthreads();
  dev::p2pFinish(p, o.epochPtr, epoch);
}

// One instantiation per dtype and op (no vector variant).
constexpr auto kKernel = [](auto t, auto op, auto) {
  return scratchTestKernel<typename decltype(t)::type, decltype(op)::value>;
};

}  // namespace

const P2pKernels kScratchTestKernels = {
    [] { return dev::preloadP2p("scratch_test_p2p", kKernel); },
    [](const P2pLaunch& p, cudaStream_t s) { return dev::launchP2p("scratch_test_p2p launch", p, s, kKernel); },
    nullptr};

}  // namespace tpcomm
