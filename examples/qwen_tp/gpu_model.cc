// gpu_model.cc: weights (synthetic on the GPU or sliced from a checkpoint), the forward passes
// as stream-ordered enqueues, CUDA-graph capture and replay, and the tpcomm all-reduces.
#include "gpu_model.h"
#include "lt_gemm.h"

#include <cuda_profiler_api.h>

#include <cstdint>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>

#include "gpu_kernels.h"
#include "kernels/attention_prefill_cudnn.h"
#include "kernels/stream_grid.h"
#include "rank_gate.h"
#include "safetensors.h"
#include "tpcomm/communicator.h"
#include "weights.h"

namespace qwen {
namespace {

bool cudaOk(cudaError_t e, const char* what, std::string* error) {
  if (e == cudaSuccess) return true;
  if (error) *error = std::string(what) + ": " + cudaGetErrorString(e);
  return false;
}
#define QWEN_CUDA(call) \
  do {                  \
    if (!cudaOk((call), #call, error)) return false; \
  } while (0)

// Owners that free on every path out (the early returns of QWEN_CUDA included).
struct EventPair {
  cudaEvent_t a = nullptr, b = nullptr;
  ~EventPair() {
    if (a) cudaEventDestroy(a);
    if (b) cudaEventDestroy(b);
  }
};
struct GraphOwner {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ~GraphOwner() {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
  }
};

const TensorSpec* findSpec(const std::vector<TensorSpec>& specs, const std::string& name) {
  for (const TensorSpec& s : specs)
    if (s.name == name) return &s;
  return nullptr;
}

}  // namespace

GpuModel::GpuModel(const ModelConfig& cfg, const TpShape& shape, int device, tpcomm::Communicator* comm)
    : cfg_(cfg), shape_(shape), device_(device), comm_(comm) {}

GpuModel::~GpuModel() {
  cudaSetDevice(device_);
  dropGraphs();
  if (cublas_) cublasDestroy(cublas_);
  for (void* p : allocations_) cudaFree(p);
  if (hIn_) cudaFreeHost(hIn_);
  if (layerFailed_) cudaFreeHost(layerFailed_);
  for (cudaEvent_t e : {halfReady_[0], halfReady_[1], halfDone_[0], halfDone_[1]})
    if (e) cudaEventDestroy(e);
  if (commStream_) cudaStreamDestroy(commStream_);
  for (cudaEvent_t e : {prefetchFork_, prefetchJoin_})
    if (e) cudaEventDestroy(e);
  if (prefetchStream_) cudaStreamDestroy(prefetchStream_);
  if (stream_) cudaStreamDestroy(stream_);
}

bool GpuModel::alloc(void** p, size_t bytes, std::string* error) {
  QWEN_CUDA(cudaMalloc(p, std::max<size_t>(bytes, 16)));
  allocations_.push_back(*p);
  allocBytes_ += bytes;
  return true;
}

// Fills dst [rows, cols] with rows rowOff.. and columns colOff.. of tensor `name`.
bool GpuModel::fill(__nv_bfloat16* dst, const std::string& name, int64_t rowOff, int64_t rows, int64_t colOff,
                    int64_t cols, std::string* error) {
  static thread_local std::vector<TensorSpec> specs;
  specs = modelTensorSpecs(cfg_);
  const TensorSpec* s = findSpec(specs, name);
  if (!s) return *error = "internal: no tensor spec " + name, false;
  const int64_t fullCols = s->shape.size() == 2 ? s->shape[1] : s->shape[0];
  weightBytes_ += static_cast<size_t>(rows * cols) * 2;
  if (!opt_.checkpoint) {
    gpu::initSynthetic(dst, rows, cols, fullCols, rowOff, colOff, opt_.seed, s->id, s->synthScale, s->synthOffset, stream_);
    return cudaOk(cudaGetLastError(), "initSynthetic", error);
  }
  const TensorView* v = nullptr;
  if (!opt_.checkpoint->require(name, s->shape, &v, error)) return false;
  std::vector<uint16_t> host(static_cast<size_t>(rows * cols));
  const size_t es = stDtypeSize(v->dtype);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t* e = v->data + ((rowOff + r) * fullCols + colOff + c) * es;
      uint16_t b;
      if (v->dtype == StDtype::kBF16) {
        std::memcpy(&b, e, 2);
      } else if (v->dtype == StDtype::kF16) {
        std::memcpy(&b, e, 2);
        b = floatToBf16(f16ToFloat(b));
      } else {
        float f;
        std::memcpy(&f, e, 4);
        b = floatToBf16(f);
      }
      host[static_cast<size_t>(r * cols + c)] = b;
    }
  QWEN_CUDA(cudaMemcpy(dst, host.data(), host.size() * 2, cudaMemcpyHostToDevice));
  return true;
}

bool GpuModel::loadLayer(const std::string& p, Layer* L, std::string* error) {
  const int64_t H = cfg_.hiddenSize, D = cfg_.headDim, hq = shape_.heads, hk = shape_.kvHeads, I = shape_.inter;
  auto a = [&](__nv_bfloat16** w, int64_t elems) { return alloc(reinterpret_cast<void**>(w), elems * 2, error); };
  if (!a(&L->ln1, H) || !a(&L->ln2, H) || !a(&L->qn, D) || !a(&L->kn, D) || !a(&L->wqkv, qkvRows_ * H) ||
      !a(&L->wo, H * hq * D) || !a(&L->wgu, 2 * I * H) || !a(&L->wd, H * I))
    return false;
  const size_t kv = static_cast<size_t>(opt_.ctxSize) * hk * D;
  if (!a(&L->kCache, static_cast<int64_t>(kv)) || !a(&L->vCache, static_cast<int64_t>(kv))) return false;
  kvBytes_ += 2 * kv * 2;
  QWEN_CUDA(cudaMemsetAsync(L->kCache, 0, kv * 2, stream_));
  QWEN_CUDA(cudaMemsetAsync(L->vCache, 0, kv * 2, stream_));
  return fill(L->ln1, p + "input_layernorm.weight", 0, 1, 0, H, error) &&
         fill(L->ln2, p + "post_attention_layernorm.weight", 0, 1, 0, H, error) &&
         fill(L->qn, p + "self_attn.q_norm.weight", 0, 1, 0, D, error) &&
         fill(L->kn, p + "self_attn.k_norm.weight", 0, 1, 0, D, error) &&
         fill(L->wqkv, p + "self_attn.q_proj.weight", shape_.headBegin() * D, hq * D, 0, H, error) &&
         fill(L->wqkv + hq * D * H, p + "self_attn.k_proj.weight", shape_.kvHeadBegin() * D, hk * D, 0, H, error) &&
         fill(L->wqkv + (hq + hk) * D * H, p + "self_attn.v_proj.weight", shape_.kvHeadBegin() * D, hk * D, 0, H, error) &&
         fill(L->wo, p + "self_attn.o_proj.weight", 0, H, shape_.headBegin() * D, hq * D, error) &&
         fill(L->wgu, p + "mlp.gate_proj.weight", shape_.interBegin(), I, 0, H, error) &&
         fill(L->wgu + I * H, p + "mlp.up_proj.weight", shape_.interBegin(), I, 0, H, error) &&
         fill(L->wd, p + "mlp.down_proj.weight", 0, H, shape_.interBegin(), I, error);
}

namespace {

// An A/B knob of the environment: *value = its value, or fallback when unset ("" for "leave the
// option as given"); false with "NAME=v: expected a, b or c" when it names none of `allowed`.
bool envChoice(const char* name, const char* fallback, std::initializer_list<const char*> allowed, std::string* value,
               std::string* error) {
  const char* e = std::getenv(name);
  *value = e ? e : fallback;
  if (!e) return true;
  std::string expected;
  size_t k = 0;
  for (const char* a : allowed) {
    if (*value == a) return true;
    if (k > 0) expected += k + 1 == allowed.size() ? " or " : ", ";
    expected += a;
    ++k;
  }
  return *error = std::string(name) + "=" + *value + ": expected " + expected, false;
}

// QWEN_STREAM_PDL: on (every stream, process-wide), off, or the fused step's streams that launch
// with PDL: auto (autoMask), chain (those after a stream: qkv, gate/up, down), attn (o_proj, after
// the attention), all, or a comma-separated list of qkv, o, gateup, down.
bool parseStreamPdl(const std::string& v, unsigned autoMask, unsigned* mask, std::string* error) {
  const unsigned chain = GpuModel::kPdlQkv | GpuModel::kPdlGateUp | GpuModel::kPdlDown;
  if (v == "on" || v == "off") return *mask = 0u, true;
  if (v == "auto") return *mask = autoMask, true;
  if (v == "chain") return *mask = chain, true;
  if (v == "attn") return *mask = GpuModel::kPdlO, true;
  if (v == "all") return *mask = chain | GpuModel::kPdlO, true;
  *mask = 0u;
  size_t at = 0;
  while (at <= v.size()) {
    const size_t end = std::min(v.find(',', at), v.size());
    const std::string p = v.substr(at, end - at);
    const unsigned bit = p == "qkv" ? GpuModel::kPdlQkv : p == "o" ? GpuModel::kPdlO : p == "gateup" ? GpuModel::kPdlGateUp
                       : p == "down" ? GpuModel::kPdlDown : 0u;
    if (!bit)
      return *error = "QWEN_STREAM_PDL=" + v + ": expected auto, on, off, chain, attn, all or a list of qkv, o, gateup, down",
             false;
    *mask |= bit;
    at = end + 1;
  }
  return true;
}

// An L2 budget from the environment's `name` (off, on or a size in MB, 1..4096) over `bytes`, with
// `halfL2` the L2's half; left as it is when unset. False, with the message, on any other value.
bool l2BytesFromEnv(const char* name, size_t halfL2, size_t* bytes, std::string* error) {
  const char* e = std::getenv(name);
  if (!e) return true;
  const std::string v = e;
  char* end = nullptr;
  const long mb = v.empty() ? 0 : std::strtol(v.c_str(), &end, 10);
  if (v == "off") *bytes = 0;
  else if (v == "on") *bytes = halfL2;
  else if (!v.empty() && end && *end == '\0' && mb > 0 && mb <= 4096) *bytes = static_cast<size_t>(mb) << 20;
  else return *error = std::string(name) + "=" + v + ": expected off, on or a size in MB (1..4096)", false;
  return true;
}

}  // namespace

bool GpuModel::init(const GpuModelOptions& opt, std::string* error) {
  opt_ = opt;
  if (!checkCtxSize(cfg_, opt_.ctxSize, error)) return false;
  if (opt_.maxTokensPerCall < 1) return *error = "maxTokensPerCall (--ubatch-size) must be >= 1", false;
  QWEN_CUDA(cudaSetDevice(device_));
  prefillAttn_ = opt_.prefillAttention && gpu::attentionPrefillSupported(cfg_.headDim, device_);
  if (prefillAttn_ && !gpu::prepareAttentionPrefill())  // here, before any rank's first collective
    return *error = "prefill attention: cudaFuncSetAttribute failed", false;
  std::string v;  // the environment's A/B knobs (envChoice)
  if (!envChoice("QWEN_PREFILL_ATTN", "", {"fa2", "fa3", "cudnn"}, &v, error)) return false;
  if (!v.empty()) opt_.prefillFa3 = v == "fa3", opt_.prefillCudnn = v == "cudnn";
  prefillFa3_ = prefillAttn_ && opt_.prefillFa3 &&
                gpu::attentionPrefillFa3Supported(cfg_.headDim, shape_.heads, shape_.kvHeads, device_);
  if (prefillFa3_ && !gpu::prepareAttentionPrefillFa3())
    return *error = "prefill attention (fa3): cudaFuncSetAttribute or cuTensorMapEncodeTiled failed", false;
  if (prefillAttn_ && opt_.prefillCudnn) {
    if (shape_.tp > 1)
      return *error = "prefill attention (cudnn) runs at --tp 1 only: a shape's first call builds a cuDNN plan, "
                      "which may load kernels while another rank's all-reduce spins", false;
    const size_t wsBytes = 64u << 20;  // lent to every call; a plan that needs more declines
    void* ws = nullptr;
    if (!alloc(&ws, wsBytes, error)) return false;
    cudnnAttn_ = std::make_unique<gpu::CudnnPrefillAttention>();
    std::string why;
    if (!cudnnAttn_->init(shape_.heads, shape_.kvHeads, cfg_.headDim, opt_.ctxSize, ws, wsBytes, &why))
      return *error = "prefill attention (cudnn): " + why, false;
  }
  int major = 0;
  QWEN_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_));
  if (!envChoice("QWEN_GEMV", "", {"cublas", "custom", "stream"}, &v, error)) return false;
  if (!v.empty()) opt_.customGemv = v == "custom", opt_.streamGemv = v == "stream";
  if (opt_.customGemv) opt_.streamGemv = false;
  if (opt_.customGemv && major < 8) return *error = "customGemv needs compute capability 8.0+ (mma.sync bf16)", false;
  if (opt_.streamGemv && !gpu::prepareGemvStream())
    return *error = "streamGemv: gemvStream's kernels did not load (cudaFuncSetAttribute failed)", false;
  // QWEN_STREAM_PDL=auto (the default): the down stream PDL-launched when its grid fills the
  // stream's slots (decode_ab.sh PART=streampdl; kernels/stream_grid.h).
  int sms = 0;
  QWEN_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device_));
  const unsigned autoPdl = gpu::streamFillsSlots(cfg_.hiddenSize, sms) ? kPdlDown : 0u;
  const char* streamPdlEnv = std::getenv("QWEN_STREAM_PDL");
  v = streamPdlEnv ? streamPdlEnv : "auto";
  if (!parseStreamPdl(v, autoPdl, &streamPdl_, error)) return false;
  gpu::setGemvStreamPdl(v == "on");
  // QWEN_STREAM_SLOTS=2|1: each stream's grid takes both resident slots of a multiprocessor (the
  // default) or one, leaving the other to the next stream's PDL-launched blocks (with
  // QWEN_STREAM_PDL=all: each product's first loads overlap the one before it).
  if (!envChoice("QWEN_STREAM_SLOTS", "2", {"1", "2"}, &v, error)) return false;
  gpu::setGemvStreamSlots(v == "1" ? 1 : 2);
  if (!envChoice("QWEN_STREAM_LAYER", "off", {"on", "off"}, &v, error)) return false;
  streamLayer_ = v == "on";
  using K = GpuModelOptions::DecodeKernels;
  if (!envChoice("QWEN_DECODE", "", {"old", "attn", "attnrope", "gemv", "fused"}, &v, error)) return false;
  if (!v.empty())
    opt_.decode = v == "old" ? K::kOld : v == "attn" ? K::kAttention : v == "attnrope" ? K::kAttentionRope
                : v == "gemv" ? K::kFusedGemv : K::kFused;
  // Every GEMV kernel loaded here, before any rank's first collective and before capture (loading
  // waits for the whole device).
  if (major >= 8 && !gpu::prepareGemv()) return *error = "GEMV kernels: cudaFuncGetAttributes failed", false;
  gpu::setPdl(opt_.pdl);
  // QWEN_NORM=loop|regs: A/B of addRmsNorm's two kernels (the same bits); unset: regs
  if (!envChoice("QWEN_NORM", "regs", {"loop", "regs"}, &v, error)) return false;
  gpu::setNormLoop(v == "loop");
  // QWEN_ARGMAX=loop|vec: A/B of the greedy argmax's loads (a float at a time with the sums, or
  // 16-byte loads in flight; the same tokens); unset: vec
  if (!envChoice("QWEN_ARGMAX", "vec", {"loop", "vec"}, &v, error)) return false;
  gpu::setArgmaxLoop(v == "loop");
  QWEN_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  if (opt_.prefillOverlap && shape_.tp > 1) {
    // The sums' stream gets the highest priority: its kernels take SMs as the GEMM's blocks
    // retire instead of queueing behind the whole GEMM.
    int least = 0, greatest = 0;
    QWEN_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    QWEN_CUDA(cudaStreamCreateWithPriority(&commStream_, cudaStreamNonBlocking, greatest));
    for (cudaEvent_t* e : {&halfReady_[0], &halfReady_[1], &halfDone_[0], &halfDone_[1]})
      QWEN_CUDA(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
  }
  if (cublasCreate(&cublas_) != CUBLAS_STATUS_SUCCESS) return *error = "cublasCreate failed", false;
  cublasSetStream(cublas_, stream_);
  const size_t wsBytes = 32u << 20;  // a fixed workspace: cuBLAS must not allocate inside capture
  if (!alloc(&cublasWorkspace_, wsBytes, error)) return false;
  cublasSetWorkspace(cublas_, cublasWorkspace_, wsBytes);
  const int64_t H = cfg_.hiddenSize, D = cfg_.headDim, hq = shape_.heads, hk = shape_.kvHeads, I = shape_.inter,
                Vl = shape_.vocab, T = std::max(opt_.maxTokensPerCall, kGraphMaxTokens);
  qkvRows_ = static_cast<int>((hq + 2 * hk) * D);
  // Split-K decode attention: at most splits_ chunks per query, each at least 64 slots (one load
  // round per block at head_dim 128) and sized by the query's own length (gpu::attention): 32
  // splits up to an 8K cache, 64 from 16K (a 32K cache: 512 slots a block, 64 x kv heads blocks
  // per token).
  chunk_ = 64;
  splits_ = std::min(64, std::max(32, (opt_.ctxSize + 255) / 256));
  auto a = [&](auto** w, int64_t bytes) { return alloc(reinterpret_cast<void**>(w), static_cast<size_t>(bytes), error); };
  if (!a(&embed_, Vl * H * 2) || !a(&finalNorm_, H * 2)) return false;
  if (!fill(embed_, "model.embed_tokens.weight", shape_.vocabBegin(), Vl, 0, H, error)) return false;
  if (!fill(finalNorm_, "model.norm.weight", 0, 1, 0, H, error)) return false;
  if (cfg_.tieWordEmbeddings) {
    lmHead_ = embed_;
  } else if (!a(&lmHead_, Vl * H * 2) || !fill(lmHead_, "lm_head.weight", shape_.vocabBegin(), Vl, 0, H, error)) {
    return false;
  }
  layers_.resize(cfg_.numLayers);
  for (int l = 0; l < cfg_.numLayers; ++l)
    if (!loadLayer("model.layers." + std::to_string(l) + ".", &layers_[l], error)) return false;
  if (hasMtp()) {
    if (!a(&mtpNormE_, H * 2) || !a(&mtpNormH_, H * 2) || !a(&mtpFc_, H * 2 * H * 2) || !a(&mtpNorm_, H * 2)) return false;
    if (!fill(mtpNormE_, "mtp.pre_fc_norm_embedding.weight", 0, 1, 0, H, error) ||
        !fill(mtpNormH_, "mtp.pre_fc_norm_hidden.weight", 0, 1, 0, H, error) ||
        !fill(mtpFc_, "mtp.fc.weight", 0, H, 0, 2 * H, error) || !fill(mtpNorm_, "mtp.norm.weight", 0, 1, 0, H, error) ||
        !loadLayer("mtp.layers.0.", &mtpLayer_, error))
      return false;
  }
  // The tensor-core decode attention (calls of up to kGraphMaxTokens tokens): splits bounded by
  // about two CTAs per SM for one token; tickets zeroed once (every call leaves them zero).
  tcAttn_ = opt_.decode != GpuModelOptions::DecodeKernels::kOld && gpu::attentionDecodeTcSupported(hq, hk, D);
  if (tcAttn_) {
    if (!gpu::prepareAttentionDecodeTc()) return *error = "decode attention: cudaFuncSetAttribute failed", false;
    tcSplits_ = gpu::decodeTcMaxSplits(device_, hk);
    const size_t tickets = gpu::decodeTcTickets(kGraphMaxTokens, hk);
    if (!a(&tcPart_, static_cast<int64_t>(gpu::decodeTcPartialFloats(kGraphMaxTokens, hq, tcSplits_) * 4)) ||
        !a(&tcTickets_, static_cast<int64_t>(tickets * 4)))
      return false;
    QWEN_CUDA(cudaMemsetAsync(tcTickets_, 0, tickets * 4, stream_));
  }
  // The fused step needs no all-reduce inside a layer (tp == 1) and 16-byte rows for the GEMVs.
  fusedStep_ = tcAttn_ && opt_.decode >= GpuModelOptions::DecodeKernels::kFusedGemv && shape_.tp == 1 && H % 8 == 0 &&
               H <= gpu::kGemvNormMaxIn && I % 8 == 0 && (hq * D) % 8 == 0;
  // q/k norm + RoPE + KV store inside the decode attention: kFused's step, or kAttentionRope's
  // (cuBLAS products, any tp).
  ropeInAttn_ = fusedStep_ ? opt_.decode == GpuModelOptions::DecodeKernels::kFused
                           : tcAttn_ && opt_.decode == GpuModelOptions::DecodeKernels::kAttentionRope;
  // The split-K decode kernel's partials (gpu::attention) serve calls of up to kGraphMaxTokens
  // tokens (all calls when the prefill kernel does not run this head_dim), and none when the
  // tensor-core decode kernel and the prefill kernel take every call; logits kLogitsRows rows at a
  // time.
  const int64_t attnRows = tcAttn_ && prefillAttn_ ? 0 : prefillAttn_ ? kGraphMaxTokens : T;
  // The MTP fc's input cat_ = [norm(embedding) | norm(hidden)] shares gu_'s memory: it is written
  // by the MTP prologue and read by the fc product alone, before the MTP layer's gate/up product
  // (or its fused SwiGLU GEMV, which writes act_) and after the last one of the layer before, in
  // one stream; nothing else reads either. 2 T H bf16 at 8b, 32 MB at a 2048-token chunk.
  const int64_t guCols = std::max<int64_t>(2 * I, 2 * H);
  if (!a(&x_, T * H * 2) || !a(&logits_, kLogitsRows * Vl * 4) || !a(&table_, T * shape_.tp * gpu::kArgmaxEntry * 4) ||
      (attnRows > 0 && !a(&attnPart_, attnRows * hq * splits_ * (D + 2) * 4)) || !a(&hn_, T * H * 2) ||
      !a(&qkv_, T * qkvRows_ * 2) ||
      !a(&q_, T * hq * D * 2) || !a(&att_, T * hq * D * 2) || !a(&proj_, T * H * 2) || !a(&gu_, T * guCols * 2) ||
      !a(&act_, T * I * 2) || !a(&hidden_, T * H * 2) || !a(&mtpOut_, T * H * 2))
    return false;
  cat_ = gu_;
  mtpHidden_ = mtpOut_ + (T - 1) * H;
  // QWEN_PICK=fused|split: a one-token greedy call's final norm, lm_head and argmax in one stream
  // launch (gpu::streamPick: the same logits, hidden row and token) or in three kernels.
  if (!envChoice("QWEN_PICK", "fused", {"fused", "split"}, &v, error)) return false;
  pickFused_ = v == "fused" && opt_.streamGemv && fuseTp1() && fusedStep_;
  // QWEN_ROPE=kernel|qkv: the q/k norm, RoPE and KV store of a one-token fused step after the qkv
  // stream (qkNormRopeStore) or inside it (gpu::streamQkvRope, sm_90+; the same bits).
  if (!envChoice("QWEN_ROPE", "kernel", {"kernel", "qkv"}, &v, error)) return false;
  if (v == "qkv" && opt_.streamGemv && fusedStep_ && !ropeInAttn_ && !streamLayer_) {
    gpu::QkvRope probe;
    probe.hidden = static_cast<int>(H), probe.hq = static_cast<int>(hq), probe.hk = static_cast<int>(hk);
    probe.headDim = static_cast<int>(D);
    ropeInQkv_ = gpu::streamQkvRopeCluster(probe) > 0;
  }
  if (pickFused_) {
    pickScratchBytes_ = gpu::streamPickScratch();
    if (!a(&pickScratch_, static_cast<int64_t>(pickScratchBytes_))) return false;
    QWEN_CUDA(cudaMemsetAsync(pickScratch_, 0, pickScratchBytes_, stream_));
  }
  // Inputs [positions | tokens] and outputs [probabilities | tokens], 2T words each (gpu_model.h).
  int32_t* dRes = nullptr;
  if (!a(&dIn_, 2 * T * 4) || !a(&dRes, 2 * T * 4)) return false;
  dTokens_ = dIn_ + T;
  dOut_ = dRes + T;
  dProbEnd_ = reinterpret_cast<float*>(dRes) + T;
  QWEN_CUDA(cudaMallocHost(reinterpret_cast<void**>(&hIn_), static_cast<size_t>(4 * T) * 4));
  if (streamLayer_) {
    if (!a(&layerBarrier_, 2 * sizeof(unsigned))) return false;
    QWEN_CUDA(cudaMemsetAsync(layerBarrier_, 0, 2 * sizeof(unsigned), stream_));
    QWEN_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&layerFailed_), sizeof(int), cudaHostAllocMapped));
    *layerFailed_ = 0;
    QWEN_CUDA(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dLayerFailed_), layerFailed_, 0));
  }
  hTokens_ = hIn_ + T;
  hOut_ = hIn_ + 3 * T;
  hProbEnd_ = reinterpret_cast<float*>(hIn_ + 2 * T) + T;
  {  // QWEN_GEMM=gemmex|lt|lt-always: the weight GEMMs through cublasGemmEx (unset) or cuBLASLt
     // timed here (lt-always: on cuBLASLt even where cublasGemmEx timed faster; for the tests)
    if (!envChoice("QWEN_GEMM", "gemmex", {"gemmex", "lt", "lt-always"}, &v, error)) return false;
    if (v != "gemmex") {
      lt_ = std::make_unique<LtGemms>();
      if (!lt_->init(cublasWorkspace_, wsBytes, error) || !tuneGemms(v == "lt-always", error)) return false;
    }
  }
  if (!initL2Prefetch(error)) return false;
  QWEN_CUDA(cudaStreamSynchronize(stream_));
  return true;
}

