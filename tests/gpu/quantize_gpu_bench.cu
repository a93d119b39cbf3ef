// quantize_gpu_bench: the GPU quantize and read-back passes of the compressed all-reduce alone
// (algos/compressed/quantize_warp.cuh: 4 lanes per 64-element block, 8 blocks per warp, as
// twoshot_p2p_compressed.cu and staged_host_compressed.cu run them), on one GPU, device memory to
// device memory. Prints GB/s
// of message (count x element size / time; median of --reps launches timed with CUDA events) for
// quantize (message -> codes + scales) and dequantize (codes + scales -> message), fp8 and int8 x
// f32, f16, bf16, and checks that the GPU's codes, scales and read-back message are bitwise the
// host quantizers' (algos/compressed/quantize_host.h, themselves bitwise quantize.h's): a mismatch exits 1.
// Inputs: normal(0,1) with an outlier x100 every 97 elements (allreduce_perf --compression's),
// and that data's own read-back (quantized and read back once on the host: on the format's grid,
// with exact zeros inside blocks, as an in-place compressed all-reduce meets its previous
// output). In place, staged_host+int8 can be slower than out of place where fp8 is not; the
// two rows per format say whether the quantizer alone does that.
// Internal (not the public API), so it lives beside the GPU tests. Not a test: run by hand,
//   build/tests/gpu/quantize_gpu_bench [--count N] [--reps N]   (default 64M elements, 20 reps)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "algos/host/host_reduce.h"
#include "algos/compressed/quantize.h"
#include "algos/compressed/quantize_host.h"
#include "unit/count_reps_args.h"
#include "algos/compressed/quantize_warp.cuh"

namespace {

using namespace tpcomm;
constexpr int kB = kQuantBlockElems;

#define CHECK_CUDA(call)                                                                          \
  do {                                                                                            \
    cudaError_t e_ = (call);                                                                      \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(2);                                                                               \
    }                                                                                             \
  } while (0)

// quantizeGroup with a quantEncode that divides zeros too (x / scale even for x = 0), for
// timing only: the "divide zeros" column shows what the zero guard saves on each input.
template <int F>
__device__ __forceinline__ dev::Codes quantizeGroupDividingZeros(const float (&x)[dev::kPerLane]) {
  constexpr QuantFormat f = static_cast<QuantFormat>(F);
  dev::Codes c;
  c.scale = quantScale(f, dev::groupAmax(x));
#pragma unroll
  for (int w = 0; w < dev::kPerLane / 4; ++w) c.w[w] = 0;
#pragma unroll
  for (int u = 0; u < dev::kPerLane; ++u) {
    uint8_t code = 0;
    if (c.scale > 0.0f) {
      const float v = x[u] / c.scale;
      code = f == QuantFormat::kFp8E4m3 ? fp8E4m3Encode(v) : static_cast<uint8_t>(int8Encode(v));
    }
    c.w[u / 4] |= static_cast<uint32_t>(code) << (8 * (u % 4));
  }
  return c;
}

// kDivideZeros: the pre-session-9 encoding above instead of dev::quantizeGroup (the library's).
template <typename T, int F, bool kDivideZeros = false>
__global__ void __launch_bounds__(kThreads) quantizeKernel(const T* x, size_t count, dev::Wire w) {
  const int warps = static_cast<int>(gridDim.x) * (kThreads / 32);
  const int warp = static_cast<int>(blockIdx.x) * (kThreads / 32) + static_cast<int>(threadIdx.x / 32);
  dev::forWarpBlocks(0, count, warp, warps, [&](size_t k, int m) {
    float v[dev::kPerLane];
    dev::loadBlock(x + k, m, v);
    dev::storeCodes(kDivideZeros ? quantizeGroupDividingZeros<F>(v) : dev::quantizeGroup<F>(v), m, w, k, k / kB);
  });
}

template <typename T, int F>
__global__ void __launch_bounds__(kThreads) dequantizeKernel(dev::Wire w, size_t count, T* out) {
  const int warps = static_cast<int>(gridDim.x) * (kThreads / 32);
  const int warp = static_cast<int>(blockIdx.x) * (kThreads / 32) + static_cast<int>(threadIdx.x / 32);
  dev::forWarpBlocks(0, count, warp, warps, [&](size_t k, int m) {
    float v[dev::kPerLane];
    dev::readBack<F, false>(w, k, k / kB, m, v);
    dev::storeBlock(out + k, m, v);
  });
}

template <typename Launch>
double medianGBps(size_t bytes, int reps, Launch launch) {
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  launch();  // warm-up
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<double> gbps;
  for (int i = 0; i < reps; ++i) {
    CHECK_CUDA(cudaEventRecord(a));
    launch();
    CHECK_CUDA(cudaEventRecord(b));
    CHECK_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
    gbps.push_back(static_cast<double>(bytes) / (ms * 1e6));
  }
  CHECK_CUDA(cudaEventDestroy(a));
  CHECK_CUDA(cudaEventDestroy(b));
  std::sort(gbps.begin(), gbps.end());
  return gbps[gbps.size() / 2];
}

