// gemv_bench: the decode step's weight products alone, per layer shape and token count: cuBLAS
// (cublasGemmEx, what GpuModel::gemm runs by default) against the small-n GEMV (gemv.cuh) and the
// plain stream of W (gemv_stream.cu, "stream": --gemv stream, n <= 8), then
// the fused decode step's four products (norm + qkv, norm + gate/up + SwiGLU, o_proj + residual,
// down + residual); in GB/s of weight read against the device's copy rate (read + write, as the
// qwen_tp roofline counts it). Each timed graph runs the product over a ring of weight copies
// larger than L2, so every launch streams its weights from HBM as a decode step does; launches
// follow each other in the graph (with PDL unless --no-pdl), as in the step; the stream is
// launched without PDL as the model launches it, unless --stream-pdl. "cub n-bits": whether
// cuBLAS gives token 0 the same bits at this n as at n = 1 (the first --tokens entry must be 1).
// --lt-tokens N[,N]: then, per layer product and token count (decode's 1..16, a prefill chunk's
// rows), every algorithm cuBLASLt's heuristics offer (up to 16, 32 MB of workspace) timed the
// same way against cublasGemmEx's choice: whether picking by measurement beats the heuristic
// (split-K and its reduction kernel, tile shapes), before GpuModel::gemm is made to do it.
//   gemv_bench [--preset qwen3-8b,qwen3-32b] [--tp 1] [--tokens 1,4,8] [--iters 20] [--no-pdl] [--stream-pdl]
//              [--lt-tokens 1,2048] [--ring-mb 2048] [--argmax-only] [--stream-slots 1|2]
// --stream-slots 1: the stream's grids on one block a multiprocessor (QWEN_STREAM_SLOTS=1), each
// product's rate with half the resident warps.
// --ring-mb MB: the ring of weight copies of the first two tables (default 2048); under the L2's
// size a matrix that fits it is read from L2 after the first launch (the products' time with
// their weights in L2, against HBM). Last, the greedy argmax over the vocabulary's logits: its
// float-at-a-time loop (QWEN_ARGMAX=loop) against its 16-byte loads (--argmax-only: that alone).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "config.h"
#include "gpu_kernels.h"
#include "lt_gemm.h"