// GpuModelOptions::l2Prefetch (QWEN_PREFETCH=off|on|<MB>): the cap, the kernel loaded now (before
// any collective), the branch stream and its events, and the order of a step's weight products:
// each layer's qkv, o, gate/up, down, then the next layer's qkv; the last layer's down, then the
// lm_head; the MTP head's fc, its layer's four, then the lm_head.
bool GpuModel::initL2Prefetch(std::string* error) {
  int l2 = 0;
  QWEN_CUDA(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device_));
  const size_t halfL2 = static_cast<size_t>(std::max(l2, 2 << 20)) / 2;
  auto resolve = [&](size_t opt) { return opt == GpuModelOptions::kL2PrefetchHalfL2 ? halfL2 : opt; };
  // The attention's prefetch of o_proj (GpuModelOptions::attnPrefetch, QWEN_ATTN_PREFETCH).
  attnAheadBytes_ = resolve(opt_.attnPrefetch);
  if (!l2BytesFromEnv("QWEN_ATTN_PREFETCH", halfL2, &attnAheadBytes_, error)) return false;
  attnAheadKvMax_ = halfL2 / 2;
  size_t cap = resolve(opt_.l2Prefetch);
  if (!l2BytesFromEnv("QWEN_PREFETCH", halfL2, &cap, error)) return false;
  if (cap == 0) return true;
  if (!gpu::prepareL2Prefetch()) return *error = "L2 prefetch: cudaFuncGetAttributes failed", false;
  QWEN_CUDA(cudaStreamCreateWithFlags(&prefetchStream_, cudaStreamNonBlocking));
  QWEN_CUDA(cudaEventCreateWithFlags(&prefetchFork_, cudaEventDisableTiming));
  QWEN_CUDA(cudaEventCreateWithFlags(&prefetchJoin_, cudaEventDisableTiming));
  const size_t H = cfg_.hiddenSize, D = cfg_.headDim, hq = shape_.heads, I = shape_.inter, Vl = shape_.vocab;
  const size_t qkv = qkvRows_ * H * 2, o = H * hq * D * 2, gu = 2 * I * H * 2, down = H * I * 2, lm = Vl * H * 2;
  auto chain = [&](const Layer& L, const void* after, const void* next, size_t nextBytes) {
    if (after) nextWeight_[after] = {L.wqkv, qkv};
    nextWeight_[L.wqkv] = {L.wo, o};
    nextWeight_[L.wo] = {L.wgu, gu};
    nextWeight_[L.wgu] = {L.wd, down};
    nextWeight_[L.wd] = {next, nextBytes};
  };
  for (size_t l = 0; l < layers_.size(); ++l) {
    const bool last = l + 1 == layers_.size();
    chain(layers_[l], nullptr, last ? static_cast<const void*>(lmHead_) : layers_[l + 1].wqkv, last ? lm : qkv);
  }
  if (hasMtp()) chain(mtpLayer_, mtpFc_, lmHead_, lm);
  prefetchBytes_ = cap;
  return true;
}

