// gpu_kernels.h: the decoder's own CUDA kernels (everything but the GEMMs, which are cuBLAS, except
// the optional small-n GEMV gemvBf16 behind GpuModelOptions::customGemv).
// Activations, the residual stream included, are bf16 (as Hugging Face runs a bf16 model, and
// as tpcomm's fused all-reduce + residual + RMSNorm needs: one dtype for input, residual and
// output); logits and the argmax table are fp32; every reduction runs in fp32. Kernels read the step's start position
// from device memory (`pos`), so one captured CUDA graph serves every step of a shape.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace qwen {
namespace gpu {

/// Launch every kernel below (but initSynthetic) with programmatic dependent launch (sm_90+), so
/// a kernel's blocks are scheduled while the previous kernel of the stream finishes, and
/// gemvBf16 prefetches its first weights into L2 before waiting for its input. Process-wide;
/// off by default (GpuModelOptions::pdl sets it). Each kernel waits for its predecessor before
/// touching anything but constant weights, so results are the same bits either way.
void setPdl(bool on);

/// dst[r * cols + c] = bf16(synthValue(seed, id, (rowOff + r) * fullCols + colOff + c)).
void initSynthetic(__nv_bfloat16* dst, int64_t rows, int64_t cols, int64_t fullCols, int64_t rowOff, int64_t colOff,
                   uint64_t seed, uint32_t id, float scale, float offset, cudaStream_t s);

/// Vocab-parallel embedding: x[t] = E[tok - vocabBegin] when this rank owns the token, else 0;
/// the caller all-reduces x (exact: one non-zero term per element). tokens are global ids.
void embed(const int32_t* tokens, int n, const __nv_bfloat16* E, int vocabBegin, int vocabLocal, int H, __nv_bfloat16* x,
           cudaStream_t s);

/// If `add` is non-null: x = bf16(x + add). Then out = bf16((x * inv_rms) * w), inv_rms in fp32.
/// One block of 512 per row. The unfused path's epilogue after an all-reduce (what
/// Communicator::allReduceResidualRmsNorm computes in one call, up to the sum-of-squares order).
void addRmsNorm(__nv_bfloat16* x, const __nv_bfloat16* add, const __nv_bfloat16* w, int n, int H, float eps,
                __nv_bfloat16* out, cudaStream_t s);
/// out[t, :] = bf16(rmsnorm(in[t, :]) * w) with in bf16 and an output row stride.
void rmsNormBf16(const __nv_bfloat16* in, int ldIn, const __nv_bfloat16* w, int n, int H, float eps,
                 __nv_bfloat16* out, int ldOut, cudaStream_t s);

/// qkv [n, (hq + 2 hk) * D] -> per-head RMSNorm on q and k, rotate-half rotary at position
/// (*pos + ropeOffset + t); q -> q [n, hq * D]; k, v -> cache slots *pos + t ([ctx, hk, D]).
void qkNormRopeStore(const __nv_bfloat16* qkv, int n, int hq, int hk, int D, const __nv_bfloat16* qNorm,
                     const __nv_bfloat16* kNorm, float eps, float theta, const int32_t* pos, int ropeOffset,
                     __nv_bfloat16* q, __nv_bfloat16* kCache, __nv_bfloat16* vCache, cudaStream_t s);

/// Causal GQA attention of n queries (slots *pos + t) over the bf16 cache, flash-decoding style:
/// the sequence is cut into `splits` chunks of `chunk` slots, each block one (query, head,
/// chunk) with an online softmax; a second kernel merges the chunks. part* are scratch of
/// n * hq * splits * (D + 2) floats.
void attention(const __nv_bfloat16* q, const __nv_bfloat16* kCache, const __nv_bfloat16* vCache, const int32_t* pos,
               int n, int hq, int hk, int D, int splits, int chunk, float* part, __nv_bfloat16* out, cudaStream_t s);

/// act[t, i] = silu(gu[t, i]) * gu[t, I + i] (gate columns first, then up).
void swiglu(const __nv_bfloat16* gu, int n, int I, __nv_bfloat16* act, cudaStream_t s);

/// Per row of logits [n, V]: (max, vocabBegin + argmax, lowest index on ties) into
/// table[(t * tp + rank) * 2 + {0, 1}]; the rest of the table is zeroed by this call.
void localArgmax(const float* logits, int n, int V, int vocabBegin, int tp, int rank, float* table, cudaStream_t s);
/// After the table is sum-all-reduced: tokens[t] = index of the best (value, lowest rank).
void pickArgmax(const float* table, int n, int tp, int32_t* tokens, cudaStream_t s);

/// Small-n GEMM on the tensor cores (mma.sync m16n8k16, fp32 accumulation), built to stream W at
/// HBM bandwidth: Y[t, o] = sum_i X[t, i] * W[o, i] for t < n, o < out; W bf16 [out, in] and X
/// bf16 [n, in] row-major (row stride = in), Y [n, out] fp32 (yF32) or bf16 (round to nearest).
/// The same product as GpuModel::gemm's cublasGemmEx, for decode and MTP verify (n = 1..8).
/// Deterministic: the order of every sum depends on `in` only, so a token's row is also the same
/// whatever the other tokens of the call are. Any `in` and any alignment are correct; the fast
/// path (16-byte loads) needs gemvVectorizable(W, X, in), else every element is loaded alone.
/// Needs sm_80+. Returns false (and launches nothing) when n is outside 1..kGemvMaxTokens.
constexpr int kGemvMaxTokens = 8;
bool gemvBf16(const __nv_bfloat16* W, int out, int in, const __nv_bfloat16* X, int n, void* Y, bool yF32,
              cudaStream_t s);
/// in % 8 == 0 and W, X 16-byte aligned: gemvBf16 runs on 16-byte vector loads.
bool gemvVectorizable(const void* W, const void* X, int in);

/// dst[i] = src[i] (bf16 rows copy helper for the MTP's hidden input).
void copyRowsBf16(const __nv_bfloat16* src, int ldSrc, __nv_bfloat16* dst, int ldDst, int n, int cols, cudaStream_t s);

}  // namespace gpu
}  // namespace qwen
