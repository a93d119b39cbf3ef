// gemv_stream.cu: small-n products that stream W (a decode step's weight products, the MTP
// drafts and verify calls): Y[t, o] = sum_i W[o, i] X[t, i] for t < n <= kGemvStreamMaxTokens,
// W [out, in] bf16 row-major, X [n, in] bf16, fp32 accumulation, Y [n, out] bf16 or fp32.
//
// Why another GEMV: docs/decode_kernels.md, "The GEMVs": cuBLAS streams the qwen3-8b step's
// weights at ~3.65 TB/s over the step (4.1 on gate/up alone; the small products lose their ramp
// and tail), gemvBf16 at 2.4-3.3 TB/s (bursts of 4 KB a warp between MMAs, partial waves). This
// kernel is the plainest stream: a warp owns whole rows (rows g, g + G, g + 2G, ... for global
// warp g of G), reads a row in chunks of kStreamLoads 16-byte loads a lane (4 KB a warp) all in
// flight before their FMAs. The grid is at most kStreamBlocksPerSm blocks a multiprocessor of 16
// warps (up to 128 KB of W a multiprocessor in flight against the ~33 KB Little's law asks at
// ~4.4 TB/s and ~1 us), and no more warps than give every warp the same number of rows: a
// product of 5120 rows runs 2560 warps of 2 rows, not 4224 warps of which 896 take a second row
// alone. X is staged in shared memory once a block when n * in * 2 bytes fit kStreamSharedX, else
// read through L1 (the same values, so the same bits). No tensor cores: a token is 2 FLOP a weight
// and, at n = 1, about 25 instructions a 16-byte load (a fifth of the issue rate at 4.4 TB/s);
// each token more adds ~17 (unpacking x and 8 FMAs), so n = 4 runs ~1.5x and n = 8 ~3x n = 1's
// time (gemv_bench): GpuModel sends it one-token calls only.
//
// PDL: the kernel lets its dependents launch at once, but is itself launched without PDL by
// default (setGemvStreamPdl): PDL-launched behind a kernel that triggers early, its blocks (a
// full grid: every slot of 2 blocks a multiprocessor) start while that kernel's blocks and the
// next kernel's waiting blocks still hold slots, so part of the grid waits for a whole block
// lifetime (the product's) for a slot. Measured on one H200 (qwen3-8b step at 512): 4.98 ms
// PDL-launched, 4.57 ms with PDL off everywhere, 4.78 ms for cuBLAS's products. Each warp's first
// chunk of W (constant: no kernel writes it) is loaded before the wait, which overlaps the
// previous kernel's tail only when PDL-launched.
//
// Order of the sums: for each token, lane l accumulates its elements chunk by chunk, 8 bf16 of a
// load in order, then a warp butterfly: a function of `in` only. So Y[t, o] is the same bits
// whatever the grid, n, the other tokens of the call, the device or the run: a verify call of
// N + 1 tokens reproduces N + 1 one-token steps (speculative == greedy). Needs in % 8 == 0 and
// 16-byte aligned W and X (gemvStreamSupported). A launch reads W, X and writes Y only; nothing
// waits on another block, so there is no cross-block protocol to bound.
#include <algorithm>
#include <cstdint>

#include "kernels/common.cuh"
#include "kernels/gemv.cuh"