// After the product of W is enqueued in a decode graph's capture: a branch off stream_ (it
// starts when that product ends) asks L2 for the first prefetchBytes_ of the next product's
// matrix. The branch's kernels follow each other on prefetchStream_; run() joins the last one.
void GpuModel::prefetchAfter(const void* W) {
  if (!prefetching_) return;
  auto it = nextWeight_.find(W);
  if (it == nextWeight_.end() || !it->second.first) return;
  if (cudaEventRecord(prefetchFork_, stream_) != cudaSuccess ||
      cudaStreamWaitEvent(prefetchStream_, prefetchFork_, 0) != cudaSuccess)
    return;  // the capture reports the error at its end
  prefetchPending_ = true;
  gpu::prefetchL2(it->second.first, std::min(it->second.second, prefetchBytes_), prefetchStream_);
}

void GpuModel::joinPrefetch() {
  if (!prefetchPending_) return;
  prefetchPending_ = false;
  if (cudaEventRecord(prefetchJoin_, prefetchStream_) == cudaSuccess) cudaStreamWaitEvent(stream_, prefetchJoin_, 0);
}

// QWEN_GEMM=lt: every weight product at the row counts the run's calls use most (1..8 tokens:
// decode, verify and draft steps; a full prefill chunk and, overlapped, its two halves), timed
// here, before any collective and outside capture. Each pass launches a product once per layer
// for up to kTuneLayers layers (distinct weights: none found in L2). Inputs are zeroed scratch;
// outputs land in scratch that every call rewrites before it reads.
bool GpuModel::tuneGemms(bool keepAlways, std::string* error) {
  constexpr int kTuneLayers = 8;
  const int H = cfg_.hiddenSize, D = cfg_.headDim, hq = shape_.heads, I = shape_.inter, Vl = shape_.vocab,
            T = std::max(opt_.maxTokensPerCall, kGraphMaxTokens);
  QWEN_CUDA(cudaMemsetAsync(hn_, 0, static_cast<size_t>(T) * H * 2, stream_));
  QWEN_CUDA(cudaMemsetAsync(att_, 0, static_cast<size_t>(T) * hq * D * 2, stream_));
  QWEN_CUDA(cudaMemsetAsync(act_, 0, static_cast<size_t>(T) * I * 2, stream_));
  QWEN_CUDA(cudaMemsetAsync(cat_, 0, static_cast<size_t>(T) * 2 * H * 2, stream_));
  std::vector<int> rows;
  for (int n = 1; n <= std::min(8, T); ++n) rows.push_back(n);
  if (opt_.maxTokensPerCall > kGraphMaxTokens) {
    const int n = opt_.maxTokensPerCall, m = (n / 2) & ~15;
    rows.push_back(n);
    if (commStream_ && n >= 64) rows.insert(rows.end(), {m, n - m});  // overlapPrefill's halves
  }
  std::vector<const __nv_bfloat16*> wqkv, wo, wgu, wd;
  for (int l = 0; l < std::min<int>(kTuneLayers, cfg_.numLayers); ++l) {
    const Layer& L = layers_[static_cast<size_t>(l)];
    wqkv.push_back(L.wqkv), wo.push_back(L.wo), wgu.push_back(L.wgu), wd.push_back(L.wd);
  }
  for (int n : rows) {
    if (!lt_->tune(cublas_, wqkv, qkvRows_, H, hn_, n, qkv_, false, stream_, error, keepAlways) ||
        !lt_->tune(cublas_, wo, H, hq * D, att_, n, proj_, false, stream_, error, keepAlways) ||
        !lt_->tune(cublas_, wgu, 2 * I, H, hn_, n, gu_, false, stream_, error, keepAlways) ||
        !lt_->tune(cublas_, wd, H, I, act_, n, proj_, false, stream_, error, keepAlways))
      return false;
    if (n <= kLogitsRows &&
        !lt_->tune(cublas_, {lmHead_}, Vl, H, hn_, n, logits_, true, stream_, error, keepAlways))
      return false;
    if (hasMtp() && n <= kGraphMaxTokens &&
        !lt_->tune(cublas_, {mtpFc_}, H, 2 * H, cat_, n, x_, false, stream_, error, keepAlways))
      return false;
  }
  return true;
}

