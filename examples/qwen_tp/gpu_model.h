// gpu_model.h: one tensor-parallel rank of the Qwen3 (+ MTP) decoder on one GPU. bf16 weights
// (Megatron shards, q/k/v and gate/up fused per rank), cuBLAS GEMMs with fp32 accumulation (or,
// with GpuModelOptions::customGemv, gpu::gemvBf16 for calls of up to 8 tokens),
// own kernels for the rest (gpu_kernels.h), a bf16 KV cache per layer and for the MTP layer,
// and tpcomm all-reduces: embedding, after o_proj, after down_proj, and the argmax table.
// The residual stream is bf16. The all-reduces after o_proj and down_proj are each followed by
// the residual add and the next RMSNorm; with GpuModelOptions::fusedNorm (the default, tp > 1)
// the three are one Communicator::allReduceResidualRmsNorm call (a fused kernel on the P2P
// algorithms, tpcomm's all-reduce + norm kernel elsewhere), else allReduce + gpu::addRmsNorm.
// Calls of up to kGraphMaxTokens tokens are captured once per shape as CUDA graphs (inputs and
// outputs copied inside the graph through pinned buffers) and replayed. Attention: calls of more
// than kGraphMaxTokens tokens (prefill chunks) take the FlashAttention-3-style kernel on Hopper at
// head_dim 128 (gpu::attentionPrefillFa3; GpuModelOptions::prefillFa3), else the tensor-core
// FlashAttention-2 kernel (gpu::attentionPrefill), or cuDNN's (prefillCudnn); shorter ones the split-sequence decode kernel (gpu::attention).
// Scratch is sized by the chunk (maxTokensPerCall), the KV cache by ctxSize; logits exist for at
// most kLogitsRows rows at a time (prefill() computes the last row's only).
#pragma once

#include <cstdint>
#include <functional>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "config.h"
#include "engine.h"
#include "kernels/l2_ahead.h"

namespace tpcomm {
class Communicator;
}