namespace qwen {
namespace gpu {
namespace {

constexpr int kStreamWarps = 16, kStreamLoads = 8, kStreamBlocksPerSm = 2;
constexpr int kStreamSharedX = 96 * 1024;  // two blocks a multiprocessor still fit

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

// kTok: the accumulators a lane keeps (n <= kTok); kSharedX: X in shared memory, else from L1.
template <int kTok, bool kSharedX, bool kF32>
__global__ void __launch_bounds__(kStreamWarps * 32, kStreamBlocksPerSm)
    gemvStreamKernel(const __nv_bfloat16* __restrict__ W, int out, int in, const __nv_bfloat16* __restrict__ X, int n,
                     void* __restrict__ Y) {
  extern __shared__ uint4 xs[];
  pdlLaunch();
  const int lane = threadIdx.x & 31, vecs = in / 8;
  const int warps = gridDim.x * kStreamWarps, first = blockIdx.x * kStreamWarps + (threadIdx.x >> 5);
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  const uint4* xg = reinterpret_cast<const uint4*>(X);
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
  if (kSharedX) {
    for (int v = threadIdx.x; v < n * vecs; v += blockDim.x) xs[v] = xg[v];
    __syncthreads();
  }
  for (int r = first; r < out; r += warps) {
    const uint4* row = reinterpret_cast<const uint4*>(W + static_cast<int64_t>(r) * in);
    float acc[kTok];
#pragma unroll
    for (int t = 0; t < kTok; ++t) acc[t] = 0.f;
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
        if (v < vecs) {
#pragma unroll
          for (int t = 0; t < kTok; ++t)
            if (t < n) acc[t] = dot8(w[j], kSharedX ? xs[t * vecs + v] : __ldg(xg + t * vecs + v), acc[t]);
        }
      }
    }
#pragma unroll
    for (int t = 0; t < kTok; ++t) {
      if (t >= n) break;
      const float sum = warpSum(acc[t]);
      if (lane == 0) {
        if (kF32)
          static_cast<float*>(Y)[static_cast<int64_t>(t) * out + r] = sum;
        else
          static_cast<__nv_bfloat16*>(Y)[static_cast<int64_t>(t) * out + r] = __float2bfloat16_rn(sum);
      }
    }
  }
}

int gStreamSms = 0;      // prepareGemvStream
bool gStreamPdl = false;  // setGemvStreamPdl

template <int kTok, bool kF32>
void launchStream(const __nv_bfloat16* W, int out, int in, const __nv_bfloat16* X, int n, void* Y, int blocks,
                  cudaStream_t s) {
  const size_t xBytes = static_cast<size_t>(n) * in * 2;
  const bool shared = xBytes <= static_cast<size_t>(kStreamSharedX);
  auto* kernel = shared ? gemvStreamKernel<kTok, true, kF32> : gemvStreamKernel<kTok, false, kF32>;
  const size_t smem = shared ? xBytes : 0;
  if (gStreamPdl)
    launchSmem(kernel, blocks, kStreamWarps * 32, smem, s, W, out, in, X, n, Y);
  else
    kernel<<<blocks, kStreamWarps * 32, smem, s>>>(W, out, in, X, n, Y);
}

template <int kTok>
bool prepareTok() {
  return cudaFuncSetAttribute(gemvStreamKernel<kTok, true, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              kStreamSharedX) == cudaSuccess &&
         cudaFuncSetAttribute(gemvStreamKernel<kTok, true, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              kStreamSharedX) == cudaSuccess;
}

}  // namespace

bool prepareGemvStream() {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&gStreamSms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    return false;
  // X up to kStreamSharedX in shared memory: past the default 48 KB. Setting the attribute loads
  // every form now, before any capture or collective.
  cudaFuncAttributes a;
  return prepareTok<1>() && prepareTok<4>() && prepareTok<kGemvStreamMaxTokens>() &&
         cudaFuncGetAttributes(&a, gemvStreamKernel<1, false, false>) == cudaSuccess &&
         cudaFuncGetAttributes(&a, gemvStreamKernel<1, false, true>) == cudaSuccess &&
         cudaFuncGetAttributes(&a, gemvStreamKernel<4, false, false>) == cudaSuccess &&
         cudaFuncGetAttributes(&a, gemvStreamKernel<4, false, true>) == cudaSuccess &&
         cudaFuncGetAttributes(&a, gemvStreamKernel<kGemvStreamMaxTokens, false, false>) == cudaSuccess &&
         cudaFuncGetAttributes(&a, gemvStreamKernel<kGemvStreamMaxTokens, false, true>) == cudaSuccess;
}

void setGemvStreamPdl(bool on) { gStreamPdl = on; }

bool gemvStreamSupported(const void* W, const void* X, int in) {
  return in > 0 && in % 8 == 0 && in <= kGemvStreamMaxIn && aligned16(W, X);
}

int gemvStreamBlocks(int out, int sms) {
  // As many rows for every warp as the full grid would give the busiest one, over as few warps
  // as that needs: no second round of rows for some warps only.
  const int maxWarps = sms * kStreamBlocksPerSm * kStreamWarps;
  const int rowsPerWarp = (out + maxWarps - 1) / maxWarps;
  const int warps = (out + rowsPerWarp - 1) / rowsPerWarp;
  return (warps + kStreamWarps - 1) / kStreamWarps;
}

bool gemvStream(const __nv_bfloat16* W, int out, int in, const __nv_bfloat16* X, int n, void* Y, bool yF32,
                cudaStream_t s) {
  if (gStreamSms <= 0 || out <= 0 || n < 1 || n > kGemvStreamMaxTokens || !gemvStreamSupported(W, X, in)) return false;
  const int blocks = gemvStreamBlocks(out, gStreamSms);
  if (n == 1)
    yF32 ? launchStream<1, true>(W, out, in, X, n, Y, blocks, s) : launchStream<1, false>(W, out, in, X, n, Y, blocks, s);
  else if (n <= 4)
    yF32 ? launchStream<4, true>(W, out, in, X, n, Y, blocks, s) : launchStream<4, false>(W, out, in, X, n, Y, blocks, s);
  else
    yF32 ? launchStream<kGemvStreamMaxTokens, true>(W, out, in, X, n, Y, blocks, s)
         : launchStream<kGemvStreamMaxTokens, false>(W, out, in, X, n, Y, blocks, s);
  return cudaPeekAtLastError() == cudaSuccess;
}

}  // namespace gpu
}  // namespace qwen