std::string GpuModel::gemmLibrary() const {
  return lt_ ? "cuBLASLt timed at init (QWEN_GEMM=lt): " + lt_->describe() : std::string("cublasGemmEx");
}

void GpuModel::gemm(const __nv_bfloat16* W, int out, int in, const __nv_bfloat16* X, int n, void* Y, bool yF32) {
  // Row-major Y[n, out] = X[n, in] W[out, in]^T, i.e. column-major Y^T = W^T(op T) X^T.
  if (opt_.customGemv && n <= gpu::kGemvMaxTokens && gpu::gemvVectorizable(W, X, in) &&
      gpu::gemvBf16(W, out, in, X, n, Y, yF32, stream_))
    return prefetchAfter(W);
  if (opt_.streamGemv && n == 1 && gpu::gemvStream(W, out, in, X, n, Y, yF32, stream_)) {
    ++streamGemvLaunches_;
    return prefetchAfter(W);
  }
  if (lt_) {
    mark("in cublasLtMatmul");
    const bool ran = lt_->run(W, out, in, X, n, Y, yF32, stream_);
    mark(enqueueStep_);
    if (ran) return prefetchAfter(W);
  }
  const float alpha = 1.f, beta = 0.f;
  mark("in cublasGemmEx");
  cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &alpha, W, CUDA_R_16BF, in, X, CUDA_R_16BF, in, &beta, Y,
               yF32 ? CUDA_R_32F : CUDA_R_16BF, out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  mark(enqueueStep_);
  prefetchAfter(W);
}

bool GpuModel::allReduce(void* buf, size_t count, bool f32, std::string* error, bool exact, cudaStream_t stream) {
  if (shape_.tp == 1 || skipAllReduce_) return true;
  if (!stream) stream = stream_;
  const tpcomm::DataType dt = f32 ? tpcomm::DataType::kF32 : tpcomm::DataType::kBF16;
  if (!collectiveGate(error)) return false;
  mark("in a tpcomm allReduce");
  tpcomm::Status s =
      exact ? comm_->allReduce(buf, buf, count, dt, tpcomm::ReduceOp::kSum, stream, tpcomm::Compression::kNone)
            : comm_->allReduce(buf, buf, count, dt, tpcomm::ReduceOp::kSum, stream);
  mark(enqueueStep_);
  if (s == tpcomm::Status::kOk) return true;
  if (error) *error = std::string("tpcomm allReduce: ") + tpcomm::statusName(s) + ": " + tpcomm::lastErrorMessage();
  return false;
}

bool GpuModel::allReduceAddNorm(const __nv_bfloat16* w, int n, __nv_bfloat16* out, std::string* error, int row0,
                                cudaStream_t stream) {
  const int H = cfg_.hiddenSize;
  if (!stream) stream = stream_;
  const size_t off = static_cast<size_t>(row0) * H;
  __nv_bfloat16 *proj = proj_ + off, *x = x_ + off;
  out += off;
  if (opt_.fusedNorm && shape_.tp > 1 && !skipAllReduce_) {
    // in = proj, residual = x, out: three distinct buffers, as the call requires.
    if (!collectiveGate(error)) return false;
    mark("in a tpcomm allReduceResidualRmsNorm");
    tpcomm::Status s = comm_->allReduceResidualRmsNorm(proj, x, w, cfg_.rmsNormEps, out, static_cast<size_t>(n),
                                                       static_cast<size_t>(H), tpcomm::DataType::kBF16, stream);
    mark(enqueueStep_);
    if (s == tpcomm::Status::kOk) return normAlgo_ = comm_->lastAlgorithm(), true;
    if (error)
      *error = std::string("tpcomm allReduceResidualRmsNorm: ") + tpcomm::statusName(s) + ": " + tpcomm::lastErrorMessage();
    return false;
  }
  if (!allReduce(proj, static_cast<size_t>(n) * H, false, error, false, stream)) return false;
  if (comm_ && !skipAllReduce_) normAlgo_ = comm_->lastAlgorithm();
  gpu::addRmsNorm(x, proj, w, n, H, cfg_.rmsNormEps, out, stream);
  return true;
}

std::string GpuModel::lastAlgorithm() const { return comm_ ? comm_->lastAlgorithm() : ""; }

// Attention block then MLP block of one layer, starting from hn_ = norm1(x_); ends with
// x_ += mlp and normOut = nextNorm(x_) (the next layer's input norm, or the final norm).
bool GpuModel::enqueueLayer(const Layer& L, int n, int ropeOffset, const __nv_bfloat16* nextNorm, __nv_bfloat16* normOut,
                            std::string* error) {
  if (fusedStep(n)) return enqueueLayerFused(L, n, ropeOffset, nextNorm, normOut, error);
  const int H = cfg_.hiddenSize, D = cfg_.headDim, hq = shape_.heads, hk = shape_.kvHeads, I = shape_.inter;
  gemm(L.wqkv, qkvRows_, H, hn_, n, qkv_, false);
  if (ropeInAttn_ && n <= kGraphMaxTokens) {
    if (!enqueueAttentionRope(L, n, ropeOffset, error)) return false;
  } else {
    gpu::qkNormRopeStore(qkv_, n, hq, hk, D, L.qn, L.kn, cfg_.rmsNormEps, cfg_.ropeTheta, dPos_, ropeOffset, q_,
                         L.kCache, L.vCache, stream_);
    if (!enqueueAttention(L, n, error)) return false;
  }
  gemm(L.wo, H, hq * D, att_, n, proj_, false);
  if (!allReduceAddNorm(L.ln2, n, hn_, error)) return false;  // all-reduce + residual add + norm
  gemm(L.wgu, 2 * I, H, hn_, n, gu_, false);
  gpu::swiglu(gu_, n, I, act_, stream_);
  gemm(L.wd, H, I, act_, n, proj_, false);
  return allReduceAddNorm(nextNorm, n, normOut, error);
}

