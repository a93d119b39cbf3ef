// attention_prefill_cudnn.h: the prefill attention through cuDNN's fused attention (the cuDNN
// frontend's scaled dot-product graph), for A/B against the project's own kernels
// (QWEN_PREFILL_ATTN=cudnn; docs/prefill_attention.md).
//
// Built where CMake finds cuDNN's headers and the cuDNN frontend's (QWEN_TP_CUDNN; the frontend
// is header-only: examples/qwen_tp/tools/fetch_cudnn_frontend.sh puts it in third_party/). No
// link-time dependency: the frontend opens libcudnn.so.9 at run time (dlopen, so the library
// directory must be on LD_LIBRARY_PATH, as PyTorch's nvidia/cudnn/lib is on the GPU machine).
// Without either, every call says why and the caller keeps its own kernel.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <string>

namespace qwen {
namespace gpu {

class CudnnPrefillAttention {
 public:
  CudnnPrefillAttention();
  ~CudnnPrefillAttention();
  CudnnPrefillAttention(const CudnnPrefillAttention&) = delete;
  CudnnPrefillAttention& operator=(const CudnnPrefillAttention&) = delete;

  /// True when this build holds the cuDNN path (QWEN_TP_CUDNN).
  static bool built();

  /// Opens cuDNN and makes a handle on the current device, for hq query heads over hk KV heads of
  /// head_dim D, caches of ctx slots; `workspace` (device, workspaceBytes) is lent for every call
  /// (allocated by the caller at init: no allocation once a collective may run). false with *why.
  bool init(int hq, int hk, int D, int ctx, void* workspace, size_t workspaceBytes, std::string* why);

  /// attentionPrefill's contract (attention_prefill.cuh) with the start position on the host:
  /// n queries at positions pos .. pos + n - 1, q [n, hq, D], caches [ctx, hk, D], out [n, hq, D],
  /// bf16, causal (bottom-right: query t sees slots 0 .. pos + t), scale 1/sqrt(D), fp32 softmax.
  /// The graph of each (n, pos + n) is built at its first call (cuDNN picks and may compile its
  /// kernel there: a cold call) and kept. false, launching nothing, with *why when cuDNN does not
  /// support the shape or the workspace is too small; the caller then runs its own kernel.
  bool run(const __nv_bfloat16* q, const __nv_bfloat16* kCache, const __nv_bfloat16* vCache, int pos, int n,
           __nv_bfloat16* out, cudaStream_t s, std::string* why);

  /// cuDNN's version (e.g. 92600) once init succeeded, else 0.
  size_t version() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpu
}  // namespace qwen
