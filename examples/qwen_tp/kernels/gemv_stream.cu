// gemv_stream.cu: a one-token product that streams W (a decode step's weight products, n = 1):
// Y[o] = sum_i W[o, i] x[i], W [out, in] bf16 row-major, x [in] bf16, fp32 accumulation.
//
// Why another GEMV: docs/decode_kernels.md, "The GEMVs": cuBLAS streams the qwen3-8b step's
// weights at ~3.65 TB/s over the step (4.1 on gate/up alone; the small products lose their ramp
// and tail), gemvBf16 at 2.4-3.3 TB/s (bursts of 4 KB a warp between MMAs, partial waves). This
// kernel is the plainest stream: a warp owns whole rows (rows g, g + G, g + 2G, ... for global
// warp g of G), reads a row in chunks of kStreamLoads 16-byte loads a lane (4 KB a warp) all in
// flight before their FMAs, and the grid is at most kStreamBlocksPerSm blocks a multiprocessor of
// 16 warps, so up to 128 KB of W a multiprocessor is in flight against the ~33 KB Little's law
// asks at ~4.4 TB/s and ~1 us. x is staged in shared memory once a block after the PDL wait; each
// warp's first chunk of W (constant: no kernel writes it) is loaded before the wait, so under PDL
// a launch's ramp overlaps the previous kernel's tail. No tensor cores: one token is 2 FLOP a
// weight, far under the FMA rate.
//
// Order of the sums: lane l accumulates its elements chunk by chunk, 8 bf16 of a load in order,
// then a warp butterfly; a function of `in` only, so Y[o] is the same bits whatever the grid, the
// device or the run. Needs in % 8 == 0 and 16-byte aligned W and x (gemvStreamSupported).
#include <algorithm>
#include <cstdint>

#include "kernels/common.cuh"
#include "kernels/gemv.cuh"

namespace qwen {
namespace gpu {
namespace {

constexpr int kStreamWarps = 16, kStreamLoads = 8, kStreamBlocksPerSm = 2;

__device__ __forceinline__ float dot8(uint4 w, uint4 x, float acc) {
  const uint32_t* ws = &w.x;
  const uint32_t* xs = &x.x;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    acc = __fmaf_rn(__uint_as_float(ws[j] << 16), __uint_as_float(xs[j] << 16), acc);
    acc = __fmaf_rn(__uint_as_float(ws[j] & 0xffff0000u), __uint_as_float(xs[j] & 0xffff0000u), acc);
  }
  return acc;
}

template <bool kF32>
__global__ void __launch_bounds__(kStreamWarps * 32, kStreamBlocksPerSm)
    gemvStreamKernel(const __nv_bfloat16* __restrict__ W, int out, int in, const __nv_bfloat16* __restrict__ x,
                     void* __restrict__ Y) {
  extern __shared__ uint4 xs[];
  pdlLaunch();
  const int lane = threadIdx.x & 31, vecs = in / 8;
  const int warps = gridDim.x * kStreamWarps, first = blockIdx.x * kStreamWarps + (threadIdx.x >> 5);
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  uint4 w[kStreamLoads];
  // The first chunk of this warp's first row, before the wait.
  if (first < out) {
    const uint4* row = reinterpret_cast<const uint4*>(W + static_cast<int64_t>(first) * in);
#pragma unroll
    for (int j = 0; j < kStreamLoads; ++j) {
      const int v = j * 32 + lane;
      w[j] = v < vecs ? __ldcs(row + v) : zero;
    }
  }
  pdlWait();
  for (int v = threadIdx.x; v < vecs; v += blockDim.x) xs[v] = reinterpret_cast<const uint4*>(x)[v];
  __syncthreads();
  for (int r = first; r < out; r += warps) {
    const uint4* row = reinterpret_cast<const uint4*>(W + static_cast<int64_t>(r) * in);
    float acc = 0.f;
    for (int base = 0; base < vecs; base += kStreamLoads * 32) {
      if (r != first || base != 0) {
#pragma unroll
        for (int j = 0; j < kStreamLoads; ++j) {
          const int v = base + j * 32 + lane;
          w[j] = v < vecs ? __ldcs(row + v) : zero;
        }
      }
#pragma unroll
      for (int j = 0; j < kStreamLoads; ++j) {
        const int v = base + j * 32 + lane;
        if (v < vecs) acc = dot8(w[j], xs[v], acc);
      }
    }
    acc = warpSum(acc);
    if (lane == 0) {
      if (kF32)
        static_cast<float*>(Y)[r] = acc;
      else
        static_cast<__nv_bfloat16*>(Y)[r] = __float2bfloat16_rn(acc);
    }
  }
}

int gStreamSms = 0;  // prepareGemvStream

}  // namespace

bool prepareGemvStream() {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&gStreamSms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    return false;
  // x up to kGemvStreamMaxIn bf16 in shared memory: past the default 48 KB.
  const int smem = kGemvStreamMaxIn * 2;
  return cudaFuncSetAttribute(gemvStreamKernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) ==
             cudaSuccess &&
         cudaFuncSetAttribute(gemvStreamKernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) == cudaSuccess;
}

bool gemvStreamSupported(const void* W, const void* x, int in) {
  return in > 0 && in % 8 == 0 && in <= kGemvStreamMaxIn && aligned16(W, x);
}

bool gemvStream(const __nv_bfloat16* W, int out, int in, const __nv_bfloat16* x, void* Y, bool yF32, cudaStream_t s) {
  if (gStreamSms <= 0 || out <= 0 || !gemvStreamSupported(W, x, in)) return false;
  const int blocks = std::min((out + kStreamWarps - 1) / kStreamWarps, gStreamSms * kStreamBlocksPerSm);
  const size_t smem = static_cast<size_t>(in) * 2;
  if (yF32)
    launchSmem(gemvStreamKernel<true>, blocks, kStreamWarps * 32, smem, s, W, out, in, x, Y);
  else
    launchSmem(gemvStreamKernel<false>, blocks, kStreamWarps * 32, smem, s, W, out, in, x, Y);
  return cudaPeekAtLastError() == cudaSuccess;
}

}  // namespace gpu
}  // namespace qwen
