#include "lt_gemm.h"

#include <algorithm>
#include <cstdio>
#include <functional>

namespace qwen {

LtProblem::~LtProblem() {
  if (op) cublasLtMatmulDescDestroy(op);
  if (a) cublasLtMatrixLayoutDestroy(a);
  if (b) cublasLtMatrixLayoutDestroy(b);
  if (c) cublasLtMatrixLayoutDestroy(c);
}

bool ltProblem(cublasLtHandle_t lt, int out, int in, int n, bool f32, size_t wsBytes, int want, LtProblem* p) {
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  if (cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, in, out, in) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, in, n, in) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatrixLayoutCreate(&p->c, f32 ? CUDA_R_32F : CUDA_R_16BF, out, n, out) != CUBLAS_STATUS_SUCCESS)
    return false;
  cublasLtMatmulPreference_t pref = nullptr;
  if (cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS) return false;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsBytes, sizeof(wsBytes));
  std::vector<cublasLtMatmulHeuristicResult_t> r(static_cast<size_t>(want));
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, p->op, p->a, p->b, p->c, p->c, pref, want, r.data(), &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS) return false;
  for (int i = 0; i < found; ++i)
    if (r[static_cast<size_t>(i)].state == CUBLAS_STATUS_SUCCESS) p->algos.push_back(r[static_cast<size_t>(i)]);
  return true;
}

std::string ltAlgoName(const cublasLtMatmulAlgo_t& algo) {
  int id = 0, tile = 0, splitK = 0, red = 0;
  size_t got = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &got);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile), &got);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitK, sizeof(splitK), &got);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red, sizeof(red), &got);
  return "id " + std::to_string(id) + " tile " + std::to_string(tile) + " splitK " + std::to_string(splitK) +
         " red " + std::to_string(red);
}

namespace {

// The fastest of `reps` replays of a graph of `launches` enqueues, us a launch; 0 when an enqueue
// or a CUDA call failed (the stream is left out of capture and idle either way).
double timeInGraph(cudaStream_t s, int launches, const std::function<bool(int)>& enqueue) {
  constexpr int kReps = 3;
  cudaGraph_t g = nullptr;
  cudaGraphExec_t x = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  double best = 0;
  if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  bool ok = true;
  for (int i = 0; i < launches && ok; ++i) ok = enqueue(i);
  ok = cudaStreamEndCapture(s, &g) == cudaSuccess && ok;
  ok = ok && cudaGraphInstantiate(&x, g, 0) == cudaSuccess && cudaEventCreate(&e0) == cudaSuccess &&
       cudaEventCreate(&e1) == cudaSuccess && cudaGraphLaunch(x, s) == cudaSuccess;  // the first replay warms
  for (int r = 0; r < kReps && ok; ++r) {
    float ms = 0;
    ok = cudaEventRecord(e0, s) == cudaSuccess && cudaGraphLaunch(x, s) == cudaSuccess &&
         cudaEventRecord(e1, s) == cudaSuccess && cudaEventSynchronize(e1) == cudaSuccess &&
         cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess;
    const double us = ms * 1e3 / launches;
    if (ok && (best == 0 || us < best)) best = us;
  }
  cudaStreamSynchronize(s);
  if (e0) cudaEventDestroy(e0);
  if (e1) cudaEventDestroy(e1);
  if (x) cudaGraphExecDestroy(x);
  if (g) cudaGraphDestroy(g);
  cudaGetLastError();
  return ok ? best : 0;
}

}  // namespace

LtGemms::~LtGemms() {
  plans_.clear();
  if (lt_) cublasLtDestroy(lt_);
}

bool LtGemms::init(void* ws, size_t wsBytes, std::string* error) {
  ws_ = ws;
  wsBytes_ = wsBytes;
  if (cublasLtCreate(&lt_) != CUBLAS_STATUS_SUCCESS) return *error = "cublasLtCreate failed", false;
  return true;
}

bool LtGemms::tune(cublasHandle_t cublas, const std::vector<const __nv_bfloat16*>& weights, int out, int in,
                   const __nv_bfloat16* X, int n, void* Y, bool yF32, cudaStream_t s, std::string* error,
                   bool keepAlways) {
  const Key key{out, in, n, yF32};
  if (weights.empty() || plans_.count(key)) return true;
  ++tuned_;
  const float alpha = 1.f, beta = 0.f;
  const int launches = static_cast<int>(weights.size());
  auto gemmEx = [&](int i) {
    return cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &alpha, weights[static_cast<size_t>(i)],
                        CUDA_R_16BF, in, X, CUDA_R_16BF, in, &beta, Y, yF32 ? CUDA_R_32F : CUDA_R_16BF, out,
                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
  };
  const double exUs = timeInGraph(s, launches, gemmEx);
  if (exUs <= 0)
    return *error = "tuning the GEMM " + std::to_string(out) + " x " + std::to_string(in) + " at " +
                    std::to_string(n) + " rows: cublasGemmEx failed",
           false;
  auto problem = std::make_unique<LtProblem>();
  if (!ltProblem(lt_, out, in, n, yF32, wsBytes_, kMaxCandidates, problem.get())) return true;  // GemmEx stays
  double bestUs = 0;
  size_t best = problem->algos.size();
  for (size_t k = 0; k < problem->algos.size(); ++k) {
    const cublasLtMatmulAlgo_t* algo = &problem->algos[k].algo;
    const LtProblem& p = *problem;
    const double us = timeInGraph(s, launches, [&](int i) {
      return cublasLtMatmul(lt_, p.op, &alpha, weights[static_cast<size_t>(i)], p.a, X, p.b, &beta, Y, p.c, Y, p.c,
                            algo, ws_, wsBytes_, s) == CUBLAS_STATUS_SUCCESS;
    });
    if (us > 0 && (best == problem->algos.size() || us < bestUs)) best = k, bestUs = us;
  }
  if (best == problem->algos.size() || (!keepAlways && bestUs >= 0.99 * exUs)) return true;  // GemmEx stays
  Plan plan;
  plan.algo = problem->algos[best].algo;
  plan.us = bestUs;
  plan.gemmExUs = exUs;
  plan.problem = std::move(problem);
  plans_.emplace(key, std::move(plan));
  return true;
}

bool LtGemms::run(const __nv_bfloat16* W, int out, int in, const __nv_bfloat16* X, int n, void* Y, bool yF32,
                  cudaStream_t s) const {
  const auto it = plans_.find(Key{out, in, n, yF32});
  if (it == plans_.end()) return false;
  const LtProblem& p = *it->second.problem;
  const float alpha = 1.f, beta = 0.f;
  return cublasLtMatmul(lt_, p.op, &alpha, W, p.a, X, p.b, &beta, Y, p.c, Y, p.c, &it->second.algo, ws_, wsBytes_, s) ==
         CUBLAS_STATUS_SUCCESS;
}

std::string LtGemms::describe() const {
  double ex = 0, lt = 0;
  for (const auto& [key, plan] : plans_) ex += plan.gemmExUs, lt += plan.us;
  char line[160];
  std::snprintf(line, sizeof line, "%zu of %d shapes on cuBLASLt (%.1f us a launch of them summed, cublasGemmEx %.1f)",
                plans_.size(), tuned_, lt, ex);
  return line;
}

}  // namespace qwen
