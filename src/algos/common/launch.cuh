// Launch plumbing shared by every kernel of tpcomm: one launch helper (with programmatic
// dependent launch when asked), one preload helper, one conversion of a CUDA error to a Status,
// and the PDL device calls.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

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

// Launches kernel(args...) with `blocks` x `threads` on `stream`, as a programmatic dependent
// launch when `pdl` (the kernel must then call pdlWait() before reading what earlier kernels
// wrote). Returns this launch's own error, not a stale one from earlier calls.
template <typename Kernel, typename... Args>
cudaError_t launch(Kernel kernel, unsigned blocks, unsigned threads, bool pdl, cudaStream_t stream, Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(blocks);
  cfg.blockDim = dim3(threads);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, args...);
}

// Loads `kernel` into the current device's context now. Under CUDA's lazy loading (the default
// since CUDA 12.2) a kernel is loaded at its first launch, and that load may wait for the device
// to go idle: a P2P kernel already spinning on a peer whose launch comes later from the same
// thread (createGroup, a grouped call) then never finishes until its timeout. So every kernel a
// communicator may launch is loaded when the communicator is created (Algorithm::preload()).
// It also records how many of its 512-thread blocks an SM holds (common/residency.h): every
// tpcomm kernel runs 512 threads per block.
template <typename Kernel>
cudaError_t preload(Kernel kernel) {
  cudaFuncAttributes attr;
  cudaError_t e = cudaFuncGetAttributes(&attr, kernel);
  int blocks = 0;
  if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, 512, 0);
  if (e == cudaSuccess) noteResidentBlocksPerSm(blocks, 512);
  return e;
}

// A launch's or preload's result as a Status naming `what` (e.g. "oneshot_p2p launch").
inline Status toStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::kOk;
  return cudaFailure(static_cast<int>(e), what, __FILE__, __LINE__);
}

// Calls launch(TypeTag<T>{}, IntTag<Op>{}, IntTag<Vec>{}) for the call's dtype, op, alignment;
// launch returns the cudaError_t of its launch.
template <typename Launch>
cudaError_t dispatchKernel(int dtype, int op, bool vec, Launch launch) {
  auto byOp = [&](auto t) -> cudaError_t {
    auto byVec = [&](auto op) -> cudaError_t { return vec ? launch(t, op, IntTag<1>{}) : launch(t, op, IntTag<0>{}); };
    switch (op) {
      case 0:
        return byVec(IntTag<0>{});
      case 1:
        return byVec(IntTag<1>{});
      default:
        return byVec(IntTag<2>{});
    }
  };
  switch (static_cast<DataType>(dtype)) {
    case DataType::kF32:
      return byOp(TypeTag<float>{});
    case DataType::kF16:
      return byOp(TypeTag<__half>{});
    default:
      return byOp(TypeTag<__nv_bfloat16>{});
  }
}

// Calls f(TypeTag<T>{}, IntTag<Op>{}, IntTag<Vec>{}) for every dtype, op and alignment variant
// (what dispatchKernel can pick); stops at the first error.
template <typename F>
cudaError_t forEachKernelVariant(F f) {
  for (int dt = 0; dt < 3; ++dt)
    for (int op = 0; op < 3; ++op)
      for (int vec = 0; vec < 2; ++vec) {
        cudaError_t e = dispatchKernel(dt, op, vec != 0, f);
        if (e != cudaSuccess) return e;
      }
  return cudaSuccess;
}

// Calls launch(TypeTag<T>{}, IntTag<Vec>{}) for dtype and alignment (no reduction operator: the norm kernels, all-gather).
template <typename Launch>
cudaError_t dispatchType(int dtype, bool vec, Launch launch) {
  auto byVec = [&](auto t) -> cudaError_t { return vec ? launch(t, IntTag<1>{}) : launch(t, IntTag<0>{}); };
  switch (static_cast<DataType>(dtype)) {
    case DataType::kF32:
      return byVec(TypeTag<float>{});
    case DataType::kF16:
      return byVec(TypeTag<__half>{});
    default:
      return byVec(TypeTag<__nv_bfloat16>{});
  }
}

// Calls f(TypeTag<T>{}, IntTag<Vec>{}) for every dtype and alignment variant (what dispatchType
// can pick); stops at the first error. For preloading (dev::preload).
template <typename F>
cudaError_t forEachTypeVariant(F f) {
  for (int dt = 0; dt < 3; ++dt)
    for (int vec = 0; vec < 2; ++vec) {
      cudaError_t e = dispatchType(dt, vec != 0, f);
      if (e != cudaSuccess) return e;
    }
  return cudaSuccess;
}

}  // namespace dev
}  // namespace tpcomm