// x_ -> qkv (norm1 in the GEMV) -> q/k norm, RoPE, cache store (in the attention with kFused) ->
// attention -> x_ += o_proj ->
// act = SwiGLU(gate/up of norm2(x_)) -> x_ += down_proj [-> normOut = nextNorm(x_)].
bool GpuModel::enqueueLayerFused(const Layer& L, int n, int ropeOffset, const __nv_bfloat16* nextNorm,
                                 __nv_bfloat16* normOut, std::string* error) {
  const int H = cfg_.hiddenSize, D = cfg_.headDim, hq = shape_.heads, hk = shape_.kvHeads, I = shape_.inter;
  const float eps = cfg_.rmsNormEps;
  // One token under streamGemv: the stream's forms, each the bits of the unfused step's pair
  // (addRmsNorm + the stream; the stream + addRmsNorm's add; + swiglu).
  const bool stream = opt_.streamGemv && n == 1;
  // QWEN_STREAM_PDL: which of the layer's streams launch with PDL (streamPdl_, kPdl* bits), so
  // their blocks can be resident and load their first chunks of W before the kernel before them
  // ends; the process-wide setting (gpu::setGemvStreamPdl) is set per product, then left off.
  const unsigned pdl = stream ? streamPdl_ : 0u;
  auto pdlFor = [&](unsigned product) {
    if (pdl) gpu::setGemvStreamPdl((pdl & product) != 0u);
  };
  pdlFor(kPdlQkv);
  const bool qkvReady = stream && streamLayer_ && qkvReady_;  // the previous layer's launch made it
  qkvReady_ = false;
  if (stream && ropeInQkv_) {  // qkv, its q/k norm, RoPE and the KV store in one launch
    gpu::QkvRope r;
    r.wqkv = L.wqkv, r.x = x_, r.ln = L.ln1, r.qNorm = L.qn, r.kNorm = L.kn, r.pos = dPos_;
    r.q = q_, r.kCache = L.kCache, r.vCache = L.vCache;
    r.hidden = H, r.hq = hq, r.hk = hk, r.headDim = D, r.ropeOffset = ropeOffset;
    r.eps = eps, r.theta = cfg_.ropeTheta;
    if (!gpu::streamQkvRope(r, stream_)) return *error = "fused decode: streamQkvRope refused its operands", false;
    if (!enqueueAttention(L, n, error)) return false;
  } else if (!qkvReady && !(stream ? gpu::gemvStreamNorm(L.wqkv, qkvRows_, H, x_, L.ln1, eps, qkv_, stream_)
                                   : gpu::gemvNormBf16(L.wqkv, qkvRows_, H, x_, n, L.ln1, eps, qkv_, stream_))) {
    return *error = "fused decode: qkv GEMV refused its operands", false;
  } else if (ropeInAttn_) {
    if (!enqueueAttentionRope(L, n, ropeOffset, error)) return false;
  } else {
    gpu::qkNormRopeStore(qkv_, n, hq, hk, D, L.qn, L.kn, eps, cfg_.ropeTheta, dPos_, ropeOffset, q_, L.kCache, L.vCache,
                         stream_);
    if (!enqueueAttention(L, n, error)) return false;
  }
  bool ok;
  if (stream && streamLayer_) {
    pdlFor(0u);
    gpu::StreamLayer a;
    a.wo = L.wo, a.wgu = L.wgu, a.wd = L.wd, a.ln2 = L.ln2, a.att = att_, a.x = x_, a.act = act_;
    if (nextLayer_) a.wqkv = nextLayer_->wqkv, a.ln1 = nextLayer_->ln1, a.qkv = qkv_, a.qkvRows = qkvRows_;
    a.hidden = H, a.attIn = hq * D, a.inter = I, a.eps = eps;
    a.barrier = layerBarrier_, a.failed = dLayerFailed_, a.boundNs = 1000000000ull;  // 1 s
    ok = gpu::streamLayer(a, stream_);
    qkvReady_ = ok && nextLayer_;
    streamGemvLaunches_ += (qkvReady ? 0 : 1) + 3 + (qkvReady_ ? 1 : 0);  // products streamed
  } else if (stream) {
    pdlFor(kPdlO);
    ok = gpu::gemvStreamResidual(L.wo, H, hq * D, att_, 1, x_, stream_);
    pdlFor(kPdlGateUp);
    ok = ok && gpu::gemvStreamNormSwiglu(L.wgu, I, H, x_, L.ln2, eps, act_, stream_);
    pdlFor(kPdlDown);
    ok = ok && gpu::gemvStreamResidual(L.wd, H, I, act_, 1, x_, stream_);
    pdlFor(0u);
    streamGemvLaunches_ += 4;
  } else {
    ok = gpu::gemvResidual(L.wo, H, hq * D, att_, n, x_, stream_) &&
         gpu::gemvNormSwiglu(L.wgu, I, H, x_, n, L.ln2, eps, act_, stream_) &&
         gpu::gemvResidual(L.wd, H, I, act_, n, x_, stream_);
  }
  if (!ok) return *error = "fused decode: a GEMV refused its operands", false;
  // normOut null: the caller norms x_ itself (the last layer under pickInHead: streamPick does).
  if (normOut && normOut != hn_) gpu::addRmsNorm(x_, nullptr, nextNorm, n, H, eps, normOut, stream_);
  return true;
}

// A decode call's attention from the raw qkv (gpu::attentionDecodeTcRope): q/k norm, RoPE and the
// KV store of the call's slots inside it.
// False (with *error) when the kernel refuses the call: never for the calls of at most
// kGraphMaxTokens tokens it is given.
static_assert(GpuModel::kGraphMaxTokens <= gpu::kDecodeTcMaxTokens, "decode calls fit attentionDecodeTcRope");
bool GpuModel::enqueueAttentionRope(const Layer& L, int n, int ropeOffset, std::string* error) {
  gpu::DecodeRope rope;
  rope.qkv = qkv_, rope.qNorm = L.qn, rope.kNorm = L.kn, rope.eps = cfg_.rmsNormEps, rope.theta = cfg_.ropeTheta;
  rope.ropeOffset = ropeOffset;
  if (!gpu::attentionDecodeTcRope(rope, L.kCache, L.vCache, dPos_, n, shape_.heads, shape_.kvHeads, tcSplits_, tcPart_,
                                  tcTickets_, att_, stream_, oAhead(L)))
    return *error = "attentionDecodeTcRope refused a call of " + std::to_string(n) + " tokens", false;
  return true;
}

gpu::L2Ahead GpuModel::oAhead(const Layer& L) const {
  if (!attnAheadBytes_) return {};
  const int64_t D = cfg_.headDim, kvSlot = static_cast<int64_t>(shape_.kvHeads) * D * 2 * 2;  // K and V, bf16
  return gpu::planL2Ahead(L.wo, cfg_.hiddenSize, static_cast<int64_t>(shape_.heads) * D * 2, attnAheadBytes_, kvSlot,
                          attnAheadKvMax_);
}

std::string GpuModel::streamPdlProducts() const {
  std::string names;
  for (auto p : {std::make_pair(kPdlQkv, "qkv"), std::make_pair(kPdlO, "o"), std::make_pair(kPdlGateUp, "gateup"),
                 std::make_pair(kPdlDown, "down")})
    if (streamPdl_ & p.first) names += (names.empty() ? "" : ",") + std::string(p.second);
  return names.empty() ? "none" : names;
}

const char* GpuModel::smallGemv() const { return opt_.customGemv ? "custom" : opt_.streamGemv ? "stream" : "cublas"; }

const char* GpuModel::decodeKernels() const {
  return fusedStep_ ? (ropeInAttn_ ? "fused" : "gemv") : tcAttn_ ? (ropeInAttn_ ? "attnrope" : "attn") : "old";
}

bool GpuModel::overlapPrefill(int n) const {
  // Halves of at least 32 rows; never under capture (calls of <= kGraphMaxTokens tokens).
  return commStream_ && !skipAllReduce_ && n >= 64 && n > kGraphMaxTokens;
}

// One layer of a prefill call, rows in two halves A = [0, m) and B = [m, n). Who waits on whom
// (S = stream_: GEMMs and the decoder's kernels; C = commStream_: every tpcomm call of the layers):
//   S: wait done[A]; qkv(A); wait done[B]; qkv(B); rope + cache store (all rows); attention (all
//      rows: half B attends to half A's keys); o_proj(A); rec ready[A]; o_proj(B); rec ready[B]
//   C: wait ready[A]; sum + residual + norm (A); rec done[A]; wait ready[B]; same (B); rec done[B]
//   S: wait done[A]; MLP(A); rec ready[A]; wait done[B]; MLP(B); rec ready[B]
//   C: as above, into normOut
// So A's o_proj sum hides behind B's o_proj GEMM, B's behind A's MLP, A's MLP sum behind B's MLP
// and B's behind the next layer's qkv(A). Rows never mix outside attention, which runs after
// both halves' qkv: buffers are shared by row range and each range has one writer at a time
// (proj_[A] is written by down(A) only after done[A], i.e. after C read it). Every tpcomm call
// is on C, in the order the host enqueues them, so the communicator sees one ordered stream of
// calls; the embedding sum (S) precedes the first ready[A], and enqueue() makes S wait done[B]
// before the argmax exchange (S). tpcomm also orders one communicator's calls across streams
// itself (docs/reliability.md): the first sum of a call on C waits for everything S had
// enqueued when it was issued, layer 0's o_proj(B) included, so layer 0's first sum overlaps
// nothing; every later one overlaps as above. A failed tpcomm call returns false here; run()
// synchronises both streams before it reports.
bool GpuModel::enqueueLayerOverlapped(const Layer& L, int n, const __nv_bfloat16* nextNorm, __nv_bfloat16* normOut,
                                      std::string* error) {
  const int H = cfg_.hiddenSize, D = cfg_.headDim, hq = shape_.heads, hk = shape_.kvHeads, I = shape_.inter;
  const int m = (n / 2) & ~15;
  const int row0[2] = {0, m}, rows[2] = {m, n - m};
  auto rowsOf = [&](auto* p, int half, int width) { return p + static_cast<size_t>(row0[half]) * width; };
  auto sumHalves = [&](const __nv_bfloat16* w, __nv_bfloat16* out) {
    for (int h = 0; h < 2; ++h) {
      QWEN_CUDA(cudaStreamWaitEvent(commStream_, halfReady_[h], 0));
      if (!allReduceAddNorm(w, rows[h], out, error, row0[h], commStream_)) return false;
      QWEN_CUDA(cudaEventRecord(halfDone_[h], commStream_));
    }
    return true;
  };
  for (int h = 0; h < 2; ++h) {
    QWEN_CUDA(cudaStreamWaitEvent(stream_, halfDone_[h], 0));
    gemm(L.wqkv, qkvRows_, H, rowsOf(hn_, h, H), rows[h], rowsOf(qkv_, h, qkvRows_), false);
  }
  gpu::qkNormRopeStore(qkv_, n, hq, hk, D, L.qn, L.kn, cfg_.rmsNormEps, cfg_.ropeTheta, dPos_, 0, q_, L.kCache, L.vCache,
                       stream_);
  if (!enqueueAttention(L, n, error)) return false;
  for (int h = 0; h < 2; ++h) {
    gemm(L.wo, H, hq * D, rowsOf(att_, h, hq * D), rows[h], rowsOf(proj_, h, H), false);
    QWEN_CUDA(cudaEventRecord(halfReady_[h], stream_));
  }
  if (!sumHalves(L.ln2, hn_)) return false;
  for (int h = 0; h < 2; ++h) {
    QWEN_CUDA(cudaStreamWaitEvent(stream_, halfDone_[h], 0));
    gemm(L.wgu, 2 * I, H, rowsOf(hn_, h, H), rows[h], rowsOf(gu_, h, 2 * I), false);
    gpu::swiglu(rowsOf(gu_, h, 2 * I), rows[h], I, rowsOf(act_, h, I), stream_);
    gemm(L.wd, H, I, rowsOf(act_, h, I), rows[h], rowsOf(proj_, h, H), false);
    QWEN_CUDA(cudaEventRecord(halfReady_[h], stream_));
  }
  return sumHalves(nextNorm, normOut);
}

