// lt_gemm.h: the decoder's weight GEMMs through cuBLASLt, each shape's algorithm picked by
// timing at init (QWEN_GEMM=lt).
//
// Why: cublasGemmEx takes the first algorithm cuBLASLt's heuristics rank; on an H200 a later one
// is faster for some of the decoder's shapes (gemv_bench --lt-tokens: split-K for the 8b o and
// down GEMVs, 2-8%; another tile for the 8b gate/up at 2048 rows, 14%). LtGemms times the
// heuristics' first kMaxCandidates algorithms against cublasGemmEx, per (out, in, rows, output
// type), and keeps one only where it beats cublasGemmEx by more than 1%. The choice follows
// timing, so two processes may keep different algorithms for a shape and their results may
// differ in the last bits (split-K sums in another order); cublasGemmEx alone (the default,
// QWEN_GEMM=gemmex) gives the same bits run after run.
//
// Timing happens at init only, before any rank's first collective (tuning launches and waits on
// its own stream), and never under capture: a shape not tuned runs cublasGemmEx.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace qwen {

/// cuBLASLt's descriptors of Y [n, out] = X [n, in] W [out, in]^T (cublasGemmEx's call in
/// GpuModel::gemm: column-major Y^T = op_T(W^T) X^T), and the algorithms its heuristics offer
/// within `wsBytes` of workspace, best first.
struct LtProblem {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  std::vector<cublasLtMatmulHeuristicResult_t> algos;
  LtProblem() = default;
  LtProblem(const LtProblem&) = delete;
  LtProblem& operator=(const LtProblem&) = delete;
  ~LtProblem();
};

/// Fills `p` for that product (output bf16, or fp32 when `f32`), asking for up to `want`
/// algorithms. False when a descriptor or the heuristic query fails.
bool ltProblem(cublasLtHandle_t lt, int out, int in, int n, bool f32, size_t wsBytes, int want, LtProblem* p);

/// "id T tile S splitK R red Q" of an algorithm.
std::string ltAlgoName(const cublasLtMatmulAlgo_t& algo);

class LtGemms {
 public:
  static constexpr int kMaxCandidates = 8;

  LtGemms() = default;
  LtGemms(const LtGemms&) = delete;
  LtGemms& operator=(const LtGemms&) = delete;
  ~LtGemms();

  /// Creates the cuBLASLt handle; every call lends it `ws` (`wsBytes`, shared with cublasGemmEx
  /// on the same stream). False with *error when cublasLtCreate fails.
  bool init(void* ws, size_t wsBytes, std::string* error);

  /// Times one product at n rows: each timed pass launches it once per weight in `weights` (the
  /// layers' copies, so a pass cannot find them in L2) inside a CUDA graph on `s`, for
  /// cublasGemmEx (`cublas`, set to stream `s`) and for each candidate; keeps the fastest
  /// candidate if it beats cublasGemmEx by more than 1%, or always with `keepAlways` (the tests'
  /// QWEN_GEMM=lt-always, so the cuBLASLt path runs whatever the timings). X and Y are scratch of
  /// n x in and n x out elements. False with *error on a CUDA error; a failing candidate is skipped.
  bool tune(cublasHandle_t cublas, const std::vector<const __nv_bfloat16*>& weights, int out, int in,
            const __nv_bfloat16* X, int n, void* Y, bool yF32, cudaStream_t s, std::string* error,
            bool keepAlways = false);

  /// Enqueues the product with the algorithm kept for its shape. False when none was kept (the
  /// caller runs cublasGemmEx) or cublasLtMatmul refuses.
  bool run(const __nv_bfloat16* W, int out, int in, const __nv_bfloat16* X, int n, void* Y, bool yF32,
           cudaStream_t s) const;

  /// "K of N shapes on cuBLASLt (...)": what tune() kept, for the run's banner.
  std::string describe() const;

 private:
  using Key = std::tuple<int, int, int, bool>;  // out, in, n, fp32 output
  struct Plan {
    std::unique_ptr<LtProblem> problem;
    cublasLtMatmulAlgo_t algo{};
    double us = 0, gemmExUs = 0;
  };
  cublasLtHandle_t lt_ = nullptr;
  void* ws_ = nullptr;
  size_t wsBytes_ = 0;
  int tuned_ = 0;
  std::map<Key, Plan> plans_;
};

}  // namespace qwen