namespace qwen {

class RankGate;
class LtGemms;
namespace gpu {
class CudnnPrefillAttention;
}

class SafetensorsModel;

struct GpuModelOptions {
  int ctxSize = 4096;            ///< KV cache positions (1 .. max_position_embeddings)
  int maxTokensPerCall = 2048;  ///< prefill chunk (--ubatch-size): tokens per call; sizes the scratch
  uint64_t seed = 1;           ///< synthetic weights when `checkpoint` is null
  const SafetensorsModel* checkpoint = nullptr;
  bool useGraphs = true;
  bool fusedNorm = true;  ///< allReduceResidualRmsNorm after o_proj / down_proj (false: allReduce + addRmsNorm)
  /// GEMMs of n <= gpu::kGemvMaxTokens tokens (decode, MTP verify and drafts) through
  /// gpu::gemvBf16 instead of cuBLAS, when the operands are 16-byte aligned with in % 8 == 0 (else
  /// cuBLAS). Off by default: on 2x H200 it measured within 1-5% of cuBLAS per layer shape and
  /// the same tok/s (bench/results/h200x2.md). Needs sm_80+ (init fails otherwise).
  bool customGemv = false;
  /// One-token GEMMs (decode steps, MTP drafts) through gpu::gemvStream (a warp per row of W, a
  /// plain stream of the weights, launched without PDL) instead of cuBLAS, when the operands are
  /// 16-byte aligned with in % 8 == 0 (else cuBLAS); calls of 2+ tokens (verify) stay on cuBLAS,
  /// where the stream's CUDA-core FMAs cost 1.5-3x (docs/decode_kernels.md). So a verify call's
  /// token differs from a one-token step's in the last bits (cuBLAS alone gives a token the same
  /// bits at 1..8 tokens): for runs without speculation (qwen_tp's --gemv auto). customGemv,
  /// when set, wins. The environment's
  /// QWEN_GEMV=cublas|custom|stream, when set, overrides both at init (A/B timing of one binary),
  /// QWEN_STREAM_PDL=auto|on|off|chain|attn|all or a list of qkv,o,gateup,down (default auto):
  /// on launches every stream with PDL; the others, the fused step's streams named (chain: those
  /// that follow a stream, qkv, gateup, down; attn: o; all: the four); any other value fails
  /// init. auto: down alone (its blocks load their first chunks of W in gate/up's tail) when its
  /// grid fills the stream's slots (gpu::streamFillsSlots: qwen3-8b on an H200, not qwen3-32b),
  /// else none (docs/decode_kernels.md).
  bool streamGemv = false;
  /// Programmatic dependent launch for the decoder's own kernels (gpu::setPdl; process-wide).
  /// Same bits either way; no measurable speed difference on 2x H200.
  bool pdl = true;
  /// Calls of more than kGraphMaxTokens tokens through gpu::attentionPrefill (tensor cores) when
  /// it supports the head_dim; false: every call through the decode kernel (for comparison).
  bool prefillAttention = true;
  /// With prefillAttention: those calls through gpu::attentionPrefillFa3 (wgmma + TMA, sm_90a)
  /// where it supports the shape and device (head_dim 128 on compute capability 9.0), else
  /// through gpu::attentionPrefill (FlashAttention-2 on mma.sync). The environment's
  /// QWEN_PREFILL_ATTN=fa2|fa3, when set, overrides this at init (A/B timing of one binary); any
  /// other value fails init. On: 1.34x fa2's prefill at 32000 tokens on an H200
  /// (docs/prefill_attention.md).
  bool prefillFa3 = true;
  /// With prefillAttention: those calls through cuDNN's fused attention
  /// (gpu::CudnnPrefillAttention), for A/B against the project's kernels; init fails where the
  /// build has no cuDNN path, cuDNN does not load, or tp > 1 (a shape's first call builds a cuDNN
  /// plan, which may load kernels while a peer spins). A shape cuDNN declines runs fa2 (said
  /// once). QWEN_PREFILL_ATTN=cudnn sets it at init.
  bool prefillCudnn = false;
  /// Calls of 64+ tokens (prefill chunks, and target() calls that long; never the captured
  /// decode and verify calls of <= kGraphMaxTokens), tp > 1, in two row halves whose
  /// all-reduces run on a second, high-priority stream: half A's sum runs while half B's o_proj
  /// or MLP GEMMs run, half B's while half A's next GEMMs run (enqueueLayerOverlapped). Same
  /// arithmetic per row; cuBLAS may pick other kernels for the half-size GEMMs, so the bits can
  /// differ by bf16 rounding.
  bool prefillOverlap = false;
  /// Fewer launches for the same bits (a draft step of a small model is launch-bound):
  /// at tp == 1 the embedding gather fused with the first layer's norm (gpu::embedRmsNorm) and
  /// the argmax with its pick (gpu::argmaxPick); at any tp the MTP head's two pre-fc norms in
  /// one launch, with the embedding gather at tp == 1 (gpu::mtpPrologue), and the MTP output
  /// norm written where the next chained draft reads it (no row copy). false: the separate
  /// kernels (embed, rmsNormBf16 x 2, copyRowsBf16, pickArgmax), kept for the tests and for A/B
  /// timing. The host<->device copies of a call (one in, one out) are the same either way.
  bool fusedKernels = true;
  /// The kernels of calls of up to kGraphMaxTokens tokens (decode, verify, MTP drafts):
  ///  kOld: attention split-K on the CUDA cores plus a combine kernel (gpu::attention); the GEMMs
  ///   through gemm(); q/k norm + RoPE, SwiGLU and the residual add + RMSNorm as their own kernels.
  ///  kAttention: attention on the tensor cores, the splits merged by the last CTA
  ///   (gpu::attentionDecodeTc; head_dim 128, else kOld's), the rest as kOld. Any tp.
  ///  kAttentionRope: kAttention with q/k norm + RoPE + KV store inside the attention
  ///   (gpu::attentionDecodeTcRope, kFused's) and cuBLAS for the products: one launch a layer
  ///   fewer than kAttention, any tp.
  ///  kFusedGemv: kAttention, and at tp == 1 each layer in 6 launches: RMSNorm in the qkv and
  ///   gate/up GEMVs' prologue, SwiGLU in gate/up's epilogue, the residual add in o_proj's and
  ///   down_proj's (gemvNormBf16, gemvNormSwiglu, gemvResidual); tp > 1 runs kAttention.
  ///  kFused: kFusedGemv with q/k norm + RoPE + KV store inside the attention
  ///   (gpu::attentionDecodeTcRope): 5 launches a layer.
  /// A query's bits depend on its length only on every path (speculative == greedy). The
  /// environment's QWEN_DECODE=old|attn|attnrope|gemv|fused, when set, overrides this at init (A/B timing
  /// of one binary); any other value fails init.
  /// kAttention is the default: the fastest measured (docs/decode_kernels.md, "Measured").
  enum class DecodeKernels { kOld, kAttention, kAttentionRope, kFusedGemv, kFused };
  DecodeKernels decode = DecodeKernels::kAttention;
  /// Bytes of the next weight product's matrix asked into L2 (gpu::prefetchL2, on a second
  /// stream branching off the captured graph) when a product of a decode graph (calls of up to
  /// kGraphMaxTokens tokens) ends, while the norm, RoPE, attention or SwiGLU kernels between two
  /// products leave device memory idle: 0 is off, kL2PrefetchHalfL2 half the device's L2. Only a
  /// hint: the same bits either way. The environment's QWEN_PREFETCH=off|on|<MB> overrides it at
  /// init; any other value fails init.
  static constexpr size_t kL2PrefetchHalfL2 = ~size_t(0);
  size_t l2Prefetch = 0;
  /// Bytes of a layer's o_proj matrix the decode attention (gpu::attentionDecodeTc and its rope
  /// form, calls of up to kGraphMaxTokens tokens) asks L2 for before its PDL wait, the same prefix
  /// of every row (kernels/l2_ahead.h), while the call's KV takes at most a quarter of the L2: the
  /// attention leaves device memory idle at short contexts, and the o product then starts with its
  /// rows in L2. 0 is off, kL2PrefetchHalfL2 half the device's L2. A hint: the same bits either
  /// way. The environment's QWEN_ATTN_PREFETCH=off|on|<MB> overrides it at init; any other value
  /// fails init.
  size_t attnPrefetch = kL2PrefetchHalfL2;
};

/// Nodes of a captured CUDA graph by type: what one replay launches. cuBLAS's kernels count.
struct GraphNodes {
  int kernels = 0, copies = 0, memsets = 0, other = 0;
};

class GpuModel : public DecoderEngine {
 public:
  static constexpr int kGraphMaxTokens = 16;
  /// Rows of logits computed at a time (target() of more rows runs the lm_head in slices).
  static constexpr int kLogitsRows = 16;
  /// The fused step's streams QWEN_STREAM_PDL can launch with PDL, as bits.
  static constexpr unsigned kPdlQkv = 1u, kPdlO = 2u, kPdlGateUp = 4u, kPdlDown = 8u;
  GpuModel(const ModelConfig& cfg, const TpShape& shape, int device, tpcomm::Communicator* comm);
  ~GpuModel() override;
  /// Allocates, fills the weights, creates stream/cuBLAS. Must be called on every rank.
  bool init(const GpuModelOptions& opt, std::string* error);