template <typename T, int F>
bool runOne(DataType dt, size_t count, int reps, int grid, bool readback) {
  const QuantFormat f = static_cast<QuantFormat>(F);
  const size_t es = sizeof(T), bytes = count * es, blocks = (count + kB - 1) / kB;
  std::vector<char> host(bytes);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (size_t i = 0; i < count; ++i) storeFromFloat(host.data(), i, dt, normal(rng) * (i % 97 == 0 ? 100.0f : 1.0f));
  size_t zeros = 0;
  if (readback) {  // the data as one quantize + read-back leaves it
    std::vector<uint8_t> c(count);
    std::vector<float> sc(blocks);
    hostQuantize(f, host.data(), dt, count, c.data(), sc.data());
    hostDequantize(f, c.data(), sc.data(), count, host.data(), dt);
    for (size_t i = 0; i < count; ++i) zeros += loadAsFloat(host.data(), i, dt) == 0.0f;
  }
  T *x = nullptr, *out = nullptr;
  uint8_t* codes = nullptr;
  float* scales = nullptr;
  CHECK_CUDA(cudaMalloc(&x, bytes));
  CHECK_CUDA(cudaMalloc(&out, bytes));
  CHECK_CUDA(cudaMalloc(&codes, count));
  CHECK_CUDA(cudaMalloc(&scales, blocks * sizeof(float)));
  CHECK_CUDA(cudaMemcpy(x, host.data(), bytes, cudaMemcpyHostToDevice));
  const dev::Wire w{codes, scales};
  const double q0 = medianGBps(bytes, reps, [&] { quantizeKernel<T, F, true><<<grid, kThreads>>>(x, count, w); });
  const double q = medianGBps(bytes, reps, [&] { quantizeKernel<T, F><<<grid, kThreads>>>(x, count, w); });
  const double d = medianGBps(bytes, reps, [&] { dequantizeKernel<T, F><<<grid, kThreads>>>(w, count, out); });
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaDeviceSynchronize());
  // Bitwise against the host quantizers.
  std::vector<uint8_t> gotCodes(count), wantCodes(count);
  std::vector<float> gotScales(blocks), wantScales(blocks);
  std::vector<char> gotOut(bytes), wantOut(bytes);
  CHECK_CUDA(cudaMemcpy(gotCodes.data(), codes, count, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(gotScales.data(), scales, blocks * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(gotOut.data(), out, bytes, cudaMemcpyDeviceToHost));
  hostQuantize(f, host.data(), dt, count, wantCodes.data(), wantScales.data());
  hostDequantize(f, wantCodes.data(), wantScales.data(), count, wantOut.data(), dt);
  const bool same =
      gotCodes == wantCodes && std::memcmp(gotScales.data(), wantScales.data(), blocks * 4) == 0 && gotOut == wantOut;
  std::printf("  %-5s %-5s %-9s %6.2f%% %12.1f %14.1f %14.1f  %s\n", F == 0 ? "fp8" : "int8",
              dt == DataType::kF32   ? "f32"
              : dt == DataType::kF16 ? "f16"
                                     : "bf16",
              readback ? "read-back" : "normal", 100.0 * zeros / count, q, q0, d, same ? "bitwise = host" : "MISMATCH vs host");
  CHECK_CUDA(cudaFree(x));
  CHECK_CUDA(cudaFree(out));
  CHECK_CUDA(cudaFree(codes));
  CHECK_CUDA(cudaFree(scales));
  return same;
}

}  // namespace

int main(int argc, char** argv) {
  size_t count = size_t{64} << 20;
  int reps = 20;
  if (!test::parseCountReps(argc, argv, &count, &reps)) return 2;
  int dev = 0, sms = 0;
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDevice(&dev));
  CHECK_CUDA(cudaGetDeviceProperties(&prop, dev));
  CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const int grid = 4 * sms;  // 4 blocks of 512 threads per SM: 64 warps resident, grid-stride loops
  std::printf("# quantize_gpu_bench: %s, %zu elements, median of %d launches (CUDA events), grid %d x %d\n", prop.name,
              count, reps, grid, kThreads);
  std::printf("# GB/s of message (count x dtype bytes / time); device memory both ways\n");
  std::printf("# %-5s %-5s %-9s %7s %12s %14s %14s  %s\n", "fmt", "dtype", "input", "zeros", "quantize", "divide zeros",
              "dequantize", "check");
  bool ok = true;
  for (bool readback : {false, true}) {
    ok &= runOne<float, 0>(DataType::kF32, count, reps, grid, readback);
    ok &= runOne<__half, 0>(DataType::kF16, count, reps, grid, readback);
    ok &= runOne<__nv_bfloat16, 0>(DataType::kBF16, count, reps, grid, readback);
    ok &= runOne<float, 1>(DataType::kF32, count, reps, grid, readback);
    ok &= runOne<__half, 1>(DataType::kF16, count, reps, grid, readback);
    ok &= runOne<__nv_bfloat16, 1>(DataType::kBF16, count, reps, grid, readback);
  }
  return ok ? 0 : 1;
}
