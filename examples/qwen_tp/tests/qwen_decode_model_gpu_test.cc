// GPU tests of the decoder on every GpuModelOptions::decode path (part of qwen_gpu_test; label
// gpu), on a tiny Qwen3 with head_dim 128 and 4 query heads per KV head (the qwen3-8b group), so
// the tensor-core attention and the fused step serve it: logits against the fp32 CPU reference
// (the bound of LogitsMatchTheCpuReference), MTP speculative output token-identical to greedy
// at short and long (multi-chunk) context, and the kernels one decode step launches.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "cpu_model.h"
#include "gpu_kernels.h"
#include "gpu_model.h"
#include "speculative.h"

namespace qwen {
namespace {

// ---- the model on every decode path ----

// tiny with head_dim 128 and 4 query heads per KV head (the 8b shape's group), so the tensor-core
// attention and the fused step serve it.
ModelConfig tiny128() {
  ModelConfig c;
  std::string err;
  presetConfig("tiny", &c, &err);
  c.headDim = 128;
  c.numKvHeads = 2;
  return c;
}

using Kernels = GpuModelOptions::DecodeKernels;
const char* kernelsName(Kernels k) {
  return k == Kernels::kOld             ? "old"
         : k == Kernels::kAttention     ? "attn"
         : k == Kernels::kAttentionRope ? "attnrope"
         : k == Kernels::kFusedGemv     ? "gemv"
                                        : "fused";
}

std::vector<int32_t> promptIds(int n, int vocab) {
  std::vector<int32_t> p(n);
  for (int i = 0; i < n; ++i) p[i] = (i * 389 + 17) % vocab;
  return p;
}

// Logits against the fp32 CPU reference (LogitsMatchTheCpuReference's bound: 3% of max |logit| per
// position, the greedy token equal where the reference's top-2 margin exceeds twice that): the
// prompt in chunks (`chunks`: > 16 tokens take the prefill kernel, <= 16 the decode path under
// test), then decode steps through the graphs.
void checkAgainstCpu(Kernels kernels, const std::vector<int>& chunks, const char* gemmLibrary = "cublasGemmEx") {
  unsetenv("QWEN_DECODE");  // the option under test, not the environment's
  const ModelConfig c = tiny128();
  const uint64_t seed = 31;
  HostWeights w;
  makeSyntheticHostWeights(c, seed, /*roundBf16=*/true, &w);
  TpShape s;
  std::string err;
  ASSERT_TRUE(makeTpShape(c, 1, 0, &s, &err));
  CpuModel cpu(c, s, &w, nullptr, 64);
  GpuModel gpu(c, s, 0, nullptr);
  GpuModelOptions o;
  o.ctxSize = 64;
  o.maxTokensPerCall = 32;
  o.seed = seed;
  o.decode = kernels;
  ASSERT_TRUE(gpu.init(o, &err)) << err;
  ASSERT_STREQ(gpu.decodeKernels(), kernelsName(kernels));
  ASSERT_EQ(gpu.gemmLibrary().rfind(gemmLibrary, 0), 0u) << gpu.gemmLibrary();
  int total = 0;
  for (int len : chunks) total += len;
  const auto p = promptIds(total, c.vocabSize);
  const int V = c.vocabSize;
  int pos = 0;
  std::vector<int32_t> nc(total), ng(total);
  auto compare = [&](const float* lc, const std::vector<float>& lg, const std::string& what) {
    float mx = 0, e1 = 0;
    for (int i = 0; i < V; ++i) mx = std::max(mx, std::fabs(lc[i])), e1 = std::max(e1, std::fabs(lg[i] - lc[i]));
    EXPECT_LE(e1, 0.03f * mx) << kernelsName(kernels) << " " << what;
  };
  for (int len : chunks) {
    ASSERT_TRUE(cpu.target(p.data() + pos, len, pos, nc.data() + pos, &err)) << err;
    ASSERT_TRUE(gpu.target(p.data() + pos, len, pos, ng.data() + pos, &err)) << err;
    std::vector<float> lg;
    ASSERT_TRUE(gpu.lastLogits(1, &lg, &err)) << err;
    compare(cpu.lastLogits().data() + static_cast<size_t>(len - 1) * V, lg, "prompt position " + std::to_string(pos + len - 1));
    pos += len;
  }
  std::vector<float> lg;
  int32_t tok = nc[total - 1];
  for (int t = total; t < total + 12; ++t) {
    int32_t a = -1, b = -1;
    ASSERT_TRUE(cpu.target(&tok, 1, t, &a, &err)) << err;
    ASSERT_TRUE(gpu.target(&tok, 1, t, &b, &err)) << err;
    ASSERT_TRUE(gpu.lastLogits(1, &lg, &err)) << err;
    compare(cpu.lastLogits().data(), lg, "decode position " + std::to_string(t));
    tok = a;  // follow the reference
  }
}

TEST(QwenDecodeGpu, EveryPathMatchesTheCpuReference) {
  for (Kernels k : {Kernels::kOld, Kernels::kAttention, Kernels::kAttentionRope, Kernels::kFusedGemv, Kernels::kFused}) {
    checkAgainstCpu(k, {20});        // prefill kernel, then decode steps
    checkAgainstCpu(k, {8, 7, 16});  // the decode path for the prompt's chunks too
  }
}

// QWEN_GEMM=lt-always: every weight product the run tunes (1..8 rows and the 32-row chunk) on
// cuBLASLt's fastest algorithm whatever cublasGemmEx timed, so gemm()'s cuBLASLt path serves the
// prompt chunks and the decode graphs; QWEN_GEMM=lt keeps only the faster shapes. Untuned row
// counts (16, 20) run cublasGemmEx in the same model; an unknown value is refused at init.
TEST(QwenDecodeGpu, CublasLtGemmsMatchTheCpuReference) {
  struct Env {
    ~Env() { unsetenv("QWEN_GEMM"); }
  } restore;
  setenv("QWEN_GEMM", "lt-always", 1);
  checkAgainstCpu(Kernels::kAttention, {20}, "cuBLASLt timed at init");
  checkAgainstCpu(Kernels::kAttention, {8, 7, 32}, "cuBLASLt timed at init");
  setenv("QWEN_GEMM", "lt", 1);
  checkAgainstCpu(Kernels::kAttention, {8, 7, 16}, "cuBLASLt timed at init");
  setenv("QWEN_GEMM", "cublasLt", 1);
  {
    const ModelConfig c = tiny128();
    TpShape sh;
    std::string err;
    ASSERT_TRUE(makeTpShape(c, 1, 0, &sh, &err));
    GpuModel gpu(c, sh, 0, nullptr);
    GpuModelOptions o;
    o.ctxSize = 64;
    EXPECT_FALSE(gpu.init(o, &err));
    EXPECT_NE(err.find("QWEN_GEMM=cublasLt: expected gemmex, lt or lt-always"), std::string::npos) << err;
  }
}

// What one decode step's graph launches on each path (printed for the results page): fused
// launches 5 kernels a layer plus the embedding + first norm, the final norm, the lm_head and the
// argmax; attnrope one a layer fewer than attn; every new path launches fewer than old.
TEST(QwenDecodeGpu, DecodeStepKernelCounts) {
  unsetenv("QWEN_DECODE");
  const ModelConfig c = tiny128();
  TpShape s;
  std::string err;
  ASSERT_TRUE(makeTpShape(c, 1, 0, &s, &err));
  int old = 0, attn = 0;
  for (Kernels k : {Kernels::kOld, Kernels::kAttention, Kernels::kAttentionRope, Kernels::kFusedGemv, Kernels::kFused}) {
    GpuModel m(c, s, 0, nullptr);
    GpuModelOptions o;
    o.ctxSize = 64;
    o.decode = k;
    ASSERT_TRUE(m.init(o, &err)) << err;
    double ms = 0, b2b = 0;
    ASSERT_TRUE(m.timeTargetStep(1, 20, 3, &ms, &err)) << err;
    ASSERT_TRUE(m.timeTargetStepBackToBack(20, 4, 2, &b2b, &err)) << err;
    EXPECT_GT(b2b, 0.0) << kernelsName(k);
    EXPECT_FALSE(m.timeTargetStepBackToBack(20, 0, 2, &b2b, &err));
    EXPECT_NE(err.find("launches must be >= 1"), std::string::npos) << err;
    GraphNodes g;
    ASSERT_TRUE(m.graphNodes(GpuModel::StepGraph::kTarget, 1, &g, &err)) << err;
    std::printf("decode step, %d layers, %s: %d kernels, %d copies\n", c.numLayers, kernelsName(k), g.kernels, g.copies);
    if (k == Kernels::kOld) old = g.kernels;
    else EXPECT_LT(g.kernels, old) << kernelsName(k);
    if (k == Kernels::kAttention) attn = g.kernels;
    if (k == Kernels::kAttentionRope) EXPECT_EQ(g.kernels, attn - c.numLayers) << "one qkNormRopeStore a layer fewer";
    if (k == Kernels::kFused) EXPECT_LE(g.kernels, 5 * c.numLayers + 6);
  }
}

// Greedy, then MTP speculation (real drafts and simulated acceptance) on the same path: every
// token equal. A query's attention bits depend on its length only, and a fused GEMV's on the
// token's row only, so a verify call of N + 1 tokens reproduces N + 1 one-token steps.
bool generateOn(Kernels kernels, int promptLen, int ctx, const GenerateOptions& g, std::vector<int32_t>* out,
                GenerateStats* st, std::string* err) {
  const ModelConfig c = tiny128();
  TpShape s;
  if (!makeTpShape(c, 1, 0, &s, err)) return false;
  GpuModel m(c, s, 0, nullptr);
  GpuModelOptions o;
  o.ctxSize = ctx;
  o.maxTokensPerCall = 256;
  o.seed = 5;
  o.decode = kernels;
  if (!m.init(o, err)) return false;
  if (std::strcmp(m.decodeKernels(), kernelsName(kernels)) != 0) return *err = "decode kernels " + std::string(m.decodeKernels()), false;
  return generate(m, promptIds(promptLen, c.vocabSize), g, out, st, err);
}

// On path k: greedy, then speculation at each draft count (real drafts and simulated acceptance)
// against it, token for token. Short: one chunk per query. Long: about 12 chunks of 64 slots,
// merged by the last CTA.
void expectSpeculativeEqualsGreedy(Kernels k, const std::string& label) {
  const struct {
    int prompt, predict;
    std::vector<int> drafts;
  } ctxs[] = {{24, 160, {1, 2, 3, 4, 5, 6}}, {700, 64, {3, 5}}};
  for (const auto& cx : ctxs) {
    const int ctx = cx.prompt + cx.predict + 16;
    std::vector<int32_t> ref;
    GenerateStats st;
    std::string err;
    GenerateOptions g;
    g.nPredict = cx.predict;
    ASSERT_TRUE(generateOn(k, cx.prompt, ctx, g, &ref, &st, &err)) << label << ": " << err;
    for (int n : cx.drafts)
      for (double sim : {-1.0, 0.6}) {
        GenerateOptions gs = g;
        gs.draftNMax = n;
        gs.simAcceptance = sim;
        gs.reference = &ref;
        std::vector<int32_t> out;
        ASSERT_TRUE(generateOn(k, cx.prompt, ctx, gs, &out, &st, &err)) << label << ": " << err;
        EXPECT_EQ(out, ref) << label << " prompt " << cx.prompt << " N " << n << " sim " << sim;
        if (sim > 0) EXPECT_GT(st.accepted, 0);
      }
  }
}

TEST(QwenDecodeGpu, SpeculativeEqualsGreedyOnTheNewPaths) {
  unsetenv("QWEN_DECODE");
  for (Kernels k : {Kernels::kAttention, Kernels::kAttentionRope, Kernels::kFusedGemv, Kernels::kFused})
    expectSpeculativeEqualsGreedy(k, kernelsName(k));
}

// GpuModelOptions::streamGemv (QWEN_GEMV=stream): the one-token products through gpu::gemvStream,
// on the default path and the fused one (its lm_head): logits against the CPU reference; a
// one-token step launches the stream for every product (none fell back to cuBLAS), a four-token
// call none (verify calls stay on cuBLAS, whose bits differ from the stream's, so speculative
// runs do not use it: qwen_tp's --gemv auto); the fused step's stream forms (gemv, fused) give
// the bits of the unfused step (attn, attnrope), and so does QWEN_STREAM_LAYER=on (streamLayer).
// Bad QWEN_GEMV, QWEN_STREAM_PDL and QWEN_STREAM_LAYER values are refused at init; customGemv wins
// over streamGemv.
TEST(QwenDecodeGpu, StreamGemvMatchesTheCpuReference) {
  unsetenv("QWEN_DECODE");
  struct Env {
    ~Env() {
      for (const char* v : {"QWEN_GEMV", "QWEN_STREAM_PDL", "QWEN_STREAM_LAYER", "QWEN_PICK", "QWEN_ROPE",
                            "QWEN_STREAM_SLOTS"})
        unsetenv(v);
    }
  } restore;
  setenv("QWEN_GEMV", "stream", 1);
  for (Kernels k : {Kernels::kAttention, Kernels::kFused}) {
    checkAgainstCpu(k, {20});
    checkAgainstCpu(k, {8, 7, 16});
  }
  const ModelConfig c = tiny128();
  TpShape sh;
  std::string err;
  ASSERT_TRUE(makeTpShape(c, 1, 0, &sh, &err));
  {
    GpuModel m(c, sh, 0, nullptr);
    GpuModelOptions o;
    o.ctxSize = 64;
    ASSERT_TRUE(m.init(o, &err)) << err;
    EXPECT_STREQ(m.smallGemv(), "stream");
    double ms = 0;
    ASSERT_TRUE(m.timeTargetStep(1, 20, 3, &ms, &err)) << err;
    // A layer's four products and the lm_head, at least once: none fell back to cuBLAS.
    const uint64_t oneToken = m.streamGemvLaunches();
    EXPECT_GE(oneToken, static_cast<uint64_t>(4 * c.numLayers + 1));
    ASSERT_TRUE(m.timeTargetStep(4, 20, 3, &ms, &err)) << err;
    EXPECT_EQ(m.streamGemvLaunches(), oneToken) << "a four-token call runs cuBLAS";
  }
  // The fused step's stream forms give the unfused step's bits: gemv against attn, fused against
  // attnrope, logits of twelve one-token steps after a 20-token prompt (the prefill kernels).
  auto stepLogits = [&](Kernels k, std::vector<std::vector<float>>* all, std::vector<int32_t>* tokens = nullptr) {
    GpuModel m(c, sh, 0, nullptr);
    GpuModelOptions o;
    o.ctxSize = 64;
    o.maxTokensPerCall = 32;
    o.seed = 17;
    o.decode = k;
    ASSERT_TRUE(m.init(o, &err)) << err;
    ASSERT_STREQ(m.decodeKernels(), kernelsName(k));
    const auto p = promptIds(20, c.vocabSize);
    std::vector<int32_t> toks(20);
    ASSERT_TRUE(m.target(p.data(), 20, 0, toks.data(), &err)) << err;
    int32_t tok = toks[19];
    const uint64_t before = m.streamGemvLaunches();
    for (int t = 20; t < 32; ++t) {
      std::vector<float> lg;
      ASSERT_TRUE(m.target(&tok, 1, t, &tok, &err)) << err;
      ASSERT_TRUE(m.lastLogits(1, &lg, &err)) << err;
      all->push_back(lg);
      if (tokens) tokens->push_back(tok);
    }
    EXPECT_GT(m.streamGemvLaunches(), before) << kernelsName(k);
  };
  auto sameLogits = [](const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b,
                       const std::string& what) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_EQ(0, std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float))) << what << ", step " << i;
  };
  for (auto pair : {std::make_pair(Kernels::kFusedGemv, Kernels::kAttention),
                    std::make_pair(Kernels::kFused, Kernels::kAttentionRope)}) {
    std::vector<std::vector<float>> fused, plain;
    stepLogits(pair.first, &fused);
    stepLogits(pair.second, &plain);
    sameLogits(fused, plain, std::string(kernelsName(pair.first)) + " against " + kernelsName(pair.second));
  }
  // QWEN_STREAM_LAYER=on (a layer's products after the attention in one cooperative launch):
  // the same logits as the separate streams on gemv and fused.
  for (Kernels k : {Kernels::kFusedGemv, Kernels::kFused}) {
    std::vector<std::vector<float>> one, separate;
    setenv("QWEN_STREAM_LAYER", "on", 1);
    stepLogits(k, &one);
    unsetenv("QWEN_STREAM_LAYER");
    stepLogits(k, &separate);
    sameLogits(one, separate, std::string("QWEN_STREAM_LAYER=on against off, ") + kernelsName(k));
  }
  // QWEN_PICK=fused (the default: the final norm, the lm_head and the argmax in one launch,
  // gpu::streamPick) against split (three kernels): the same logits and tokens at every step.
  for (Kernels k : {Kernels::kFusedGemv, Kernels::kFused}) {
    std::vector<std::vector<float>> one, three;
    std::vector<int32_t> oneTok, threeTok;
    setenv("QWEN_PICK", "split", 1);
    stepLogits(k, &three, &threeTok);
    unsetenv("QWEN_PICK");
    stepLogits(k, &one, &oneTok);
    sameLogits(one, three, std::string("QWEN_PICK=fused against split, ") + kernelsName(k));
    EXPECT_EQ(oneTok, threeTok) << "QWEN_PICK=fused against split, " << kernelsName(k);
  }
  // QWEN_ROPE=qkv (the q/k norm, RoPE and KV store inside the qkv stream, gpu::streamQkvRope)
  // against kernel (qkNormRopeStore after it): the same logits and tokens, on gemv (fused keeps
  // the RoPE in the attention and ignores it).
  {
    std::vector<std::vector<float>> inQkv, after;
    std::vector<int32_t> inQkvTok, afterTok;
    setenv("QWEN_ROPE", "qkv", 1);
    stepLogits(Kernels::kFusedGemv, &inQkv, &inQkvTok);
    unsetenv("QWEN_ROPE");
    stepLogits(Kernels::kFusedGemv, &after, &afterTok);
    sameLogits(inQkv, after, "QWEN_ROPE=qkv against kernel");
    EXPECT_EQ(inQkvTok, afterTok) << "QWEN_ROPE=qkv against kernel";
    // It ran: a layer's qkNormRopeStore launch is gone from the one-token step's graph (sm_90+).
    auto kernelsOf = [&](const char* rope, int* kernels) {
      setenv("QWEN_ROPE", rope, 1);
      GpuModel m(c, sh, 0, nullptr);
      GpuModelOptions o;
      o.ctxSize = 64;
      o.decode = Kernels::kFusedGemv;
      ASSERT_TRUE(m.init(o, &err)) << err;
      double ms = 0;
      ASSERT_TRUE(m.timeTargetStep(1, 2, 1, &ms, &err)) << err;
      GraphNodes g;
      ASSERT_TRUE(m.graphNodes(GpuModel::StepGraph::kTarget, 1, &g, &err)) << err;
      *kernels = g.kernels;
      unsetenv("QWEN_ROPE");
    };
    int withRope = 0, without = 0, major = 0;
    kernelsOf("kernel", &withRope);
    kernelsOf("qkv", &without);
    ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
    EXPECT_EQ(without, major >= 9 ? withRope - c.numLayers : withRope) << "QWEN_ROPE=qkv: one launch a layer fewer";
  }
  // QWEN_STREAM_PDL's early launches (a stream's blocks resident before the kernel it reads has
  // ended) leave the logits as they are: a read before its wait would change them.
  {
    std::vector<std::vector<float>> off;
    setenv("QWEN_STREAM_PDL", "off", 1);
    stepLogits(Kernels::kFusedGemv, &off);
    for (const char* mode : {"auto", "down", "chain", "attn", "all", "qkv,down"}) {
      std::vector<std::vector<float>> early;
      setenv("QWEN_STREAM_PDL", mode, 1);
      stepLogits(Kernels::kFusedGemv, &early);
      unsetenv("QWEN_STREAM_PDL");
      sameLogits(early, off, std::string("QWEN_STREAM_PDL=") + mode + " against off");
    }
    // QWEN_STREAM_SLOTS=1 (a stream's grid on one slot a multiprocessor, the next stream's early
    // blocks on the other) with PDL on every stream: the same logits.
    std::vector<std::vector<float>> oneSlot;
    setenv("QWEN_STREAM_SLOTS", "1", 1);
    setenv("QWEN_STREAM_PDL", "all", 1);
    stepLogits(Kernels::kFusedGemv, &oneSlot);
    unsetenv("QWEN_STREAM_SLOTS");
    unsetenv("QWEN_STREAM_PDL");
    gpu::setGemvStreamSlots(2);  // process-wide: the default again for the tests that follow
    sameLogits(oneSlot, off, "QWEN_STREAM_SLOTS=1 with PDL on every stream against 2 without");
  }
  GpuModelOptions o;
  o.ctxSize = 64;
  setenv("QWEN_GEMV", "fast", 1);
  {
    GpuModel m(c, sh, 0, nullptr);
    EXPECT_FALSE(m.init(o, &err));
    EXPECT_NE(err.find("QWEN_GEMV=fast: expected cublas, custom or stream"), std::string::npos) << err;
  }
  setenv("QWEN_GEMV", "stream", 1);
  setenv("QWEN_STREAM_PDL", "yes", 1);
  {
    GpuModel m(c, sh, 0, nullptr);
    EXPECT_FALSE(m.init(o, &err));
    EXPECT_NE(err.find("QWEN_STREAM_PDL=yes: expected auto, on, off, chain, attn, all or a list of qkv, o, gateup, down"),
              std::string::npos)
        << err;
  }
  setenv("QWEN_STREAM_PDL", "qkv,,down", 1);
  {
    GpuModel m(c, sh, 0, nullptr);
    EXPECT_FALSE(m.init(o, &err));
    EXPECT_NE(err.find("QWEN_STREAM_PDL=qkv,,down: expected"), std::string::npos) << err;
  }
  unsetenv("QWEN_STREAM_PDL");
  setenv("QWEN_STREAM_SLOTS", "3", 1);
  {
    GpuModel m(c, sh, 0, nullptr);
    EXPECT_FALSE(m.init(o, &err));
    EXPECT_NE(err.find("QWEN_STREAM_SLOTS=3: expected 1 or 2"), std::string::npos) << err;
  }
  unsetenv("QWEN_STREAM_SLOTS");
  for (auto bad : {std::make_pair("QWEN_PICK", "QWEN_PICK=one: expected fused or split"),
                   std::make_pair("QWEN_ROPE", "QWEN_ROPE=one: expected kernel or qkv")}) {
    setenv(bad.first, "one", 1);
    GpuModel m(c, sh, 0, nullptr);
    EXPECT_FALSE(m.init(o, &err));
    EXPECT_NE(err.find(bad.second), std::string::npos) << err;
    unsetenv(bad.first);
  }
  setenv("QWEN_STREAM_LAYER", "1", 1);
  {
    GpuModel m(c, sh, 0, nullptr);
    EXPECT_FALSE(m.init(o, &err));
    EXPECT_NE(err.find("QWEN_STREAM_LAYER=1: expected on or off"), std::string::npos) << err;
  }
  unsetenv("QWEN_STREAM_LAYER");
  unsetenv("QWEN_GEMV");
  o.customGemv = o.streamGemv = true;
  {
    GpuModel m(c, sh, 0, nullptr);
    ASSERT_TRUE(m.init(o, &err)) << err;
    EXPECT_STREQ(m.smallGemv(), "custom") << "customGemv wins over streamGemv";
  }
  o.customGemv = o.streamGemv = false;
  {
    GpuModel m(c, sh, 0, nullptr);
    ASSERT_TRUE(m.init(o, &err)) << err;
    EXPECT_STREQ(m.smallGemv(), "cublas");
  }
}