  bool target(const int32_t* tokens, int n, int pos, int32_t* next, std::string* error) override;
  bool prefill(const int32_t* tokens, int n, int pos, int32_t* last, std::string* error) override;
  bool mtpFromTarget(const int32_t* tokens, int n, int slot, int32_t* draft, std::string* error) override;
  bool mtpChain(int32_t token, int slot, int32_t* draft, std::string* error) override;
  /// The chain as one CUDA graph per count: each step's draft copied on the device into the next
  /// step's token, each step's position from a pinned array (longer than kGraphMaxTokens steps:
  /// mtpChain step by step).
  bool mtpChainRun(int32_t token, int slot, int count, int32_t* drafts, double* probs, std::string* error) override;
  bool enableDraftProbability() override;
  double lastDraftProbability() const override { return draftP_; }
  /// lastLogits at tp == 1 (one shard is the whole vocabulary); at tp > 1 the shards would have
  /// to be gathered, which the GPU decoder does not do: sampling there needs --tp 1.
  bool logitsRows(int rows, std::vector<float>* out, std::string* error) override {
    if (shape_.tp != 1)
      return *error = "sampling (--temp > 0) on the GPU needs --tp 1 (--device cpu samples at any --tp)", false;
    return lastLogits(rows, out, error);
  }
  bool hasMtp() const override { return cfg_.mtpLayers > 0; }
  int vocabSize() const override { return cfg_.vocabSize; }
  int ctxSize() const override { return opt_.ctxSize; }
  int maxTokensPerCall() const override { return opt_.maxTokensPerCall; }

