// fused_rmsnorm.cu: the unfused residual add + RMSNorm, run after any all-reduce that has
// no fused kernel (ring_nccl, staged_host on GPU ranks, a fused P2P kernel that declined). One
// block of kRmsNormThreads threads per row (grid-stride over rows), the arithmetic of
// fused_rmsnorm_common.cuh, so its bits equal the fused kernels' and the host path's. Reads x
// (the all-reduce's output, possibly `out` itself) only after griddepcontrol.wait, so it may be
// launched with programmatic dependent launch behind the all-reduce kernel.
#include <cuda_runtime.h>

#include "algos/fused/fused_rmsnorm_common.cuh"
#include "common/error.h"

namespace tpcomm {
namespace {

template <typename T, bool kVec>
__global__ void __launch_bounds__(kThreads) residualRmsNormKernel(RmsNormLaunch p) {
  dev::pdlWait();  // x (and residual) come from the previous kernel
  dev::pdlLaunchDependents();
  const T* x = static_cast<const T*>(p.x);
  T* residual = static_cast<T*>(p.residual);
  const T* weight = static_cast<const T*>(p.weight);
  T* out = static_cast<T*>(p.out);
  for (size_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const size_t base = row * p.hidden;
    dev::residualRmsNormRow<T, kVec>(
        p.hidden, residual + base, weight, out + base, p.eps,
        [&](size_t u, int n, float(&v)[dev::NormShape<T>::kUnit]) { dev::loadUnit<T, kVec, false>(x + base, u, n, v); },
        [](size_t, int, const T(&)[dev::NormShape<T>::kUnit]) {},
        [](size_t, int, const T(&)[dev::NormShape<T>::kUnit]) {});
  }
}

constexpr auto kKernel = [](auto t, auto v) {
  return residualRmsNormKernel<typename decltype(t)::type, decltype(v)::value != 0>;
};

}  // namespace

Status preloadResidualRmsNorm() {
  return dev::toStatus(dev::forEachTypeVariant([](auto t, auto v) { return dev::preload(kKernel(t, v)); }),
                       "loading the residual + RMSNorm kernels");
}

Status launchResidualRmsNorm(const RmsNormLaunch& p, cudaStream_t stream) {
  auto aligned = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; };
  const size_t unit = 16 / dataTypeSize(static_cast<DataType>(p.dtype));
  const bool vec = p.hidden % unit == 0 && aligned(p.x) && aligned(p.residual) && aligned(p.weight) && aligned(p.out);
  const LaunchShape shape{gridFor(p.rows, 1, 65535), static_cast<unsigned>(kThreads), p.pdl != 0};  // one block per row
  return dev::dispatchType(p.dtype, vec, [&](auto t, auto v) {
    return dev::launch("residual + RMSNorm launch", kKernel(t, v), shape, stream, p);
  });
}

}  // namespace tpcomm
