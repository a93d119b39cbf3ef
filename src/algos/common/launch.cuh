// Launch plumbing shared by every kernel of tpcomm: one launch helper (a LaunchShape, with
// programmatic dependent launch when asked, its error as a Status), one preload helper, the
// dispatch of a call's dtype, op and alignment to a kernel instantiation, and the PDL device
// calls.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "algos/common/launch_shape.h"
#include "common/error.h"
#include "common/residency.h"
#include "tpcomm/types.h"

namespace tpcomm {
namespace dev {

// Programmatic dependent launch (sm_90+): let the next kernel in the stream be scheduled now,
// and wait here until the previous one has finished and its memory is visible. Everything a
// kernel reads that an earlier kernel may write (inputs, epochs) comes after pdlWait(), and so
// does the start of every timeout clock: the wait for earlier kernels is not a wait for a peer.
__device__ __forceinline__ void pdlLaunchDependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdlWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

template <typename T>
struct TypeTag {
  using type = T;
};
template <int V>
struct IntTag {
  static constexpr int value = V;
};

// A launch's or preload's result as a Status naming `what` (e.g. "oneshot_p2p launch").
inline Status toStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::kOk;
  return cudaFailure(static_cast<int>(e), what, __FILE__, __LINE__);
}

// Launches kernel(args...) with `shape` on `stream`, as a programmatic dependent launch when
// shape.pdl (the kernel must then call pdlWait() before reading what earlier kernels wrote).
// Returns this launch's own error, not a stale one from earlier calls, as a Status naming `what`.
template <typename Kernel, typename... Args>
Status launch(const char* what, Kernel kernel, LaunchShape shape, cudaStream_t stream, Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(shape.blocks);
  cfg.blockDim = dim3(shape.threads);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = shape.pdl ? 1 : 0;
  return toStatus(cudaLaunchKernelEx(&cfg, kernel, args...), what);
}

// Loads `kernel` into the current device's context now. Under CUDA's lazy loading (the default
// since CUDA 12.2) a kernel is loaded at its first launch, and that load may wait for the device
// to go idle: a P2P kernel already spinning on a peer whose launch comes later from the same
// thread (createGroup, a grouped call) then never finishes until its timeout. So every kernel a
// communicator may launch is loaded when the communicator is created (Algorithm::preload()).
// It also records how many of its kThreads-thread blocks an SM holds (common/residency.h):
// every tpcomm kernel runs kThreads threads per block.
template <typename Kernel>
cudaError_t preload(Kernel kernel) {
  cudaFuncAttributes attr;
  cudaError_t e = cudaFuncGetAttributes(&attr, kernel);
  int blocks = 0;
  if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kThreads, 0);
  if (e == cudaSuccess) noteResidentBlocksPerSm(blocks, kThreads);
  return e;
}

// f(TypeTag<T>{}) for dtype, f(IntTag<Op>{}) for op (0 sum, 1 max, 2 min), f(IntTag<0 or 1>{})
// for a flag: the pieces the dispatchers below are made of. Every branch returns f's type.
template <typename F>
auto byType(int dtype, F f) {
  switch (static_cast<DataType>(dtype)) {
    case DataType::kF32:
      return f(TypeTag<float>{});
    case DataType::kF16:
      return f(TypeTag<__half>{});
    default:
      return f(TypeTag<__nv_bfloat16>{});
  }
}
template <typename F>
auto byOp(int op, F f) {
  return op == 0 ? f(IntTag<0>{}) : op == 1 ? f(IntTag<1>{}) : f(IntTag<2>{});
}
template <typename F>
auto byFlag(bool flag, F f) {
  return flag ? f(IntTag<1>{}) : f(IntTag<0>{});
}

// Calls launch(TypeTag<T>{}, IntTag<Op>{}, IntTag<Vec>{}) for the call's dtype, op, alignment and
// returns its result (a launch's Status, or a preload's cudaError_t).
template <typename Launch>
auto dispatchKernel(int dtype, int op, bool vec, Launch launch) {
  return byType(dtype, [&](auto t) {
    return byOp(op, [&](auto o) { return byFlag(vec, [&](auto v) { return launch(t, o, v); }); });
  });
}

// Calls launch(TypeTag<T>{}, IntTag<Vec>{}) for dtype and alignment (no reduction operator: the
// norm kernels, all-gather) and returns its result.
template <typename Launch>
auto dispatchType(int dtype, bool vec, Launch launch) {
  return byType(dtype, [&](auto t) { return byFlag(vec, [&](auto v) { return launch(t, v); }); });
}

// Calls f for every variant dispatchKernel (f(TypeTag, IntTag<Op>, IntTag<Vec>): 3 dtypes x 3
// ops x 2 alignments) or dispatchType (f(TypeTag, IntTag<Vec>)) can pick; stops at the first
// error. For preloading (dev::preload).
template <typename F>
cudaError_t forEachKernelVariant(F f) {
  cudaError_t e = cudaSuccess;
  for (int v = 0; v < 18 && e == cudaSuccess; ++v) e = dispatchKernel(v / 6, v / 2 % 3, v % 2 != 0, f);
  return e;
}
template <typename F>
cudaError_t forEachTypeVariant(F f) {
  cudaError_t e = cudaSuccess;
  for (int v = 0; v < 6 && e == cudaSuccess; ++v) e = dispatchType(v / 2, v % 2 != 0, f);
  return e;
}

}  // namespace dev
}  // namespace tpcomm