namespace {

#define CK(call)                                                                   \
  do {                                                                             \
    cudaError_t e_ = (call);                                                       \
    if (e_ != cudaSuccess) {                                                       \
      std::fprintf(stderr, "gemv_bench: %s: %s\n", #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                \
    }                                                                              \
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
  CK(cudaGetLastError());
  std::sort(t.begin(), t.end());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaGraphExecDestroy(x);
  cudaGraphDestroy(g);
  return t[t.size() / 2];
}

// The device copy rate as qwen_tp's roofline measures it: stream-ordered 1 GiB copies, not graph
// memcpy nodes (those measured 2768 GB/s against 4265 for the same copies on 2x H200).
double copyRate(cudaStream_t s) {
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
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(a);
  cudaFree(b);
  return 2.0 * 10 * bytes / (ms * 1e6);
}

// Y [n, out] as floats (fp32, or bf16 widened).
std::vector<float> fetchY(const void* Y, size_t count, bool f32) {
  std::vector<float> v(count);
  if (f32) {
    CK(cudaMemcpy(v.data(), Y, count * 4, cudaMemcpyDeviceToHost));
    return v;
  }
  std::vector<__nv_bfloat16> h(count);
  CK(cudaMemcpy(h.data(), Y, count * 2, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < count; ++i) v[i] = __bfloat162float(h[i]);
  return v;
}

// max |a - b| / max |b|.
double relDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double mx = 0, d = 0;
  for (size_t i = 0; i < a.size(); ++i)
    mx = std::max(mx, static_cast<double>(std::fabs(b[i]))),
    d = std::max(d, static_cast<double>(std::fabs(a[i] - b[i])));
  return mx > 0 ? d / mx : d;
}

using qwen::LtProblem;
using qwen::ltAlgoName;
using qwen::ltProblem;

// The --lt-tokens table, per layer product and n (the lm_head only for n <= 16: prefill runs it
// for one row): cublasGemmEx's time, then each cuBLASLt algorithm's (the heuristic's order, the
// fastest marked), in us, GB/s of weights and TFLOP/s, and its outputs' largest difference from
// cublasGemmEx's relative to their largest magnitude.
void ltSection(const std::string& preset, const qwen::ModelConfig& cfg, int tp, const std::vector<int>& tokens,
               int iters, double copyGBs, cublasHandle_t cublas, void* ws, __nv_bfloat16* W, size_t pool,
               cudaStream_t s) {
  cublasLtHandle_t lt = nullptr;
  if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) {
    std::printf("\n## %s: cublasLtCreate failed\n", preset.c_str());
    return;
  }
  const size_t wsBytes = 32u << 20;
  const int H = cfg.hiddenSize, D = cfg.headDim, hq = cfg.numHeads / tp, hk = cfg.numKvHeads / tp,
            I = cfg.intermediateSize / tp, V = cfg.vocabSize / tp;
  const Shape shapes[] = {
      {"qkv", (hq + 2 * hk) * D, H}, {"o", H, hq * D}, {"gate_up", 2 * I, H}, {"down", H, I}, {"lm_head", V, H}};
  const int nMax = *std::max_element(tokens.begin(), tokens.end());
  size_t xElems = 0, yBytes = size_t(16) * V * 4;
  for (const Shape& sh : shapes) {
    xElems = std::max(xElems, size_t(nMax) * sh.in);
    if (std::strcmp(sh.name, "lm_head") != 0) yBytes = std::max(yBytes, size_t(nMax) * sh.out * 2);
  }
  __nv_bfloat16* X = nullptr;
  void* Y = nullptr;
  CK(cudaMalloc(&X, xElems * 2));
  CK(cudaMalloc(&Y, yBytes));
  qwen::gpu::initSynthetic(X, 1, static_cast<int64_t>(xElems), static_cast<int64_t>(xElems), 0, 0, 1, 5, 1.f, 0.f, s);
  CK(cudaStreamSynchronize(s));
  std::printf("\n## %s: cuBLASLt's algorithms against cublasGemmEx (us per launch, GB/s of weights, TFLOP/s)\n",
              preset.c_str());
  std::printf("%-8s %6s %6s %5s | %-40s | %9s %6s %5s %7s | %8s\n", "shape", "out", "in", "n", "algorithm", "us", "GB/s",
              "%", "TFLOP/s", "vs Ex");
  for (const Shape& sh : shapes) {
    const bool f32 = std::strcmp(sh.name, "lm_head") == 0;
    const size_t wBytes = size_t(sh.out) * sh.in * 2;
    const int copies = static_cast<int>(std::max<size_t>(1, pool / wBytes));
    auto w = [&](int i) { return W + static_cast<size_t>(i % copies) * sh.out * sh.in; };
    for (int n : tokens) {
      if (f32 && n > 16) continue;
      const int launches = n > 16 ? 8 : std::max(copies, 16);
      const float alpha = 1.f, beta = 0.f;
      auto line = [&](const std::string& name, double us, double diff, bool best) {
        const double gbs = wBytes / (us * 1e3), tflops = 2.0 * sh.out * sh.in * n / (us * 1e6);
        std::printf("%-8s %6d %6d %5d | %-40s | %9.2f %6.0f %5.1f %7.1f | %8.1e%s\n", sh.name, sh.out, sh.in, n,
                    name.c_str(), us, gbs, 100 * gbs / copyGBs, tflops, diff, best ? "  <- fastest" : "");
      };
      auto exOne = [&](int i) {
        cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, sh.out, n, sh.in, &alpha, w(i), CUDA_R_16BF, sh.in, X, CUDA_R_16BF,
                     sh.in, &beta, Y, f32 ? CUDA_R_32F : CUDA_R_16BF, sh.out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      };
      const double exUs = timeGraph(s, launches, iters, exOne);
      exOne(0);
      CK(cudaStreamSynchronize(s));
      const std::vector<float> y0 = fetchY(Y, size_t(n) * sh.out, f32);
      LtProblem p;
      if (!ltProblem(lt, sh.out, sh.in, n, f32, wsBytes, 16, &p)) {
        line("cublasGemmEx (cuBLASLt heuristics failed)", exUs, 0.0, false);
        continue;
      }
      std::vector<double> us(p.algos.size(), 0.0), diff(p.algos.size(), 0.0);
      for (size_t k = 0; k < p.algos.size(); ++k) {
        const cublasLtMatmulAlgo_t* algo = &p.algos[k].algo;
        auto ltOne = [&](int i) {
          return cublasLtMatmul(lt, p.op, &alpha, w(i), p.a, X, p.b, &beta, Y, p.c, Y, p.c, algo, ws, wsBytes, s);
        };
        if (ltOne(0) != CUBLAS_STATUS_SUCCESS || cudaStreamSynchronize(s) != cudaSuccess) continue;  // us stays 0
        diff[k] = relDiff(fetchY(Y, size_t(n) * sh.out, f32), y0);
        us[k] = timeGraph(s, launches, iters, ltOne);
      }
      size_t best = us.size();
      for (size_t k = 0; k < us.size(); ++k)
        if (us[k] > 0 && (best == us.size() || us[k] < us[best])) best = k;
      line("cublasGemmEx (CUBLAS_GEMM_DEFAULT)", exUs, 0.0, best == us.size() || exUs <= us[best]);
      for (size_t k = 0; k < us.size(); ++k)
        if (us[k] > 0)
          line("lt " + std::to_string(k) + ": " + ltAlgoName(p.algos[k].algo), us[k], diff[k],
               k == best && us[k] < exUs);
        else
          std::printf("%-8s %6d %6d %5d | lt %zu: %s failed\n", sh.name, sh.out, sh.in, n, k,
                      ltAlgoName(p.algos[k].algo).c_str());
    }
  }
  cudaFree(X);
  cudaFree(Y);
  cublasLtDestroy(lt);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');) v.push_back(x);
  return v;
}

}  // namespace