  /// Replaces every all-reduce by nothing (numerically wrong; for measuring the all-reduce share
  /// of a step). Drops the captured graphs.
  void setSkipAllReduce(bool skip);
  /// Ranks that are threads of one process (rank_gate.h): every CUDA graph this rank makes waits
  /// at gate->arrive() before its first launch, each host step is marked, and a collective's
  /// error names where the ranks' hosts were. Null (one rank, ranks as MPI processes): none.
  void setRankGate(RankGate* gate, int rank) { gate_ = gate, gateRank_ = rank; }
  /// Median milliseconds of `iters` replays of the target step of n tokens at position pos.
  bool timeTargetStep(int n, int pos, int iters, double* ms, std::string* error);
  /// The same step's graph launched `launches` times back to back between two events (median of
  /// `iters`, divided by launches): the step when the host's launch is off the critical path, as
  /// in a decode loop that enqueues a step before reading the last one's token.
  bool timeTargetStepBackToBack(int pos, int launches, int iters, double* ms, std::string* error);
  /// Median milliseconds of `iters` replays of one chained MTP draft (mtpChain: the MTP layer,
  /// the lm_head and the argmax exchange) at MTP cache slot `slot`. Needs the MTP head and graphs.
  bool timeDraftStep(int slot, int iters, double* ms, std::string* error);
  /// The same for mtpChainRun of `count` steps from its graph (generate()'s drafts 2..n-max).
  bool timeDraftChain(int slot, int count, int iters, double* ms, std::string* error);
  /// Which captured graph graphNodes() reads: the target step of n tokens (target(), timeTargetStep),
  /// one chained draft (mtpChain, timeDraftStep; n must be 1), a chain run of n drafts (mtpChainRun).
  enum class StepGraph { kTarget, kDraft, kDraftChain };
  /// The node counts of that graph, captured by an earlier call (fails when it was not).
  bool graphNodes(StepGraph which, int n, GraphNodes* out, std::string* error) const;
  /// The weight GEMMs of one target step at n tokens alone (every layer's qkv, o, gate/up and
  /// down, and the lm_head), captured in one CUDA graph and replayed iters times: median ms, and
  /// the weight bytes they read (what a decode step must read; the roofline's numerator).
  bool timeStepGemms(int n, int iters, double* ms, size_t* bytes, std::string* error);
  /// The layers' weight GEMMs of one prefill chunk of n rows (kGraphMaxTokens < n <=
  /// maxTokensPerCall; the lm_head, which prefill runs for one row, left out) in one CUDA graph,
  /// replayed iters times: median ms, and the FLOPs they do.
  bool timeChunkGemms(int n, int iters, double* ms, double* flop, std::string* error);
  /// The prefill attention alone for a chunk of n rows at position pos: every layer's
  /// enqueueAttention in one graph, median of `iters` replays, over whatever q_ and the KV cache
  /// hold; *flop its causal FLOPs (4 x head_dim x heads x the keys each query sees, every layer).
  /// False when the prefill kernel is cuDNN's (its plans are not built under capture) or n is not
  /// a chunk the prefill kernel runs.
  bool timeChunkAttention(int n, int pos, int iters, double* ms, double* flop, std::string* error);
  /// This rank's logits of the last `rows` rows of the last call, [rows, shape.vocab] (copied to
  /// the host). Only the last slice of kLogitsRows rows is kept (one row after prefill() and the
  /// MTP passes): fails when rows exceeds it.
  bool lastLogits(int rows, std::vector<float>* out, std::string* error);
  /// Bytes of weights on this GPU, of the KV caches, and of everything this model allocated
  /// (the rest is scratch sized by the chunk and the cuBLAS workspace).
  size_t weightBytes() const { return weightBytes_; }
  size_t kvCacheBytes() const { return kvBytes_; }
  size_t allocatedBytes() const { return allocBytes_; }
  /// Bytes one plain decode step at position pos reads (the roofline's numerator): every layer's
  /// weights, the lm_head shard, one embedding row, and K and V of slots 0..pos of every layer.
  /// Not the rest of the embedding table, not the MTP head.
  size_t decodeStepBytes(int pos) const;
  /// True when calls of more than kGraphMaxTokens tokens use gpu::attentionPrefill.
  bool prefillAttention() const { return prefillAttn_; }
  /// The prefill attention kernel after init: "fa3", "fa2", or "decode" (prefillAttention off or
  /// an unsupported head_dim).
  const char* prefillKernel() const {
    return !prefillAttn_ ? "decode" : cudnnAttn_ ? "cudnn" : prefillFa3_ ? "fa3" : "fa2";
  }
  /// The weight GEMMs' library after init: "cublasGemmEx", or "cuBLASLt timed at init: K of N
  /// shapes on cuBLASLt (...)" under QWEN_GEMM=lt (lt_gemm.h).
  std::string gemmLibrary() const;
  /// Bytes a decode graph prefetches into L2 ahead of each weight product after init (0: off).
  size_t l2PrefetchBytes() const { return prefetchBytes_; }
  /// GpuModelOptions::attnPrefetch as resolved at init (0: off), and the KV bytes of a call above
  /// which the attention asks for nothing.
  size_t attnPrefetchBytes() const { return attnAheadBytes_; }
  size_t attnPrefetchKvMax() const { return attnAheadKvMax_; }
  /// The decode kernels in use after init: "old", "attn", "gemv" or "fused" (GpuModelOptions::decode;
  /// tp > 1 or an unsupported shape turns "gemv" and "fused" into "attn", head_dim != 128 any into "old").
  const char* decodeKernels() const;
  /// The fused step's streams launched with PDL (QWEN_STREAM_PDL), e.g. "down", or "none".
  std::string streamPdlProducts() const;
  /// The GEMMs of at most 8 tokens after init: "cublas", "custom" (gemvBf16) or "stream" (gemvStream).
  const char* smallGemv() const;
  /// gemvStream launches gemm() has enqueued (captured ones once, at capture): 0 with streamGemv
  /// off, or where every operand fell back to cuBLAS.
  uint64_t streamGemvLaunches() const { return streamGemvLaunches_; }
  /// Name of the algorithm tpcomm ran for the last all-reduce ("" with tp == 1).
  std::string lastAlgorithm() const;
  /// Algorithm of the last layer epilogue (after o_proj / down_proj) as enqueued: tpcomm's name
  /// ("fused_oneshot_p2p", ...; the all-reduce's name on the unfused path), "" with tp == 1.
  const std::string& lastNormAlgorithm() const { return normAlgo_; }
  cudaStream_t stream() const { return stream_; }
  /// Calls that ran the overlapped prefill (GpuModelOptions::prefillOverlap) so far.
  int overlappedCalls() const { return overlappedCalls_; }

