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

constexpr unsigned kMaxGrid = 65535;

template <typename T, bool kVec>
__global__ void __launch_bounds__(kRmsNormThreads) residualRmsNormKernel(RmsNormLaunch p) {
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

}  // namespace

Status preloadResidualRmsNorm() {
  return dev::toStatus(dev::forEachTypeVariant([](auto t, auto v) {
                         return dev::preload(residualRmsNormKernel<typename decltype(t)::type, decltype(v)::value != 0>);
                       }),
                       "loading the residual + RMSNorm kernels");
}

Status launchResidualRmsNorm(const RmsNormLaunch& p, cudaStream_t stream) {
  auto aligned = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; };
  const size_t unit = 16 / dataTypeSize(static_cast<DataType>(p.dtype));
  const bool vec = p.hidden % unit == 0 && aligned(p.x) && aligned(p.residual) && aligned(p.weight) && aligned(p.out);
  const unsigned blocks = static_cast<unsigned>(p.rows < kMaxGrid ? p.rows : kMaxGrid);
  cudaError_t e = dev::dispatchType(p.dtype, vec, [&](auto t, auto v) {
    return dev::launch(residualRmsNormKernel<typename decltype(t)::type, decltype(v)::value != 0>, blocks,
                       kRmsNormThreads, p.pdl != 0, stream, p);
  });
  return dev::toStatus(e, "residual + RMSNorm launch");
}

}  // namespace tpcomm
