// gemv_bench: the decode step's weight products alone, per layer shape and token count, through
// cuBLAS (cublasGemmEx, what GpuModel::gemm runs by default) and through gemvBf16 (--gemv
// custom), in GB/s of weight read against the device's copy rate (read + write, as the qwen_tp
// roofline counts it). Each timed graph runs the product over a ring of weight copies larger
// than L2, so every launch streams its weights from HBM as a decode step does.
//   gemv_bench [--preset qwen3-32b] [--tp 2] [--iters 20]
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "config.h"
#include "gpu_kernels.h"

namespace {

#define CK(call)                                                                           \
  do {                                                                                     \
    cudaError_t e_ = (call);                                                               \
    if (e_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "gemv_bench: %s: %s\n", #call, cudaGetErrorString(e_));         \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

struct Shape {
  const char* name;
  int out, in;
};

// Median over `iters` of one graph replay of `launches` products, per product in microseconds.
template <typename F>
double timeGraph(cudaStream_t s, int launches, int iters, F enqueue) {
  cudaGraph_t g;
  cudaGraphExec_t x;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < launches; ++i) enqueue(i);
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiate(&x, g, 0));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  CK(cudaGraphLaunch(x, s));
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    CK(cudaEventRecord(a, s));
    CK(cudaGraphLaunch(x, s));
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1e3 / launches);
  }
  std::sort(t.begin(), t.end());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaGraphExecDestroy(x);
  cudaGraphDestroy(g);
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string preset = "qwen3-32b";
  int tp = 2, iters = 20;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--preset" && i + 1 < argc) {
      preset = argv[++i];
    } else if (a == "--tp" && i + 1 < argc) {
      tp = std::atoi(argv[++i]);
    } else if (a == "--iters" && i + 1 < argc) {
      iters = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: gemv_bench [--preset NAME] [--tp N] [--iters N] (unknown argument '%s')\n", a.c_str());
      return 2;
    }
  }
  qwen::ModelConfig cfg;
  std::string err;
  if (!qwen::presetConfig(preset, &cfg, &err)) return std::fprintf(stderr, "gemv_bench: %s\n", err.c_str()), 2;
  if (tp < 1 || cfg.numKvHeads % tp || cfg.intermediateSize % tp || cfg.vocabSize % tp)
    return std::fprintf(stderr, "gemv_bench: --tp %d does not divide the preset's heads / intermediate / vocab\n", tp), 2;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return std::fprintf(stderr, "gemv_bench: no CUDA device\n"), 77;
  const int H = cfg.hiddenSize, D = cfg.headDim, hq = cfg.numHeads / tp, hk = cfg.numKvHeads / tp,
            I = cfg.intermediateSize / tp, V = cfg.vocabSize / tp;
  const Shape shapes[] = {{"qkv", (hq + 2 * hk) * D, H}, {"o", H, hq * D}, {"gate_up", 2 * I, H}, {"down", H, I},
                          {"lm_head", V, H}};
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cublasHandle_t cublas;
  if (cublasCreate(&cublas) != CUBLAS_STATUS_SUCCESS) return std::fprintf(stderr, "gemv_bench: cublasCreate failed\n"), 1;
  cublasSetStream(cublas, s);
  void* ws;
  CK(cudaMalloc(&ws, 32u << 20));
  cublasSetWorkspace(cublas, ws, 32u << 20);
  // Copy rate, as qwen_tp's roofline measures it: stream-ordered 1 GiB copies, not graph memcpy
  // nodes (those measured 2768 GB/s against 4265 for the same copies on 2x H200).
  double copyGBs = 0;
  {
    const size_t bytes = 1u << 30;
    void *a, *b;
    CK(cudaMalloc(&a, bytes));
    CK(cudaMalloc(&b, bytes));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s));
    CK(cudaEventRecord(e0, s));
    for (int i = 0; i < 10; ++i) CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s));
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    copyGBs = 2.0 * 10 * bytes / (ms * 1e6);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
  }
  const size_t pool = size_t(2) << 30;  // 2 GiB of weight copies: 40x the H200's L2
  __nv_bfloat16 *W, *X;
  float* Y;
  CK(cudaMalloc(&W, pool));
  CK(cudaMalloc(&X, size_t(8) * 32768 * 2));
  CK(cudaMalloc(&Y, size_t(8) * 200000 * 4));
  qwen::gpu::initSynthetic(W, 1, static_cast<int64_t>(pool / 2), static_cast<int64_t>(pool / 2), 0, 0, 1, 1, 0.02f, 0.f, s);
  qwen::gpu::initSynthetic(X, 1, 8 * 32768, 8 * 32768, 0, 0, 1, 2, 1.f, 0.f, s);
  CK(cudaStreamSynchronize(s));
  std::printf("# gemv_bench: %s TP=%d, bf16 weights, fp32 accumulation; device copy rate %.0f GB/s (read + write)\n",
              preset.c_str(), tp, copyGBs);
  std::printf("# %-8s %6s %6s %2s %10s %8s %7s %10s %8s %7s %8s\n", "shape", "out", "in", "n", "cublas_us", "GB/s",
              "%copy", "custom_us", "GB/s", "%copy", "max_rel");
  const int tokens[] = {1, 2, 4, 6, 8};
  for (const Shape& sh : shapes) {
    const size_t wBytes = size_t(sh.out) * sh.in * 2;
    const int copies = static_cast<int>(std::max<size_t>(1, pool / wBytes));
    const int launches = std::max(copies, 16);
    auto w = [&](int i) { return W + static_cast<size_t>(i % copies) * sh.out * sh.in; };
    for (int n : tokens) {
      const bool f32 = std::strcmp(sh.name, "lm_head") == 0;  // logits are fp32, as in the model
      const float alpha = 1.f, beta = 0.f;
      auto cublasOne = [&](int i) {
        cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, sh.out, n, sh.in, &alpha, w(i), CUDA_R_16BF, sh.in, X, CUDA_R_16BF,
                     sh.in, &beta, Y, f32 ? CUDA_R_32F : CUDA_R_16BF, sh.out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      };
      auto customOne = [&](int i) { qwen::gpu::gemvBf16(w(i), sh.out, sh.in, X, n, Y, f32, s); };
      const double tc = timeGraph(s, launches, iters, cublasOne);
      const double tg = timeGraph(s, launches, iters, customOne);
      // Agreement on copy 0: max |custom - cublas| / max |cublas| over the n x out outputs.
      const size_t outs = size_t(n) * sh.out;
      std::vector<float> yc(outs), yg(outs);
      auto fetch = [&](std::vector<float>* v) {
        if (f32) {
          CK(cudaMemcpy(v->data(), Y, outs * 4, cudaMemcpyDeviceToHost));
          return;
        }
        std::vector<__nv_bfloat16> h(outs);
        CK(cudaMemcpy(h.data(), Y, outs * 2, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < outs; ++i) (*v)[i] = __bfloat162float(h[i]);
      };
      cublasOne(0);
      CK(cudaStreamSynchronize(s));
      fetch(&yc);
      customOne(0);
      CK(cudaStreamSynchronize(s));
      fetch(&yg);
      double maxAbs = 0, maxDiff = 0;
      for (size_t i = 0; i < outs; ++i) {
        maxAbs = std::max(maxAbs, static_cast<double>(std::fabs(yc[i])));
        maxDiff = std::max(maxDiff, static_cast<double>(std::fabs(yc[i] - yg[i])));
      }
      const double gc = wBytes / (tc * 1e3), gg = wBytes / (tg * 1e3);
      std::printf("  %-8s %6d %6d %2d %10.2f %8.0f %7.1f %10.2f %8.0f %7.1f %8.1e\n", sh.name, sh.out, sh.in, n, tc, gc,
                  100 * gc / copyGBs, tg, gg, 100 * gg / copyGBs, maxAbs > 0 ? maxDiff / maxAbs : maxDiff);
    }
  }
  CK(cudaGetLastError());
  return 0;
}