 private:
  struct Layer {
    __nv_bfloat16 *ln1, *ln2, *qn, *kn, *wqkv, *wo, *wgu, *wd;
    __nv_bfloat16 *kCache, *vCache;
  };
  // kMtpChainRun: n chained MTP steps of one token each (mtpChainRun), not n tokens.
  enum Kind { kTarget = 0, kMtpFromTarget = 1, kMtpChain = 2, kPrefill = 3, kMtpChainRun = 4 };
  bool alloc(void** p, size_t bytes, std::string* error);
  bool fill(__nv_bfloat16* dst, const std::string& name, int64_t rowOff, int64_t rows, int64_t colOff, int64_t cols,
            std::string* error);
  bool loadLayer(const std::string& prefix, Layer* L, std::string* error);
  // Enqueue one pass on stream_ (no sync); inputs in d_tokens_/d_pos_, output in d_out_.
  bool enqueue(Kind kind, int n, std::string* error);
  // The MTP pass over n pairs (tokens on the device, hidden rows of src): embedding, the pre-fc
  // norms, fc, the MTP layer, mtp.norm (its last row lands in mtpHidden_), the greedy draft of
  // the last row into *draft (and its probability into *prob with draftProb_).
  bool enqueueMtp(const int32_t* tokens, const __nv_bfloat16* src, int n, int32_t* draft, float* prob,
                  std::string* error);
  bool enqueueLayer(const Layer& L, int n, int ropeOffset, const __nv_bfloat16* nextNorm, __nv_bfloat16* normOut,
                    std::string* error);
  // enqueueLayer of a decode call with DecodeKernels::kFused (fusedStep(n)): from the residual
  // stream x_ (not hn_), six launches (five with the RoPE in the attention); normOut = nextNorm(x_) only when normOut is not hn_ (the
  // next layer's qkv GEMV norms x_ itself).
  bool enqueueLayerFused(const Layer& L, int n, int ropeOffset, const __nv_bfloat16* nextNorm, __nv_bfloat16* normOut,
                         std::string* error);
  bool fusedStep(int n) const { return fusedStep_ && n <= kGraphMaxTokens; }
  // enqueueLayer of a prefill call in two row halves, the all-reduces on commStream_ (see
  // GpuModelOptions::prefillOverlap); ends with stream_ free to go on only after both halves'
  // last all-reduce (enqueue() waits on halfDone_[1] before the lm_head).
  bool enqueueLayerOverlapped(const Layer& L, int n, const __nv_bfloat16* nextNorm, __nv_bfloat16* normOut,
                              std::string* error);
  bool overlapPrefill(int n) const;
  // Greedy tokens of n hidden rows into tokens[0, n): the lm_head in slices of kLogitsRows rows,
  // one argmax table. topProb (not null): also the top token's probability (the MTP calls, n = 1).
  bool enqueueGreedy(const __nv_bfloat16* hidden, int n, int32_t* tokens, float* topProb, std::string* error);
  // tp == 1 and fusedKernels: the fused kernels that need no all-reduce inside them.
  bool fuseTp1() const { return opt_.fusedKernels && shape_.tp == 1; }
  void dropGraphs();
  // false (with *error) only where a call would reach the split-K kernel without its partials.
  bool enqueueAttention(const Layer& L, int n, std::string* error);
  // A decode call's attention with the q/k norm, RoPE and KV store inside (kAttentionRope, kFused).
  bool enqueueAttentionRope(const Layer& L, int n, int ropeOffset, std::string* error);
  /// Sums buf (f32 or bf16) over the ranks. exact: never compressed, whatever the
  /// communicator's compression: the argmax table (ids) and the vocab-parallel embedding.
  bool allReduce(void* buf, size_t count, bool f32, std::string* error, bool exact = false,
                 cudaStream_t stream = nullptr);
  // Rows [row0, row0 + n): x_ += all-reduce(proj_); out = rmsnorm(x_) * w (proj_ is clobbered on
  // the unfused path), on `stream` (nullptr: stream_).
  bool allReduceAddNorm(const __nv_bfloat16* w, int n, __nv_bfloat16* out, std::string* error, int row0 = 0,
                        cudaStream_t stream = nullptr);
  void gemm(const __nv_bfloat16* W, int out, int in, const __nv_bfloat16* X, int n, void* Y, bool yF32);
  bool run(Kind kind, const int32_t* tokens, int n, int pos, int32_t* out, std::string* error);
  // Median of `iters` timed launches of exec on stream_ (CUDA events), in ms.
  bool medianGraphMs(cudaGraphExec_t exec, int iters, double* ms, std::string* error, int launches = 1);
  // The layer's four weight products alone at n rows (the timing helpers').
  void enqueueLayerGemms(const Layer& L, int n);
  // enqueue() captured into one graph, uploaded (and gated), launched once, then timed.
  bool timeCaptured(const std::function<void()>& enqueue, int iters, double* ms, std::string* error);