// GpuModelOptions::l2Prefetch: a hint only, so every logit of the prompt's chunks, of twelve
// one-token steps and of a four-token verify call has the bits of the run without it; the decode
// graph holds one prefetch kernel a product that has a next one (4 a layer: qkv -> o -> gate/up
// -> down -> the next layer's qkv or the lm_head); speculative output (the MTP head's graphs
// prefetch too) equals greedy output without it. QWEN_PREFETCH overrides the option; a bad value
// is refused at init.
TEST(QwenDecodeGpu, L2PrefetchKeepsTheBitsAndAddsItsKernels) {
  unsetenv("QWEN_DECODE");
  unsetenv("QWEN_PREFETCH");
  unsetenv("QWEN_ATTN_PREFETCH");
  struct Env {
    ~Env() { unsetenv("QWEN_PREFETCH"), unsetenv("QWEN_ATTN_PREFETCH"); }
  } restore;
  const ModelConfig c = tiny128();
  TpShape s;
  std::string err;
  ASSERT_TRUE(makeTpShape(c, 1, 0, &s, &err));
  auto options = [](size_t prefetch) {
    GpuModelOptions o;
    o.ctxSize = 64;
    o.maxTokensPerCall = 32;
    o.seed = 11;
    o.l2Prefetch = prefetch;
    return o;
  };
  GpuModel off(c, s, 0, nullptr), on(c, s, 0, nullptr);
  ASSERT_TRUE(off.init(options(0), &err)) << err;
  ASSERT_TRUE(on.init(options(GpuModelOptions::kL2PrefetchHalfL2), &err)) << err;
  EXPECT_EQ(off.l2PrefetchBytes(), 0u);
  int l2 = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0), cudaSuccess);
  EXPECT_EQ(on.l2PrefetchBytes(), static_cast<size_t>(l2) / 2);
  const auto p = promptIds(20, c.vocabSize);
  auto same = [&](int rows, const std::string& what) {
    std::vector<float> a, b;
    ASSERT_TRUE(off.lastLogits(rows, &a, &err)) << err;
    ASSERT_TRUE(on.lastLogits(rows, &b, &err)) << err;
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << what;
  };
  std::vector<int32_t> ta(20), tb(20);
  ASSERT_TRUE(off.target(p.data(), 20, 0, ta.data(), &err)) << err;
  ASSERT_TRUE(on.target(p.data(), 20, 0, tb.data(), &err)) << err;
  same(1, "prompt");
  int32_t tok = ta[19];
  for (int t = 20; t < 32; ++t) {
    int32_t a = -1, b = -1;
    ASSERT_TRUE(off.target(&tok, 1, t, &a, &err)) << err;
    ASSERT_TRUE(on.target(&tok, 1, t, &b, &err)) << err;
    EXPECT_EQ(a, b) << "position " << t;
    same(1, "decode position " + std::to_string(t));
    tok = a;
  }
  const int32_t verify[4] = {tok, 3, 5, 7};
  int32_t va[4], vb[4];
  ASSERT_TRUE(off.target(verify, 4, 32, va, &err)) << err;
  ASSERT_TRUE(on.target(verify, 4, 32, vb, &err)) << err;
  same(4, "a four-token verify call");
  GraphNodes g0, g1;
  ASSERT_TRUE(off.graphNodes(GpuModel::StepGraph::kTarget, 1, &g0, &err)) << err;
  ASSERT_TRUE(on.graphNodes(GpuModel::StepGraph::kTarget, 1, &g1, &err)) << err;
  EXPECT_EQ(g1.kernels, g0.kernels + 4 * c.numLayers);
  EXPECT_EQ(g1.copies, g0.copies);

  // Speculative with the prefetch equals greedy without it.
  {
    GpuModel ref(c, s, 0, nullptr), spec(c, s, 0, nullptr);
    GpuModelOptions o = options(0);
    o.ctxSize = 256;
    ASSERT_TRUE(ref.init(o, &err)) << err;
    o.l2Prefetch = size_t(1) << 20;
    ASSERT_TRUE(spec.init(o, &err)) << err;
    GenerateOptions g;
    g.nPredict = 96;
    std::vector<int32_t> greedy, out;
    GenerateStats st;
    ASSERT_TRUE(generate(ref, promptIds(40, c.vocabSize), g, &greedy, &st, &err)) << err;
    g.draftNMax = 3;
    g.reference = &greedy;
    ASSERT_TRUE(generate(spec, promptIds(40, c.vocabSize), g, &out, &st, &err)) << err;
    EXPECT_EQ(out, greedy);
  }

  // QWEN_PREFETCH and the attention's prefetch of o_proj (QWEN_ATTN_PREFETCH) read their budgets
  // the same way: a size in MB, off, or an error that names the variable.
  const std::pair<const char*, size_t (GpuModel::*)() const> budgets[] = {
      {"QWEN_PREFETCH", &GpuModel::l2PrefetchBytes}, {"QWEN_ATTN_PREFETCH", &GpuModel::attnPrefetchBytes}};
  for (const auto& [name, bytes] : budgets) {
    setenv(name, "8", 1);
    {
      GpuModel m(c, s, 0, nullptr);
      ASSERT_TRUE(m.init(options(0), &err)) << name << ": " << err;
      EXPECT_EQ((m.*bytes)(), size_t(8) << 20) << name;
    }
    setenv(name, "off", 1);
    {
      GpuModel m(c, s, 0, nullptr);
      ASSERT_TRUE(m.init(options(GpuModelOptions::kL2PrefetchHalfL2), &err)) << name << ": " << err;
      EXPECT_EQ((m.*bytes)(), 0u) << name;
    }
    for (const char* bad : {"yes", "0", "-4", "12MB", ""}) {
      setenv(name, bad, 1);
      GpuModel m(c, s, 0, nullptr);
      EXPECT_FALSE(m.init(options(0), &err)) << name << "=" << bad;
      EXPECT_NE(err.find(std::string(name) + "=" + bad + ": expected off, on or a size in MB (1..4096)"),
                std::string::npos)
          << err;
    }
    unsetenv(name);
  }
}

}  // namespace
}  // namespace qwen
