// gemv.cuh: small-n GEMM (n <= 16 tokens) on the tensor cores, streaming W at HBM bandwidth.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace qwen {
namespace gpu {

/// Small-n GEMM on the tensor cores (mma.sync m16n8k16, fp32 accumulation), built to stream W at
/// HBM bandwidth: Y[t, o] = sum_i X[t, i] * W[o, i] for t < n, o < out; W bf16 [out, in] and X
/// bf16 [n, in] row-major (row stride = in), Y [n, out] fp32 (yF32) or bf16 (round to nearest).
/// The same product as GpuModel::gemm's cublasGemmEx, for decode and MTP verify (n = 1..8).
/// A block per 16 rows of W, up to 8 warps splitting `in` into 32-column units (warp w takes
/// units w, w + warps, ...; warps a function of `in`), 4 units of loads in flight per warp, the
/// warps' sums added in warp order. Deterministic: the order of every sum depends on `in` only,
/// so a token's row is also the same whatever the other tokens of the call are. Any `in` and any
/// alignment are correct; the fast path needs gemvVectorizable(W, X, in), else every element is
/// loaded alone. Needs sm_80+. Returns false (and launches nothing) when n is outside
/// 1..kGemvMaxTokens.
constexpr int kGemvMaxTokens = 8;
bool gemvBf16(const __nv_bfloat16* W, int out, int in, const __nv_bfloat16* X, int n, void* Y, bool yF32,
              cudaStream_t s);
/// in % 8 == 0 and W, X 16-byte aligned: gemvBf16 runs on 16-byte vector loads.
bool gemvVectorizable(const void* W, const void* X, int in);

/// Loads every GEMV kernel on the current device. Call it once per device before capturing and
/// before any rank may be inside a collective (GpuModel::init does): loading waits for the device
/// as a whole, and ranks sharing a GPU must never do that while a peer's all-reduce spins
/// (docs/reliability.md).
bool prepareGemv();

/// The fused decode step's products (GpuModelOptions::decode = kFused; n <= kGemvFusedMaxTokens,
/// in launches of up to kGemvMaxTokens tokens), gemvBf16's arithmetic with a prologue or an
/// epilogue. X is then the bf16 residual stream [n, in], and the MMAs take
/// hn = bf16((X * inv_rms) * normW) (addRmsNorm's rounding; each block sums a token's squares
/// itself, in a fixed order). A product's sums are gemvBf16's, so gemvResidual is bit for bit
/// gemvBf16 followed by the bf16 add. Returns false, launching nothing, unless the operands are
/// vectorizable (gemvVectorizable, normW 16-byte aligned), in <= 8192 for the normed ones, and
/// 1 <= n <= kGemvFusedMaxTokens.
constexpr int kGemvFusedMaxTokens = 16;
constexpr int kGemvNormMaxIn = 8192;  // the normed products' rows (32 KB of squares in shared memory)
/// Y [n, out] = bf16(hn W^T).
bool gemvNormBf16(const __nv_bfloat16* W, int out, int in, const __nv_bfloat16* X, int n, const __nv_bfloat16* normW,
                  float eps, __nv_bfloat16* Y, cudaStream_t s);
/// W = [gate; up], [2 I, in]: act [n, I] = bf16(silu(g) * u) with g, u the bf16 products of hn
/// with the gate and up rows (gpu::swiglu's math on gemvBf16's outputs, in one pass).
bool gemvNormSwiglu(const __nv_bfloat16* W, int I, int in, const __nv_bfloat16* X, int n, const __nv_bfloat16* normW,
                    float eps, __nv_bfloat16* act, cudaStream_t s);
/// R [n, out] = bf16(R + bf16(X W^T)): the projection and the residual add in one pass (X the
/// attention output or the SwiGLU activation, R the residual stream).
bool gemvResidual(const __nv_bfloat16* W, int out, int in, const __nv_bfloat16* X, int n, __nv_bfloat16* R,
                  cudaStream_t s);

// ---- gemv_stream.cu: small-n products as a plain stream of W (GpuModelOptions::streamGemv,
// gemv_bench's "stream" column) ----
/// Y [n, out] = X [n, in] W^T for 1 <= n <= kGemvStreamMaxTokens: W bf16 [out, in] and X bf16
/// [n, in] row-major, Y bf16 or fp32 (yF32). A warp per row, 4 KB of W a warp in flight, X in
/// shared memory (or L1 past 96 KB); every token's sums in an order that depends on `in` only,
/// so a token's row is the same bits whatever n, the other tokens and the grid. false (nothing
/// launched) unless gemvStreamSupported and prepareGemvStream ran on this device.
constexpr int kGemvStreamMaxIn = 32768;
constexpr int kGemvStreamMaxTokens = 8;
/// Sets the shared-memory attribute of every form (loading them) on the current device; call
/// before capture and before any collective (as prepareGemv).
bool prepareGemvStream();
/// Launch the streams that follow with programmatic dependent launch (when setPdl is on too); off
/// by default: a grid PDL-launched beside another that leaves slots free lands unevenly and loses
/// time. GpuModel turns it on for the fused step's streams QWEN_STREAM_PDL names (by default the
/// down stream where its grid fills the slots: stream_grid.h) and off after each.
void setGemvStreamPdl(bool on);
/// The blocks a multiprocessor each stream's grid takes: 2 (kStreamBlocksPerSm, the default: every
/// resident slot) or 1, which leaves a slot free on every multiprocessor for the next stream's
/// PDL-launched blocks (QWEN_STREAM_SLOTS). Process-wide; false (unchanged) outside 1..2. The
/// products' bits do not depend on the grid.
bool setGemvStreamSlots(int perSm);
bool gemvStreamSupported(const void* W, const void* X, int in);
/// The fused decode step's forms at one token (GpuModel under streamGemv and decode gemv|fused),
/// each the bits of its unfused pair: X the bf16 residual row, normed with addRmsNorm's
/// arithmetic in its order inside every block (in * 4 bytes <= 96 KB; normW 16-byte aligned);
/// Y = bf16(hn W^T).
bool gemvStreamNorm(const __nv_bfloat16* W, int out, int in, const __nv_bfloat16* X, const __nv_bfloat16* normW,
                    float eps, __nv_bfloat16* Y, cudaStream_t s);
/// R [n, out] = bf16(R + bf16(X W^T)), addRmsNorm's add (n <= kGemvStreamMaxTokens).
bool gemvStreamResidual(const __nv_bfloat16* W, int out, int in, const __nv_bfloat16* X, int n, __nv_bfloat16* R,
                        cudaStream_t s);
/// W = [gate; up] [2 I, in]: act [I] = bf16(silu(g) * u) of the bf16 products of hn (as
/// gemvStreamNorm) with the gate and up rows: gpu::swiglu's math.
bool gemvStreamNormSwiglu(const __nv_bfloat16* W, int I, int in, const __nv_bfloat16* X, const __nv_bfloat16* normW,
                          float eps, __nv_bfloat16* act, cudaStream_t s);
/// A layer's one-token products after its attention, in one cooperative launch (gemv_stream.cu,
/// streamLayer: grid barriers between the phases, bounded): x += o_proj(att); act =
/// SwiGLU(gate/up of norm(x, ln2)); x += down(act); and, when wqkv is set, qkv = the next layer's
/// qkv of norm(x, ln1). The bits of gemvStreamResidual, gemvStreamNormSwiglu, gemvStreamResidual
/// and gemvStreamNorm in turn. barrier: two zeroed words of device memory the launches reuse;
/// failed: an int the host can read (host-mapped), set when a block waited past boundNs at a
/// barrier (then zero barrier and failed before the next launch). false, nothing launched,
/// unless streamLayerSupported and prepareGemvStream ran.
struct StreamLayer {
  const __nv_bfloat16 *wo = nullptr, *wgu = nullptr, *wd = nullptr, *wqkv = nullptr;  // wqkv: the next layer's
  const __nv_bfloat16 *ln2 = nullptr, *ln1 = nullptr;                               // ln1: the next layer's
  const __nv_bfloat16* att = nullptr;
  __nv_bfloat16 *x = nullptr, *act = nullptr, *qkv = nullptr;
  int hidden = 0, attIn = 0, inter = 0, qkvRows = 0;
  float eps = 0.f;
  unsigned* barrier = nullptr;
  int* failed = nullptr;
  uint64_t boundNs = 0;
};
bool streamLayerSupported(const StreamLayer& a);
bool streamLayer(const StreamLayer& a, cudaStream_t s);
bool gemvStream(const __nv_bfloat16* W, int out, int in, const __nv_bfloat16* X, int n, void* Y, bool yF32,
                cudaStream_t s);
/// A one-token step's qkv with its q/k norm, RoPE and KV store in one launch (gemv_stream.cu,
/// streamQkvRope): the products of gemvStreamNorm(wqkv, x, ln) and then qkNormRopeStore's outputs
/// at slot *pos (q [hq, D], the K and V cache rows), the same bits, without the qkv buffer. A
/// cluster of blocks per head exchanges the head's products through distributed shared memory.
/// false (nothing launched) unless streamQkvRopeSupported: sm_90+, prepareGemvStream ran,
/// headDim % 64 == 0 and <= 256, hidden % 8 == 0 with hidden * 4 bytes <= 96 KB, 16-byte aligned
/// wqkv, x and ln. eps: the layer norm's and the q/k norms' (the model's one rmsNormEps).
struct QkvRope {
  const __nv_bfloat16 *wqkv = nullptr, *x = nullptr, *ln = nullptr, *qNorm = nullptr, *kNorm = nullptr;
  const int32_t* pos = nullptr;
  __nv_bfloat16 *q = nullptr, *kCache = nullptr, *vCache = nullptr;
  int hidden = 0, hq = 0, hk = 0, headDim = 0, ropeOffset = 0;
  float eps = 0.f, theta = 0.f;
};
bool streamQkvRopeSupported(const QkvRope& a);
bool streamQkvRope(const QkvRope& a, cudaStream_t s);
/// The blocks a head streamQkvRope gives (its cluster size) on this device: 0 when unsupported.
int streamQkvRopeCluster(const QkvRope& a);
/// The lm_head's one-token product with the greedy pick (gemv_stream.cu, streamPick): logits
/// [out] fp32 = X' W^T, where X' is the row X or, with normW, its RMSNorm (gemvStreamNorm's
/// arithmetic: addRmsNorm's bits; then also stored to normOut when not null, 16-byte aligned);
/// token[0] = argmaxPick's token of those logits (the lowest row of the largest value, NaN never,
/// 0 when nothing is above -FLT_MAX). The last block to finish picks: scratch (scratchBytes >=
/// streamPickScratch(), 0 before prepareGemvStream; 8-byte aligned) is zeroed once before the
/// first launch and left zero by every launch; one launch at a time uses it. false (nothing
/// launched) unless prepareGemvStream ran and the operands are 16-byte aligned rows of in % 8 == 0.
size_t streamPickScratch();
bool streamPick(const __nv_bfloat16* W, int out, int in, const __nv_bfloat16* X, const __nv_bfloat16* normW, float eps,
                __nv_bfloat16* normOut, float* logits, void* scratch, size_t scratchBytes, int32_t* token,
                cudaStream_t s);

}  // namespace gpu
}  // namespace qwen