// The greedy argmax over a step's logits (its last kernel; kernels/sampling.cu): the float-at-a-
// time loop (QWEN_ARGMAX=loop) against the 16-byte loads, without and with the top probability,
// for 1 and 4 rows of V logits. The same rows every launch, so they sit in L2, as the lm_head
// leaves them for the argmax in a step.
void argmaxSection(int V, int iters, float* logits, cudaStream_t s) {
  if (V <= 0) return;
  std::vector<float> h(size_t(V) * 4);
  uint64_t st = 99;
  for (float& x : h) {
    st = st * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<float>((st >> 40) & 0xffff) / 4096.f - 8.f;
  }
  CK(cudaMemcpy(logits, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
  float *table, *prob;
  int32_t* tok;
  CK(cudaMalloc(&table, 4 * qwen::gpu::kArgmaxEntry * sizeof(float)));
  CK(cudaMalloc(&prob, 4 * sizeof(float)));
  CK(cudaMalloc(&tok, 4 * sizeof(int32_t)));
  std::printf("\n## the greedy argmax (argmaxPick) over %d fp32 logits a row, us per launch, the rows in L2\n", V);
  std::printf("%-36s %2s | %8s\n", "form", "n", "us");
  for (bool loop : {true, false})
    for (bool withProb : {false, true})
      for (int n : {1, 4}) {
        qwen::gpu::setArgmaxLoop(loop);
        const double us = timeGraph(s, 16, iters, [&](int) {
          qwen::gpu::argmaxPick(logits, n, V, table, tok, withProb ? prob : nullptr, s);
        });
        std::printf("%-36s %2d | %8.2f\n",
                    loop ? (withProb ? "loop (QWEN_ARGMAX=loop), probability" : "loop (QWEN_ARGMAX=loop)")
                         : (withProb ? "16-byte loads, probability" : "16-byte loads"),
                    n, us);
      }
  qwen::gpu::setArgmaxLoop(false);
  cudaFree(table);
  cudaFree(prob);
  cudaFree(tok);
}

int main(int argc, char** argv) {
  std::string presets = "qwen3-8b,qwen3-32b", tokenList = "1,4,8", ltTokenList;
  int tp = 1, iters = 20;
  size_t ring = size_t(2) << 30;  // bytes of weight copies the launches cycle through
  bool pdl = true, streamPdl = false, argmaxOnly = false;
  int streamSlots = 2;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--preset" && i + 1 < argc) {
      presets = argv[++i];
    } else if (a == "--tp" && i + 1 < argc) {
      tp = std::atoi(argv[++i]);
    } else if (a == "--iters" && i + 1 < argc) {
      iters = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--tokens" && i + 1 < argc) {
      tokenList = argv[++i];
    } else if (a == "--no-pdl") {
      pdl = false;
    } else if (a == "--stream-pdl") {
      streamPdl = true;
    } else if (a == "--argmax-only") {
      argmaxOnly = true;
    } else if (a == "--stream-slots" && i + 1 < argc) {
      streamSlots = std::atoi(argv[++i]);
      if (streamSlots != 1 && streamSlots != 2)
        return std::fprintf(stderr, "gemv_bench: --stream-slots %s: expected 1 or 2\n", argv[i]), 2;
    } else if (a == "--lt-tokens" && i + 1 < argc) {
      ltTokenList = argv[++i];
    } else if (a == "--ring-mb" && i + 1 < argc) {
      const long mb = std::atol(argv[++i]);
      if (mb < 1 || mb > 2048) return std::fprintf(stderr, "gemv_bench: --ring-mb %ld: expected 1..2048\n", mb), 2;
      ring = static_cast<size_t>(mb) << 20;
    } else {
      std::fprintf(stderr,
                   "usage: gemv_bench [--preset NAME[,NAME]] [--tp N] [--tokens 1,4,8] [--iters N] [--no-pdl] [--stream-pdl] "
                   "[--lt-tokens 1,2048] [--ring-mb MB] [--argmax-only] [--stream-slots 1|2] (unknown argument '%s')\n",
                   a.c_str());
      return 2;
    }
  }
  std::vector<int> tokens;
  for (const std::string& t : split(tokenList)) {
    const int n = std::atoi(t.c_str());
    if (n < 1 || n > qwen::gpu::kGemvMaxTokens)
      return std::fprintf(stderr, "gemv_bench: --tokens: %s is outside 1..%d\n", t.c_str(), qwen::gpu::kGemvMaxTokens),
             2;
    tokens.push_back(n);
  }
  std::vector<int> ltTokens;
  for (const std::string& t : split(ltTokenList)) {
    const int n = std::atoi(t.c_str());
    if (n < 1 || n > 8192)
      return std::fprintf(stderr, "gemv_bench: --lt-tokens: %s is outside 1..8192\n", t.c_str()), 2;
    ltTokens.push_back(n);
  }
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return std::fprintf(stderr, "gemv_bench: no CUDA device\n"), 77;
  qwen::gpu::setPdl(pdl);
  qwen::gpu::setGemvStreamPdl(streamPdl);
  qwen::gpu::setGemvStreamSlots(streamSlots);
  if (!qwen::gpu::prepareGemv()) return std::fprintf(stderr, "gemv_bench: prepareGemv failed\n"), 1;
  if (!qwen::gpu::prepareGemvStream()) return std::fprintf(stderr, "gemv_bench: prepareGemvStream failed\n"), 1;
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cublasHandle_t cublas;
  if (cublasCreate(&cublas) != CUBLAS_STATUS_SUCCESS)
    return std::fprintf(stderr, "gemv_bench: cublasCreate failed\n"), 1;
  cublasSetStream(cublas, s);
  void* ws;
  CK(cudaMalloc(&ws, 32u << 20));
  cublasSetWorkspace(cublas, ws, 32u << 20);
  const double copyGBs = copyRate(s);
  const size_t pool = size_t(2) << 30;  // 2 GiB of weight copies: 40x the H200's L2
  const int maxIn = 32768, maxOut = 200000;
  __nv_bfloat16 *W, *X, *normW;
  void *Y, *R;
  CK(cudaMalloc(&W, pool));
  CK(cudaMalloc(&X, size_t(qwen::gpu::kGemvFusedMaxTokens) * maxIn * 2));
  CK(cudaMalloc(&normW, size_t(maxIn) * 2));
  CK(cudaMalloc(&Y, size_t(qwen::gpu::kGemvFusedMaxTokens) * maxOut * 4));
  CK(cudaMalloc(&R, size_t(qwen::gpu::kGemvFusedMaxTokens) * maxOut * 2));
  qwen::gpu::initSynthetic(W, 1, static_cast<int64_t>(pool / 2), static_cast<int64_t>(pool / 2), 0, 0, 1, 1, 0.02f, 0.f,
                           s);
  qwen::gpu::initSynthetic(X, 1, int64_t(16) * maxIn, int64_t(16) * maxIn, 0, 0, 1, 2, 1.f, 0.f, s);
  qwen::gpu::initSynthetic(normW, 1, maxIn, maxIn, 0, 0, 1, 3, 0.5f, 1.f, s);
  qwen::gpu::initSynthetic(reinterpret_cast<__nv_bfloat16*>(R), 1, int64_t(16) * maxOut, int64_t(16) * maxOut, 0, 0, 1,
                           4, 1.f, 0.f, s);
  CK(cudaStreamSynchronize(s));
  std::printf(
      "# gemv_bench: TP=%d, bf16 weights, fp32 accumulation, PDL %s (the stream: %s); device copy rate %.0f GB/s "
      "(read + write); launches cycle through %zu MB of weight copies\n",
      tp, pdl ? "on" : "off", pdl && streamPdl ? "on" : "off", copyGBs, ring >> 20);
  int vocab = 0;  // the last preset's, for the argmax table
  for (const std::string& preset : split(presets)) {
    qwen::ModelConfig cfg;
    std::string err;
    if (!qwen::presetConfig(preset, &cfg, &err)) return std::fprintf(stderr, "gemv_bench: %s\n", err.c_str()), 2;
    if (tp < 1 || cfg.numKvHeads % tp || cfg.intermediateSize % tp || cfg.vocabSize % tp)
      return std::fprintf(stderr, "gemv_bench: --tp %d does not divide %s's heads / intermediate / vocab\n", tp,
                          preset.c_str()),
             2;
    const int H = cfg.hiddenSize, D = cfg.headDim, hq = cfg.numHeads / tp, hk = cfg.numKvHeads / tp,
              I = cfg.intermediateSize / tp, V = cfg.vocabSize / tp;
    vocab = V;
    if (argmaxOnly) continue;
    const Shape shapes[] = {
        {"qkv", (hq + 2 * hk) * D, H}, {"o", H, hq * D}, {"gate_up", 2 * I, H}, {"down", H, I}, {"lm_head", V, H}};
    std::printf("\n## %s: weight products, us per launch and GB/s of weights (%% of the copy rate)\n", preset.c_str());
    std::printf("%-8s %6s %6s %2s | %8s %6s %5s | %10s | %8s %6s %5s | %8s | %8s | %8s %6s %5s | %8s\n", "shape",
                "out", "in", "n", "cublas", "GB/s", "%", "cub n-bits", "gemv", "GB/s", "%", "cub/gemv", "gemv~cub",
                "stream", "GB/s", "%", "str~cub");
    for (const Shape& sh : shapes) {
      const size_t wBytes = size_t(sh.out) * sh.in * 2;
      const int copies = static_cast<int>(std::max<size_t>(1, ring / wBytes));
      const int launches = std::max(copies, 16);
      auto w = [&](int i) { return W + static_cast<size_t>(i % copies) * sh.out * sh.in; };
      const bool f32 = std::strcmp(sh.name, "lm_head") == 0;  // logits are fp32, as in the model
      std::vector<float> cublasOneToken;                       // n = 1's outputs
      for (int n : tokens) {
        const float alpha = 1.f, beta = 0.f;
        auto cublasOne = [&](int i) {
          cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, sh.out, n, sh.in, &alpha, w(i), CUDA_R_16BF, sh.in, X,
                       CUDA_R_16BF, sh.in, &beta, Y, f32 ? CUDA_R_32F : CUDA_R_16BF, sh.out, CUBLAS_COMPUTE_32F,
                       CUBLAS_GEMM_DEFAULT);
        };
        auto customOne = [&](int i) { qwen::gpu::gemvBf16(w(i), sh.out, sh.in, X, n, Y, f32, s); };
        auto streamOne = [&](int i) { qwen::gpu::gemvStream(w(i), sh.out, sh.in, X, n, Y, f32, s); };
        double us[3] = {0, 0, 0};
        std::vector<float> y[3];  // copy 0's outputs: cuBLAS, the custom GEMV, the stream
        auto measure = [&](auto one, int k) {
          us[k] = timeGraph(s, launches, iters, one);
          one(0);
          CK(cudaStreamSynchronize(s));
          y[k] = fetchY(Y, size_t(n) * sh.out, f32);
        };
        measure(cublasOne, 0);
        measure(customOne, 1);
        const bool stream = n <= qwen::gpu::kGemvStreamMaxTokens && qwen::gpu::gemvStreamSupported(W, X, sh.in);
        if (stream) measure(streamOne, 2);
        auto gbs = [&](double t) { return wBytes / (t * 1e3); };
        if (n == 1) cublasOneToken = y[0];
        const char* nBits = n == 1 || cublasOneToken.empty() ? "-"
                            : std::memcmp(cublasOneToken.data(), y[0].data(), sh.out * sizeof(float)) == 0 ? "same"
                                                                                                         : "differ";
        std::printf("%-8s %6d %6d %2d | %8.2f %6.0f %5.1f | %10s | %8.2f %6.0f %5.1f | %8.3f | %8.1e", sh.name, sh.out,
                    sh.in, n, us[0], gbs(us[0]), 100 * gbs(us[0]) / copyGBs, nBits, us[1], gbs(us[1]),
                    100 * gbs(us[1]) / copyGBs, us[0] / us[1], relDiff(y[1], y[0]));
        if (stream)
          std::printf(" | %8.2f %6.0f %5.1f | %8.1e", us[2], gbs(us[2]), 100 * gbs(us[2]) / copyGBs,
                      relDiff(y[2], y[0]));
        std::printf("\n");
      }
    }
    // The fused step's products (GpuModelOptions::decode = fused, tp = 1 shapes).
    std::printf("\n## %s: the fused decode step's products, us per launch and GB/s of weights\n", preset.c_str());
    std::printf("%-20s %6s %6s %2s | %8s %6s %5s\n", "product", "out", "in", "n", "us", "GB/s", "%");
    struct Fused {
      const char* name;
      int rows, in, form;  // rows of W; form 0 norm, 1 norm + SwiGLU, 2 residual
    };
    const Fused fused[] = {{"norm + qkv", (hq + 2 * hk) * D, H, 0},
                           {"norm + gate/up + act", 2 * I, H, 1},
                           {"o_proj + residual", H, hq * D, 2},
                           {"down + residual", H, I, 2}};
    for (const Fused& f : fused) {
      const size_t wBytes = size_t(f.rows) * f.in * 2;
      const int copies = static_cast<int>(std::max<size_t>(1, ring / wBytes));
      const int launches = std::max(copies, 16);
      auto w = [&](int i) { return W + static_cast<size_t>(i % copies) * f.rows * f.in; };
      for (int n : tokens) {
        auto one = [&](int i) {
          __nv_bfloat16* y = static_cast<__nv_bfloat16*>(Y);
          if (f.form == 0) qwen::gpu::gemvNormBf16(w(i), f.rows, f.in, X, n, normW, 1e-6f, y, s);
          if (f.form == 1) qwen::gpu::gemvNormSwiglu(w(i), f.rows / 2, f.in, X, n, normW, 1e-6f, y, s);
          if (f.form == 2) qwen::gpu::gemvResidual(w(i), f.rows, f.in, X, n, static_cast<__nv_bfloat16*>(R), s);
        };
        const double us = timeGraph(s, launches, iters, one), gbs = wBytes / (us * 1e3);
        std::printf("%-20s %6d %6d %2d | %8.2f %6.0f %5.1f\n", f.name, f.rows, f.in, n, us, gbs, 100 * gbs / copyGBs);
      }
    }
    if (!ltTokens.empty()) ltSection(preset, cfg, tp, ltTokens, iters, copyGBs, cublas, ws, W, pool, s);
  }
  argmaxSection(vocab, iters, static_cast<float*>(Y), s);
  CK(cudaGetLastError());
  return 0;
}