bool GpuModel::enqueueAttention(const Layer& L, int n, std::string* error) {
  const int D = cfg_.headDim, hq = shape_.heads, hk = shape_.kvHeads;
  if (prefillAttn_ && n > kGraphMaxTokens) {
    mark("enqueueing prefill attention");
    std::string why;
    if (cudnnAttn_) {
      if (cudnnAttn_->run(q_, L.kCache, L.vCache, hostPos_, n, att_, stream_, &why)) return true;
      if (!cudnnDeclinedSaid_)  // once per model: the run goes on with fa2 for such calls
        std::fprintf(stderr, "qwen_tp: cuDNN prefill attention declined %d queries at position %d (%s): fa2 runs them\n",
                     n, hostPos_, why.c_str());
      cudnnDeclinedSaid_ = true;
    }
    // fa3 launches nothing and returns false only when a tensor map cannot be encoded (a buffer
    // not 16-byte aligned): then fa2 runs this call, as it would every call of the run.
    if (!prefillFa3_ ||
        !gpu::attentionPrefillFa3(q_, L.kCache, L.vCache, dPos_, n, hq, hk, D, opt_.ctxSize, att_, stream_))
      gpu::attentionPrefill(q_, L.kCache, L.vCache, dPos_, n, hq, hk, D, att_, stream_);
    mark(enqueueStep_);
  } else if (tcAttn_ && n <= kGraphMaxTokens)
    gpu::attentionDecodeTc(q_, L.kCache, L.vCache, dPos_, n, hq, hk, tcSplits_, tcPart_, tcTickets_, att_, stream_,
                           oAhead(L));
  else if (attnPart_)
    gpu::attention(q_, L.kCache, L.vCache, dPos_, n, hq, hk, D, splits_, chunk_, attnPart_, att_, stream_);
  else  // init allocates no partials where the tensor-core and prefill kernels take every call
    return *error = "decode attention: a call of " + std::to_string(n) +
                    " tokens reached the split-K kernel, whose partials were not allocated",
           false;
  return true;
}

bool GpuModel::enqueueGreedy(const __nv_bfloat16* hidden, int n, int32_t* tokens, float* topProb, std::string* error) {
  const int H = cfg_.hiddenSize;
  for (int r0 = 0; r0 < n; r0 += kLogitsRows) {
    const int rows = std::min(kLogitsRows, n - r0);
    float* table = table_ + static_cast<size_t>(r0) * shape_.tp * gpu::kArgmaxEntry;
    gemm(lmHead_, shape_.vocab, H, hidden + static_cast<size_t>(r0) * H, rows, logits_, true);
    if (fuseTp1())  // nothing to gather: the pick in the same launch
      gpu::argmaxPick(logits_, rows, shape_.vocab, table, tokens + r0, topProb ? topProb + r0 : nullptr, stream_);
    else
      gpu::localArgmax(logits_, rows, shape_.vocab, shape_.vocabBegin(), shape_.tp, shape_.rank, table, stream_);
  }
  if (fuseTp1()) return true;
  // The table carries token ids: never compressed (a quantized id is another token).
  if (!allReduce(table_, static_cast<size_t>(n) * shape_.tp * gpu::kArgmaxEntry, true, error, true)) return false;
  gpu::pickArgmax(table_, n, shape_.tp, tokens, topProb, stream_);
  return true;
}

bool GpuModel::enqueue(Kind kind, int n, std::string* error) {
  const int H = cfg_.hiddenSize, T = std::max(opt_.maxTokensPerCall, kGraphMaxTokens);
  const float eps = cfg_.rmsNormEps;
  const bool chain = kind == kMtpChainRun, mtp = kind != kTarget && kind != kPrefill;
  // The inputs in one copy: m positions, then the tokens (a chain run: n positions, one token).
  const int m = chain ? n : 1, nTokens = chain ? 1 : n;
  QWEN_CUDA(cudaMemcpyAsync(dIn_ + T - m, hIn_ + T - m, static_cast<size_t>(m + nTokens) * 4, cudaMemcpyHostToDevice,
                            stream_));
  int outs = 1;  // tokens this call returns
  if (chain) {
    // n chained steps: step k at position dIn_[T - n + k]; its token the input for k = 0, else
    // step k-1's draft, read where that step's argmax wrote it (dOut_[k - 1]); mtpHidden_
    // carries the output hidden from step to step, as between mtpChain calls.
    for (int k = 0; k < n; ++k) {
      dPos_ = dIn_ + T - n + k;
      if (!enqueueMtp(k == 0 ? dTokens_ : dOut_ + k - 1, mtpHidden_, 1, dOut_ + k, dProbEnd_ - n + k, error))
        return false;
    }
    outs = n;
  } else if (mtp) {
    dPos_ = dIn_ + T - 1;
    if (!enqueueMtp(dTokens_, kind == kMtpFromTarget ? hidden_ : mtpHidden_, n, dOut_, dProbEnd_ - 1, error))
      return false;
  } else {
    dPos_ = dIn_ + T - 1;
    if (fuseTp1()) {
      gpu::embedRmsNorm(dTokens_, n, embed_, shape_.vocabBegin(), shape_.vocab, H, layers_[0].ln1, eps, x_, hn_,
                        stream_);
    } else {
      gpu::embed(dTokens_, n, embed_, shape_.vocabBegin(), shape_.vocab, H, x_, stream_);
      // The vocab-parallel embedding: exact (never compressed).
      if (!allReduce(x_, static_cast<size_t>(n) * H, false, error, true)) return false;
      gpu::addRmsNorm(x_, nullptr, layers_[0].ln1, n, H, eps, hn_, stream_);
    }
    const bool overlap = overlapPrefill(n);
    qkvReady_ = false;
    for (int l = 0; l < cfg_.numLayers; ++l) {
      const bool last = l + 1 == cfg_.numLayers;
      const __nv_bfloat16* nextNorm = last ? finalNorm_ : layers_[l + 1].ln1;
      __nv_bfloat16* out = last ? (pickInHead(n) ? nullptr : hidden_) : hn_;
      nextLayer_ = last ? nullptr : &layers_[l + 1];
      if (!(overlap ? enqueueLayerOverlapped(layers_[l], n, nextNorm, out, error)
                    : enqueueLayer(layers_[l], n, 0, nextNorm, out, error)))
        return false;
    }
    nextLayer_ = nullptr;
    qkvReady_ = false;
    if (overlap) {
      QWEN_CUDA(cudaStreamWaitEvent(stream_, halfDone_[1], 0));  // C's last sum precedes the lm_head
      ++overlappedCalls_;
    }
    // A prefill chunk needs the greedy token after its last position only.
    outs = kind == kPrefill ? 1 : n;
    if (pickInHead(n)) {  // the final norm of x_ (into hidden_), the lm_head and the argmax in one launch
      if (!gpu::streamPick(lmHead_, shape_.vocab, H, x_, finalNorm_, eps, hidden_, logits_, pickScratch_,
                           pickScratchBytes_, dOut_, stream_))
        return *error = "streamPick refused the lm_head's operands", false;
      ++streamGemvLaunches_;
    } else if (!enqueueGreedy(hidden_ + static_cast<size_t>(n - outs) * H, outs, dOut_, nullptr, error)) {
      return false;
    }
  }
  // The outputs in one copy: the tokens, after their probabilities when the drafts have them.
  const int words = mtp && draftProb_ ? 2 * outs : outs;
  QWEN_CUDA(cudaMemcpyAsync(hOut_ + outs - words, dOut_ + outs - words, static_cast<size_t>(words) * 4,
                            cudaMemcpyDeviceToHost, stream_));
  return cudaOk(cudaGetLastError(), "kernel launch", error);
}

// MTP: fc(concat(norm_e(embed(token)), norm_h(hidden))) -> one decoder layer -> mtp.norm.
bool GpuModel::enqueueMtp(const int32_t* tokens, const __nv_bfloat16* src, int n, int32_t* draft, float* prob,
                          std::string* error) {
  const int H = cfg_.hiddenSize, T = std::max(opt_.maxTokensPerCall, kGraphMaxTokens);
  const float eps = cfg_.rmsNormEps;
  const bool gather = fuseTp1();  // the prologue reads the embedding rows itself
  if (!gather) {
    gpu::embed(tokens, n, embed_, shape_.vocabBegin(), shape_.vocab, H, x_, stream_);
    if (!allReduce(x_, static_cast<size_t>(n) * H, false, error, true)) return false;  // exact, as the target's
  }
  if (opt_.fusedKernels) {
    gpu::mtpPrologue(gather ? tokens : nullptr, embed_, shape_.vocabBegin(), shape_.vocab, x_, src, mtpNormE_,
                     mtpNormH_, n, H, eps, cat_, stream_);
  } else {
    gpu::rmsNormBf16(x_, H, mtpNormE_, n, H, eps, cat_, 2 * H, stream_);
    gpu::rmsNormBf16(src, H, mtpNormH_, n, H, eps, cat_ + H, 2 * H, stream_);
  }
  gemm(mtpFc_, H, 2 * H, cat_, n, x_, false);
  if (!fusedStep(n)) gpu::addRmsNorm(x_, nullptr, mtpLayer_.ln1, n, H, eps, hn_, stream_);  // fused: in the qkv GEMV
  // mtp.norm's rows: fused, rows [T - n, T) of mtpOut_, the last one mtpHidden_ (what the next
  // chained step reads; src was read above, before this overwrites it); else rows [0, n), the
  // last copied there.
  __nv_bfloat16* out = opt_.fusedKernels ? mtpOut_ + static_cast<size_t>(T - n) * H : mtpOut_;
  if (!enqueueLayer(mtpLayer_, n, 1, mtpNorm_, out, error)) return false;
  const __nv_bfloat16* lastRow = out + static_cast<size_t>(n - 1) * H;
  if (!opt_.fusedKernels) gpu::copyRowsBf16(lastRow, H, mtpHidden_, H, 1, H, stream_);
  return enqueueGreedy(lastRow, 1, draft, draftProb_ ? prob : nullptr, error);
}

