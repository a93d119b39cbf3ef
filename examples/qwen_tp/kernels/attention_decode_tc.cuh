// attention_decode_tc.cuh: flash-decoding on the tensor cores for calls of 1..16 tokens at
// head_dim 128, the merge of the splits done by the last CTA to finish (no second kernel).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/l2_ahead.h"

namespace qwen {
namespace gpu {

/// The one head_dim attentionDecodeTc serves (Qwen3's), and the group sizes (hq / hk) it takes.
constexpr int kDecodeTcHeadDim = 128;
/// The most tokens a call of attentionDecodeTcRope takes (a decode, verify or draft call).
constexpr int kDecodeTcMaxTokens = 16;
bool attentionDecodeTcSupported(int hq, int hk, int D);
/// Raises the kernels' shared-memory limit (104 KB) on the current device: once per device before
/// the first call (GpuModel::init does it). False when the device refuses.
bool prepareAttentionDecodeTc();

/// The largest split count worth using on this device for hk KV heads: about two CTAs per SM
/// for one token (2 * SMs / hk), in [1, 128]. GpuModel fixes it once at init; a query's chunks
/// are then a function of its length only (decodeTcChunk).
int decodeTcMaxSplits(int device, int hk);

/// Slots per chunk for a query that attends to len slots: ceil(len / maxSplits) rounded up to
/// a whole tile of 64 slots; the query then has ceil(len / chunk) <= maxSplits chunks.
__host__ __device__ inline int decodeTcChunk(int len, int maxSplits) {
  const int c = (len + maxSplits - 1) / maxSplits;
  return c <= 64 ? 64 : (c + 63) / 64 * 64;
}

/// Floats of the partials buffer and ints of the ticket array attentionDecodeTc needs for calls
/// of up to n tokens. The tickets must be zero before the first call (cudaMemset); every call
/// leaves them zero again.
size_t decodeTcPartialFloats(int n, int hq, int maxSplits);
size_t decodeTcTickets(int n, int hk);

/// out[t, h, :] = softmax(q[t, h] . K[0..pos+t] / sqrt(D)) V, for t < n (causal GQA over the bf16
/// cache [ctx, hk, D]); q and out [n, hq, D] bf16. Same function as gpu::attention up to fp32
/// rounding; a query's bits depend on its length (and maxSplits) only, never on n.
/// *pos must be final before the launch (it is read before the PDL wait: GpuModel copies it in at
/// the start of a call, before any kernel of the call). `ahead`: the next product's weights to
/// ask L2 for while the call waits on the kernel before it (planL2Ahead; none by default).
void attentionDecodeTc(const __nv_bfloat16* q, const __nv_bfloat16* kCache, const __nv_bfloat16* vCache,
                       const int32_t* pos, int n, int hq, int hk, int maxSplits, float* part, int* tickets,
                       __nv_bfloat16* out, cudaStream_t s, const L2Ahead& ahead = L2Ahead{});

/// The q/k norm + RoPE + KV store folded into the attention (qkNormRopeStore's job): the raw
/// projections qkv [n, (hq + 2 hk) D], the q and k norm weights [D], eps, theta, and the rotary
/// offset (the MTP layer's 1).
struct DecodeRope {
  const __nv_bfloat16* qkv = nullptr;
  const __nv_bfloat16 *qNorm = nullptr, *kNorm = nullptr;
  float eps = 0.f, theta = 0.f;
  int ropeOffset = 0;
};

/// attentionDecodeTc with qkNormRopeStore inside: each CTA norms and rotates its G query heads
/// from qkv, makes the K/V rows of the call's own slots (pos..pos+t) from qkv where its chunk
/// holds them, and one CTA per (token, KV head) stores slot pos + t into the cache. The per-head
/// norm sums its squares in another order than qkNormRopeStore, so q and the stored k can differ
/// from it in the last bf16 bit; every other step is its arithmetic. False, launching nothing,
/// when n is outside 1..kDecodeTcMaxTokens or attentionDecodeTcSupported(hq, hk, 128) says no.
bool attentionDecodeTcRope(const DecodeRope& rope, __nv_bfloat16* kCache, __nv_bfloat16* vCache, const int32_t* pos,
                           int n, int hq, int hk, int maxSplits, float* part, int* tickets, __nv_bfloat16* out,
                           cudaStream_t s, const L2Ahead& ahead = L2Ahead{});

}  // namespace gpu
}  // namespace qwen
