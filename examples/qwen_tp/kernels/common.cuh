// common.cuh: what every kernel file of the decoder shares: programmatic dependent launch (PDL)
// waits, warp/block sums, the bf16 tensor-core MMA, and launch(), the one place kernels are
// launched (with PDL when gpu::setPdl(true)).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace qwen {
namespace gpu {

/// True after setPdl(true) (gpu_kernels.h).
bool pdlEnabled();
/// Whether a call of n rows takes the wide-row kernels (setWideRowKernels, gpu_kernels.h).
bool wideRows(int n);
/// Whether every pointer is 16-byte aligned (the wide-row kernels' uint4 accesses).
template <typename... P>
bool aligned16(const P*... p) {
  return ((reinterpret_cast<uintptr_t>(p) % 16 == 0) && ...);
}

namespace {

// Programmatic dependent launch (sm_90+; no-ops elsewhere and when a kernel was launched without
// the attribute). Every kernel launched through launch() below calls pdlWait before it touches memory
// an earlier kernel of the stream writes or reads (its inputs and its outputs); only constant
// weights are touched before (gemvKernel's L2 prefetch). pdlLaunch lets the next kernel's blocks
// be scheduled while this one runs; that kernel's pdlWait still waits for this grid to complete
// and its writes to be visible.
__device__ __forceinline__ void pdlWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdlLaunch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

__device__ __forceinline__ float warpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, <= 1024).
__device__ float blockSum(float v) {
  __shared__ float sh[32];
  __shared__ float total;
  v = warpSum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float w = lane < (blockDim.x >> 5) ? sh[lane] : 0.f;
    w = warpSum(w);
    if (lane == 0) total = w;
  }
  __syncthreads();
  float r = total;
  __syncthreads();
  return r;
}

// D += A B for one m16n8k16 tile: A row-major bf16 (a0..a3), B column-major bf16 (b0, b1),
// D fp32, in the PTX ISA's fragment layout (sm_80+).
__device__ __forceinline__ void mmaBf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                        uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
  __trap();  // callers launch MMA kernels on sm_80+ only (GpuModel::init checks the device)
#endif
}

__host__ __device__ inline int roundWarp(int n) { return (n + 31) / 32 * 32; }

// kernel<<<grid, block, smem, s>>>(args...), with programmatic dependent launch when setPdl(true).
template <typename... KArgs, typename... Args>
void launchSmem(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdlEnabled() ? 1 : 0;
  cudaLaunchKernelEx(&cfg, kernel, static_cast<KArgs>(args)...);
}

// kernel<<<grid, block, 0, s>>>(args...), with programmatic dependent launch when setPdl(true).
template <typename... KArgs, typename... Args>
void launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, cudaStream_t s, Args... args) {
  launchSmem(kernel, grid, block, 0, s, args...);
}

}  // namespace
}  // namespace gpu
}  // namespace qwen