bool GpuModel::run(Kind kind, const int32_t* tokens, int n, int pos, int32_t* out, std::string* error) {
  QWEN_CUDA(cudaSetDevice(device_));
  const int T = std::max(opt_.maxTokensPerCall, kGraphMaxTokens);
  if (n <= 0 || n > T || pos < 0 || pos + n > opt_.ctxSize)
    return *error = "positions [" + std::to_string(pos) + ", " + std::to_string(pos + n) + ") outside the KV cache of " +
                    std::to_string(opt_.ctxSize) + " (or more than " + std::to_string(T) + " tokens per call)",
           false;
  const int nTokens = kind == kMtpChainRun ? 1 : n;  // a chain run takes one token, n positions
  for (int i = 0; i < nTokens; ++i)
    if (tokens[i] < 0 || tokens[i] >= cfg_.vocabSize) return *error = "token id " + std::to_string(tokens[i]) + " out of range", false;
  std::memcpy(hTokens_, tokens, static_cast<size_t>(nTokens) * 4);
  const int m = kind == kMtpChainRun ? n : 1;  // positions, just before the tokens (gpu_model.h)
  hostPos_ = pos;
  for (int k = 0; k < m; ++k) hTokens_[k - m] = pos + k;
  if (opt_.useGraphs && n <= kGraphMaxTokens) {
    auto key = std::make_pair(static_cast<int>(kind), n);
    auto it = graphs_.find(key);
    if (it == graphs_.end()) {
      GraphOwner g;
      mark(enqueueStep_ = "capturing a CUDA graph");
      QWEN_CUDA(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
      std::string captureError;
      prefetching_ = prefetchBytes_ > 0;
      bool ok = enqueue(kind, n, &captureError);
      prefetching_ = false;
      joinPrefetch();
      cudaError_t e = cudaStreamEndCapture(stream_, &g.graph);
      if (!ok) return *error = "during graph capture: " + captureError, false;
      QWEN_CUDA(e);
      mark("instantiating a CUDA graph");
      QWEN_CUDA(cudaGraphInstantiate(&g.exec, g.graph, 0));
      it = graphs_.emplace(key, Captured{g.graph, g.exec}).first;
      g.graph = nullptr, g.exec = nullptr;  // owned by graphs_ now
      if (!graphReady(it->second.exec, error)) return false;
    }
    mark("launching a CUDA graph");
    QWEN_CUDA(cudaGraphLaunch(it->second.exec, stream_));
  } else {
    mark(enqueueStep_ = "enqueueing an eager call");
    eagerGate_ = gate_ && shape_.tp > 1;
    const bool ok = enqueue(kind, n, error);
    eagerGate_ = false;
    if (!ok) {
      if (gate_) *error += "; " + gate_->describe();  // before this rank's own steps below move on
      if (commStream_) cudaStreamSynchronize(commStream_);  // nothing of this call left in flight
      cudaStreamSynchronize(stream_);                          // (its copies read the pinned inputs)
      return false;
    }
  }
  mark("waiting for its streams");
  if (commStream_) QWEN_CUDA(cudaStreamSynchronize(commStream_));
  QWEN_CUDA(cudaStreamSynchronize(stream_));
  mark("between calls");
  if (layerFailed_ && *static_cast<volatile int*>(layerFailed_)) {
    // A streamLayer block waited past its bound at a grid barrier: the call's output is not
    // trusted; the barrier words are zeroed for the next call.
    *layerFailed_ = 0;
    QWEN_CUDA(cudaMemset(layerBarrier_, 0, 2 * sizeof(unsigned)));
    return *error = "streamLayer (QWEN_STREAM_LAYER=on): a block waited past its 1 s bound at a grid barrier", false;
  }
  if (comm_) {
    tpcomm::Status s = comm_->checkError();
    if (s != tpcomm::Status::kOk) {
      *error = std::string("tpcomm: ") + tpcomm::lastErrorMessage();
      if (gate_) *error += "; " + gate_->describe();
      return false;
    }
  }
  lastLogitsRows_ = kind == kTarget ? (n - 1) % kLogitsRows + 1 : 1;
  const int outs = kind == kTarget || kind == kMtpChainRun ? n : 1;
  std::memcpy(out, hOut_, static_cast<size_t>(outs) * 4);
  if (draftProb_ && kind != kTarget && kind != kPrefill) draftP_ = hProbEnd_[-1];
  return true;
}

bool GpuModel::target(const int32_t* tokens, int n, int pos, int32_t* next, std::string* error) {
  lastTargetN_ = n;
  return run(kTarget, tokens, n, pos, next, error);
}

bool GpuModel::prefill(const int32_t* tokens, int n, int pos, int32_t* last, std::string* error) {
  lastTargetN_ = n;
  return run(kPrefill, tokens, n, pos, last, error);
}

bool GpuModel::mtpFromTarget(const int32_t* tokens, int n, int slot, int32_t* draft, std::string* error) {
  if (!hasMtp()) return *error = cfg_.name + ": the model has no MTP head", false;
  if (n > lastTargetN_) return *error = "mtpFromTarget: more rows than the last target() call produced", false;
  return run(kMtpFromTarget, tokens, n, slot, draft, error);
}

bool GpuModel::mtpChain(int32_t token, int slot, int32_t* draft, std::string* error) {
  if (!hasMtp()) return *error = cfg_.name + ": the model has no MTP head", false;
  return run(kMtpChain, &token, 1, slot, draft, error);
}

bool GpuModel::mtpChainRun(int32_t token, int slot, int count, int32_t* drafts, double* probs, std::string* error) {
  if (!hasMtp()) return *error = cfg_.name + ": the model has no MTP head", false;
  if (count < 1) return *error = "mtpChainRun: count " + std::to_string(count) + " must be >= 1", false;
  if (count > kGraphMaxTokens) return DecoderEngine::mtpChainRun(token, slot, count, drafts, probs, error);  // step by step
  if (!run(kMtpChainRun, &token, count, slot, drafts, error)) return false;
  if (probs)
    for (int k = 0; k < count; ++k) probs[k] = draftProb_ ? static_cast<double>(hProbEnd_[k - count]) : 1.0;
  return true;
}

void GpuModel::dropGraphs() {
  for (auto& g : graphs_) {
    cudaGraphExecDestroy(g.second.exec);
    cudaGraphDestroy(g.second.graph);
  }
  graphs_.clear();
}

void GpuModel::setSkipAllReduce(bool skip) {
  if (skip == skipAllReduce_) return;
  skipAllReduce_ = skip;
  dropGraphs();
}

bool GpuModel::enableDraftProbability() {
  if (!draftProb_) dropGraphs();  // the MTP graphs gain the probability's copy
  return draftProb_ = true;
}

bool GpuModel::timeTargetStep(int n, int pos, int iters, double* ms, std::string* error) {
  std::vector<int32_t> toks(static_cast<size_t>(n), 0), out(static_cast<size_t>(n));
  if (!target(toks.data(), n, pos, out.data(), error)) return false;  // captures the graph
  // QWEN_NCU_STEP=1: the process's first one-token step replay inside cudaProfilerStart/Stop, so
  // `ncu --profile-from-start off` profiles exactly one decode step's kernels.
  static bool ncuDone = false;
  const char* ncu = std::getenv("QWEN_NCU_STEP");
  if (n == 1 && !ncuDone && ncu && std::string(ncu) == "1") {
    ncuDone = true;
    QWEN_CUDA(cudaStreamSynchronize(stream_));
    QWEN_CUDA(cudaProfilerStart());
    QWEN_CUDA(cudaGraphLaunch(graphs_.at({kTarget, n}).exec, stream_));
    QWEN_CUDA(cudaStreamSynchronize(stream_));
    QWEN_CUDA(cudaProfilerStop());
  }
  return medianGraphMs(graphs_.at({kTarget, n}).exec, iters, ms, error);
}

bool GpuModel::timeTargetStepBackToBack(int pos, int launches, int iters, double* ms, std::string* error) {
  int32_t tok = 0, out = 0;
  if (!target(&tok, 1, pos, &out, error)) return false;  // captures the graph
  if (!opt_.useGraphs) return *ms = 0, true;  // nothing to replay: not timed
  return medianGraphMs(graphs_.at({kTarget, 1}).exec, iters, ms, error, launches);
}

bool GpuModel::timeDraftStep(int slot, int iters, double* ms, std::string* error) {
  int32_t draft = 0;
  if (!mtpChain(0, slot, &draft, error)) return false;  // captures the graph
  auto it = graphs_.find({kMtpChain, 1});
  if (it == graphs_.end()) return *error = "timeDraftStep: the draft step has no CUDA graph (graphs off?)", false;
  return medianGraphMs(it->second.exec, iters, ms, error);
}

bool GpuModel::timeDraftChain(int slot, int count, int iters, double* ms, std::string* error) {
  std::vector<int32_t> drafts(static_cast<size_t>(std::max(count, 1)));
  if (!mtpChainRun(0, slot, count, drafts.data(), nullptr, error)) return false;  // captures the graph
  auto it = graphs_.find({kMtpChainRun, count});
  if (it == graphs_.end()) return *error = "timeDraftChain: the chain has no CUDA graph (graphs off?)", false;
  return medianGraphMs(it->second.exec, iters, ms, error);
}

bool GpuModel::graphNodes(StepGraph which, int n, GraphNodes* out, std::string* error) const {
  const Kind kind = which == StepGraph::kTarget ? kTarget : which == StepGraph::kDraft ? kMtpChain : kMtpChainRun;
  if (which == StepGraph::kDraft && n != 1) return *error = "graphNodes: a draft step has n = 1", false;
  auto it = graphs_.find({kind, n});
  if (it == graphs_.end()) return *error = "graphNodes: that graph was not captured (yet)", false;
  size_t count = 0;
  QWEN_CUDA(cudaGraphGetNodes(it->second.graph, nullptr, &count));
  std::vector<cudaGraphNode_t> nodes(count);
  QWEN_CUDA(cudaGraphGetNodes(it->second.graph, nodes.data(), &count));
  *out = GraphNodes{};
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType t;
    QWEN_CUDA(cudaGraphNodeGetType(node, &t));
    int* slot = t == cudaGraphNodeTypeKernel   ? &out->kernels
                : t == cudaGraphNodeTypeMemcpy ? &out->copies
                : t == cudaGraphNodeTypeMemset ? &out->memsets
                                               : &out->other;
    ++*slot;
  }
  return true;
}

