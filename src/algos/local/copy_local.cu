// copy_local.cu: the one-rank reduction (copy_local.cc) on a GPU rank: out[i] = in[i] + 0 in
// fp32, rounded back once: the determinism contract with one rank (docs/determinism.md), so a
// -0.0 input comes out +0.0 as on every other size and algorithm, and every other value keeps
// its bits. One element per thread per step of a grid-stride loop; in place is fine (each
// thread reads its element before it writes it). No peer, no wait, capturable.
#include <cuda_runtime.h>

#include "algos/common/device_common.cuh"
#include "algos/common/launch.cuh"
#include "algos/local/copy_local.h"

namespace tpcomm {
namespace {

constexpr size_t kMaxBlocks = 1024;

template <typename T>
__global__ void __launch_bounds__(kThreads) zeroRuleCopyKernel(const T* in, T* out, size_t count) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride)
    out[i] = dev::Elem<T>::fromFloat(__fadd_rn(dev::Elem<T>::toFloat(in[i]), 0.0f));
}

}  // namespace

Status launchZeroRuleCopy(const void* in, void* out, size_t count, DataType dtype, cudaStream_t stream) {
  const LaunchShape shape{gridFor(count, kThreads, kMaxBlocks), kThreads, false};
  return dev::dispatchType(static_cast<int>(dtype), false, [&](auto t, auto) {
    using T = typename decltype(t)::type;
    return dev::launch("copy_local launch", zeroRuleCopyKernel<T>, shape, stream, static_cast<const T*>(in),
                       static_cast<T*>(out), count);
  });
}

Status preloadZeroRuleCopy() {
  cudaError_t e = dev::preload(zeroRuleCopyKernel<float>);
  if (e == cudaSuccess) e = dev::preload(zeroRuleCopyKernel<__half>);
  if (e == cudaSuccess) e = dev::preload(zeroRuleCopyKernel<__nv_bfloat16>);
  return dev::toStatus(e, "loading the copy_local kernels");
}

}  // namespace tpcomm