  ModelConfig cfg_;
  TpShape shape_;
  int device_;
  tpcomm::Communicator* comm_;
  GpuModelOptions opt_;
  bool skipAllReduce_ = false;
  RankGate* gate_ = nullptr;
  int gateRank_ = 0;
  // The step a call's enqueue is in (capturing a graph, or an eager call): marked again after each
  // cuBLAS, attention or tpcomm call inside it, which mark their own steps, so a timeout's message
  // names the one a late rank's host was stuck in.
  const char* enqueueStep_ = "enqueueing an eager call";
  void mark(const char* step);
  // Ranks as threads of one process (gate_), in an eager call: no rank launches an all-reduce
  // before every rank's host has come to it (RankGate::arrive). cuBLAS may block a thread's
  // cublasGemmEx until the device drains; a peer's all-reduce already spinning for a rank whose
  // host is blocked there never drains. False (with *error) when a rank left or the bound passed.
  bool eagerGate_ = false;
  bool collectiveGate(std::string* error);
  // A graph just instantiated: uploaded, then every rank's graph made before this rank goes on.
  bool graphReady(cudaGraphExec_t exec, std::string* error);
  cudaStream_t stream_ = nullptr;
  // Overlapped prefill (opt_.prefillOverlap, tp > 1): the all-reduces' stream, and per row half
  // the events "its GEMM output is ready" (stream_ -> commStream_) and "its sum + norm is done"
  // (commStream_ -> stream_). An event is re-recorded only after the wait on its last record
  // was enqueued, so each wait sees the record it means.
  cudaStream_t commStream_ = nullptr;
  cudaEvent_t halfReady_[2] = {nullptr, nullptr}, halfDone_[2] = {nullptr, nullptr};
  // GpuModelOptions::l2Prefetch: the cap in bytes (0: off); per weight, the product that follows
  // it in a step and that product's matrix size; the branch stream and its fork and join events.
  // prefetching_ is set while a decode graph is captured; prefetchPending_ while the branch has
  // work not yet joined back (run() joins it before the capture ends).
  size_t prefetchBytes_ = 0;
  std::unordered_map<const void*, std::pair<const void*, size_t>> nextWeight_;
  cudaStream_t prefetchStream_ = nullptr;
  cudaEvent_t prefetchFork_ = nullptr, prefetchJoin_ = nullptr;
  bool prefetching_ = false, prefetchPending_ = false;
  bool initL2Prefetch(std::string* error);
  // GpuModelOptions::attnPrefetch: the budget and the KV cap (a quarter of the L2); oAhead(L) the
  // plan for L's o_proj, handed to the decode attention.
  size_t attnAheadBytes_ = 0, attnAheadKvMax_ = 0;
  gpu::L2Ahead oAhead(const Layer& L) const;
  void prefetchAfter(const void* W);
  uint64_t streamGemvLaunches_ = 0;
  void joinPrefetch();
  cublasHandle_t cublas_ = nullptr;
  std::vector<void*> allocations_;
  size_t weightBytes_ = 0, kvBytes_ = 0, allocBytes_ = 0;
  bool prefillAttn_ = false;
  bool prefillFa3_ = false;  // prefillAttn_ calls through gpu::attentionPrefillFa3
  std::unique_ptr<LtGemms> lt_;  // QWEN_GEMM=lt: the shapes tuneGemms() found faster on cuBLASLt
  bool tuneGemms(bool keepAlways, std::string* error);
  std::unique_ptr<gpu::CudnnPrefillAttention> cudnnAttn_;  // prefillAttn_ calls through cuDNN
  bool cudnnDeclinedSaid_ = false;
  int hostPos_ = 0;  // run()'s pos: the first position of the call being enqueued
  int lastLogitsRows_ = 0;
  int qkvRows_ = 0, splits_ = 1, chunk_ = 256;
  // DecodeKernels: the tensor-core attention (its split bound, partials, tickets) and the fused step.
  bool tcAttn_ = false, fusedStep_ = false, ropeInAttn_ = false;
  unsigned streamPdl_ = 0;  // QWEN_STREAM_PDL: the kPdl* products launched with PDL
  // QWEN_STREAM_LAYER=on: a one-token fused step's o_proj, gate/up, down and the next layer's qkv
  // in one cooperative launch (gpu::streamLayer). nextLayer_ is the layer after the one being
  // enqueued (null for the last and the MTP layer); qkvReady_ says qkv_ already holds the layer's
  // qkv (the previous launch's phase 4). layerBarrier_: the launches' two barrier words;
  // layerFailed_: host-mapped, set by a block that waited past its bound (checked after a call).
  bool streamLayer_ = false, qkvReady_ = false;
  const Layer* nextLayer_ = nullptr;
  unsigned* layerBarrier_ = nullptr;
  int* layerFailed_ = nullptr;
  int* dLayerFailed_ = nullptr;
  // QWEN_PICK=fused (the default where the step streams): a one-token greedy call's final norm,
  // lm_head and argmax in one launch (gpu::streamPick, pickInHead(n)); pickScratch_ its partials
  // and ticket, zeroed once.
  bool pickFused_ = false;
  // QWEN_ROPE=qkv: a one-token fused step's qkv stream also norms, rotates and stores q and the
  // KV rows (gpu::streamQkvRope, one launch where qkNormRopeStore took a second); kernel (the
  // default): qkNormRopeStore after the stream.
  bool ropeInQkv_ = false;
  void* pickScratch_ = nullptr;
  size_t pickScratchBytes_ = 0;
  bool pickInHead(int n) const { return pickFused_ && n == 1; }  // pickFused_ implies the fused step
  int tcSplits_ = 1;
  float* tcPart_ = nullptr;
  int* tcTickets_ = nullptr;
  // weights
  __nv_bfloat16 *embed_ = nullptr, *lmHead_ = nullptr, *finalNorm_ = nullptr;
  std::vector<Layer> layers_;
  Layer mtpLayer_{};
  __nv_bfloat16 *mtpNormE_ = nullptr, *mtpNormH_ = nullptr, *mtpFc_ = nullptr, *mtpNorm_ = nullptr;
  // activations
  __nv_bfloat16* x_ = nullptr;  // residual stream [T, H]
  float *logits_ = nullptr, *table_ = nullptr, *attnPart_ = nullptr;
  // cat_ (the MTP fc's input, [T, 2H]) points into gu_'s memory: init says why they never overlap.
  __nv_bfloat16 *hn_ = nullptr, *qkv_ = nullptr, *q_ = nullptr, *att_ = nullptr, *proj_ = nullptr, *gu_ = nullptr,
                *act_ = nullptr, *hidden_ = nullptr, *mtpOut_ = nullptr, *cat_ = nullptr;
  // The MTP hidden a chained draft starts from: the last row of mtpOut_ ([T, H]). fusedKernels:
  // mtp.norm writes an n-row pass's rows to [T - n, T), so its last row is already here.
  __nv_bfloat16* mtpHidden_ = nullptr;
  // A call's inputs and outputs, each one copy (T = max(maxTokensPerCall, kGraphMaxTokens)):
  //   in  [2T int32]: positions in [T - m, T) (m = 1, or a chain run's n steps), tokens from T;
  //   out [2T words]: the drafts' top probabilities (float) in [T - m, T), tokens from T.
  // d* on the device, h* pinned (hIn_ and hRes_ in one allocation). dPos_: the position the
  // kernels being enqueued read (a chain run moves it step by step).
  int32_t *dIn_ = nullptr, *dTokens_ = nullptr, *dOut_ = nullptr, *hIn_ = nullptr, *hTokens_ = nullptr,
          *hOut_ = nullptr;
  const int32_t* dPos_ = nullptr;
  float *dProbEnd_ = nullptr, *hProbEnd_ = nullptr;  // one past the last probability (at T)
  bool draftProb_ = false;
  double draftP_ = 1.0;
  void* cublasWorkspace_ = nullptr;
  struct Captured {
    cudaGraph_t graph;  // kept for graphNodes()
    cudaGraphExec_t exec;
  };
  std::map<std::pair<int, int>, Captured> graphs_;
  int lastTargetN_ = 0;
  std::string normAlgo_;
  int overlappedCalls_ = 0;
};

}  // namespace qwen