bool GpuModel::medianGraphMs(cudaGraphExec_t exec, int iters, double* ms, std::string* error, int launches) {
  if (iters < 1) return *error = "medianGraphMs: iters must be >= 1", false;
  if (launches < 1) return *error = "medianGraphMs: launches must be >= 1", false;
  EventPair ev;  // destroyed on every return
  QWEN_CUDA(cudaEventCreate(&ev.a));
  QWEN_CUDA(cudaEventCreate(&ev.b));
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    QWEN_CUDA(cudaEventRecord(ev.a, stream_));
    for (int k = 0; k < launches; ++k) QWEN_CUDA(cudaGraphLaunch(exec, stream_));
    QWEN_CUDA(cudaEventRecord(ev.b, stream_));
    QWEN_CUDA(cudaEventSynchronize(ev.b));
    float t;
    QWEN_CUDA(cudaEventElapsedTime(&t, ev.a, ev.b));
    times.push_back(static_cast<double>(t) / launches);
  }
  std::sort(times.begin(), times.end());
  *ms = times[times.size() / 2];
  return true;
}

bool GpuModel::timeStepGemms(int n, int iters, double* ms, size_t* bytes, std::string* error) {
  const int H = cfg_.hiddenSize, D = cfg_.headDim, hq = shape_.heads, I = shape_.inter;
  *bytes = 2 * (static_cast<size_t>(shape_.vocab) * H +
                layers_.size() * (static_cast<size_t>(qkvRows_) * H + static_cast<size_t>(H) * hq * D +
                                  static_cast<size_t>(2 * I) * H + static_cast<size_t>(H) * I));
  // The same gemm() calls and buffers as enqueueLayer / enqueueGreedy (contents do not matter).
  // With the fused step, its GEMVs (prologues and epilogues included; R = proj_, not x_).
  const float eps = cfg_.rmsNormEps;
  auto enqueue = [&] {
    for (const Layer& L : layers_) {
      if (fusedStep(n) && opt_.streamGemv && n == 1) {
        gpu::gemvStreamNorm(L.wqkv, qkvRows_, H, x_, L.ln1, eps, qkv_, stream_);
        gpu::gemvStreamResidual(L.wo, H, hq * D, att_, 1, proj_, stream_);
        gpu::gemvStreamNormSwiglu(L.wgu, I, H, x_, L.ln2, eps, act_, stream_);
        gpu::gemvStreamResidual(L.wd, H, I, act_, 1, proj_, stream_);
        continue;
      }
      if (fusedStep(n)) {
        gpu::gemvNormBf16(L.wqkv, qkvRows_, H, x_, n, L.ln1, eps, qkv_, stream_);
        gpu::gemvResidual(L.wo, H, hq * D, att_, n, proj_, stream_);
        gpu::gemvNormSwiglu(L.wgu, I, H, x_, n, L.ln2, eps, act_, stream_);
        gpu::gemvResidual(L.wd, H, I, act_, n, proj_, stream_);
        continue;
      }
      enqueueLayerGemms(L, n);
    }
    gemm(lmHead_, shape_.vocab, H, hn_, n, logits_, true);
  };
  return timeCaptured(enqueue, iters, ms, error);
}

bool GpuModel::timeChunkGemms(int n, int iters, double* ms, double* flop, std::string* error) {
  if (n <= kGraphMaxTokens || n > opt_.maxTokensPerCall)
    return *error = "timeChunkGemms: n must be a prefill chunk (" + std::to_string(kGraphMaxTokens + 1) + ".." +
                    std::to_string(opt_.maxTokensPerCall) + " rows)", false;
  const int H = cfg_.hiddenSize, D = cfg_.headDim, hq = shape_.heads, I = shape_.inter;
  *flop = 2.0 * n * static_cast<double>(layers_.size()) *
          (static_cast<double>(qkvRows_) * H + static_cast<double>(H) * hq * D + 2.0 * I * H + static_cast<double>(H) * I);
  auto enqueue = [&] {
    for (const Layer& L : layers_) enqueueLayerGemms(L, n);
  };
  return timeCaptured(enqueue, iters, ms, error);
}

// enqueueLayer's four gemm() calls at n rows, on their own buffers (contents do not matter).
void GpuModel::enqueueLayerGemms(const Layer& L, int n) {
  const int H = cfg_.hiddenSize, D = cfg_.headDim, hq = shape_.heads, I = shape_.inter;
  gemm(L.wqkv, qkvRows_, H, hn_, n, qkv_, false);
  gemm(L.wo, H, hq * D, att_, n, proj_, false);
  gemm(L.wgu, 2 * I, H, hn_, n, gu_, false);
  gemm(L.wd, H, I, act_, n, proj_, false);
}

bool GpuModel::timeChunkAttention(int n, int pos, int iters, double* ms, double* flop, std::string* error) {
  if (!prefillAttn_ || cudnnAttn_ || n <= kGraphMaxTokens || n > opt_.maxTokensPerCall || pos < 0 ||
      pos + n > opt_.ctxSize)
    return *error = "timeChunkAttention: " + std::to_string(n) + " rows at position " + std::to_string(pos) +
                    ": not a chunk the fa2 / fa3 prefill kernel runs within the KV cache",
           false;
  const int T = std::max(opt_.maxTokensPerCall, kGraphMaxTokens);
  hTokens_[-1] = pos;  // the call's position, where enqueue() puts it (dIn_[T - 1])
  QWEN_CUDA(cudaMemcpyAsync(dIn_ + T - 1, hIn_ + T - 1, 4, cudaMemcpyHostToDevice, stream_));
  QWEN_CUDA(cudaStreamSynchronize(stream_));
  dPos_ = dIn_ + T - 1;
  hostPos_ = pos;
  const double keys = static_cast<double>(n) * pos + 0.5 * n * (n + 1.0);  // query i sees i + 1 keys
  *flop = 4.0 * cfg_.headDim * shape_.heads * keys * static_cast<double>(layers_.size());
  bool ok = true;
  auto enqueue = [&] {
    for (const Layer& L : layers_) ok = ok && enqueueAttention(L, n, error);
  };
  return timeCaptured(enqueue, iters, ms, error) && ok;
}

bool GpuModel::timeCaptured(const std::function<void()>& enqueue, int iters, double* ms, std::string* error) {
  GraphOwner g;  // graph and exec destroyed on every return
  QWEN_CUDA(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  enqueue();
  QWEN_CUDA(cudaStreamEndCapture(stream_, &g.graph));
  QWEN_CUDA(cudaGraphInstantiate(&g.exec, g.graph, 0));
  if (!graphReady(g.exec, error)) return false;
  QWEN_CUDA(cudaGraphLaunch(g.exec, stream_));  // warm-up
  return medianGraphMs(g.exec, iters, ms, error);
}

void GpuModel::mark(const char* step) {
  if (gate_) gate_->mark(gateRank_, step);
}

bool GpuModel::collectiveGate(std::string* error) {
  if (!eagerGate_) return true;
  mark("at the collective gate");
  std::string why;
  if (gate_->arrive(gateRank_, "collective gate (every rank's host at an eager call's all-reduce before any rank "
                               "launches it)", &why))
    return true;
  if (error) *error = why;
  return false;
}

bool GpuModel::graphReady(cudaGraphExec_t exec, std::string* error) {
  if (!gate_) return true;
  // Uploaded here, so the first launch does not make (and wait for) the device copy of the graph.
  mark("uploading a CUDA graph");
  QWEN_CUDA(cudaGraphUpload(exec, stream_));
  QWEN_CUDA(cudaStreamSynchronize(stream_));
  mark("at the graph gate");
  return gate_->arrive(gateRank_, "graph gate (every rank's new CUDA graph made before any rank launches its own)",
                       error);
}

size_t GpuModel::decodeStepBytes(int pos) const {
  const size_t H = cfg_.hiddenSize, D = cfg_.headDim, hq = shape_.heads, hk = shape_.kvHeads, I = shape_.inter;
  const size_t layer = 2 * (static_cast<size_t>(qkvRows_) * H + H * hq * D + 2 * I * H + H * I + 2 * H + 2 * D);
  const size_t kv = 2 * 2 * (static_cast<size_t>(pos) + 1) * hk * D;  // K and V, bf16, slots 0..pos
  return layers_.size() * (layer + kv) + 2 * static_cast<size_t>(shape_.vocab) * H + 2 * H /* embedding row */ +
         2 * H /* final norm */;
}

bool GpuModel::lastLogits(int rows, std::vector<float>* out, std::string* error) {
  if (rows < 1 || rows > lastLogitsRows_)
    return *error = "lastLogits: " + std::to_string(rows) + " rows asked, the last call kept " +
                    std::to_string(lastLogitsRows_),
           false;
  out->resize(static_cast<size_t>(rows) * shape_.vocab);
  const float* src = logits_ + static_cast<size_t>(lastLogitsRows_ - rows) * shape_.vocab;
  // On this rank's stream: a rank's host calls must never wait on the device as a whole (another
  // rank sharing the GPU may be spinning in a collective; docs/reliability.md).
  QWEN_CUDA(cudaMemcpyAsync(out->data(), src, out->size() * 4, cudaMemcpyDeviceToHost, stream_));
  QWEN_CUDA(cudaStreamSynchronize(stream_));
  return true;
}

}  // namespace qwen
