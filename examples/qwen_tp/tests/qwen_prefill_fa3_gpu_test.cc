// GPU tests of gpu::attentionPrefillFa3, the wgmma/TMA prefill attention (part of qwen_gpu_test;
// label gpu; skipped off compute capability 9.0, where the kernel does not exist):
//  - against an fp64 host reference and against gpu::attentionPrefill (FlashAttention-2) on the
//    same inputs: head_dim 128; GQA groups 1, 2, 3, 4, 5, 8, 128 (5 and 3: tiles of 125 and 126
//    rows, the rest of the 128 unused); n = 1, 7, 20, 33, 129, 257, 300, 1000, 1999, 4096; first
//    chunks (pos 0) and later ones (pos 100, 2048, 8191, 28000); caches that end at the call's
//    last slot (the TMA box runs past them) and caches whose slots past the call hold NaN (stale
//    slots; the kernel zeroes those V rows before P V). Output poisoned (NaN) before each call;
//    every element of every row must be finite; rows checked against fp64 as in
//    QwenPrefillGpu.AttentionMatchesFp64Reference (all rows while n x ctx <= 4.2M; else tile
//    edges, the ends and 48 random rows); every element against FlashAttention-2.
//    Bounds, from bf16 rounding (unit roundoff u = 2^-9): P is rounded to bf16 before P V
//    (relative u each; on a weighted mean of V at most u max|v|, max|v| = 1 here) and the output
//    once more (u |ref|); fp32 sums over <= 32K slots and ex2.approx add under 1e-3 in the worst
//    case. |fa3 - ref| <= 2 u (1 + |ref|) = 2^-8 (1 + |ref|); |fa3 - fa2| <= 2^-7 (1 + |fa2|), the
//    sum of the two kernels' bounds. Queries are scaled x4 so softmaxes are peaked and a mask off
//    by one slot shows at small n.
//  - Determinism: the bits of a query do not depend on the call: one call of 1000 tokens at pos
//    300 equals the same tokens in chunks (1, 7, 129, 863) and (200 x 5) bit for bit, each chunk
//    with NaN in every cache slot past its own last one, and a repeat of the one call equals it.
//  - The model: QWEN_PREFILL_ATTN selects the kernel (fa3 where supported, fa2 for head_dim 16,
//    init fails on another value); with fa3, logits against the fp32 CPU reference (prompt in one
//    chunk of 20 and in chunks of 300 + 40) within QwenDecodeGpu's bound, and MTP speculative
//    output equal to greedy on a 700-token prompt prefilled in chunks of 256.
//  - DISABLED_Bench (prefill_ab.sh runs it): both kernels on a qwen3-8b layer over a 32000-token
//    prompt in chunks, TFLOP/s of the causal work.
//  - cuDNN's fused attention (gpu::CudnnPrefillAttention, QWEN_PREFILL_ATTN=cudnn) against
//    FlashAttention-2 on the same problems, within the same bound as fa3's (2^-7 (1 + |fa2|)), every
//    element finite; skipped, with the reason, where the build has no cuDNN path or cuDNN does not
//    load; and the model's logits with it against the CPU reference.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "cpu_model.h"
#include "gpu_kernels.h"
#include "gpu_model.h"
#include "kernels/attention_prefill_cudnn.h"
#include "safetensors.h"
#include "speculative.h"

namespace qwen {
namespace {

constexpr int kD = 128;
constexpr uint16_t kNanBf16 = 0x7fc0;

struct DevBuf {
  void* p = nullptr;
  explicit DevBuf(size_t bytes) { EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess); }
  ~DevBuf() { cudaFree(p); }
  __nv_bfloat16* bf() const { return static_cast<__nv_bfloat16*>(p); }
};

bool fa3Here() { return gpu::attentionPrefillFa3Supported(kD, 32, 8, 0) && gpu::prepareAttentionPrefillFa3(); }

struct Rng {
  uint64_t s;
  float uni() {  // [-1, 1)
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>((s >> 40) & 0xffffff) / 8388608.f - 1.f;
  }
};

// One problem: q [n, hq, D]; caches [ctx, hk, D] whose slots >= pos + n hold NaN.
struct Problem {
  int hq, hk, pos, n, ctx;
  std::vector<uint16_t> q, k, v;
  Problem(int hq_, int hk_, int pos_, int n_, int extra, uint64_t seed) : hq(hq_), hk(hk_), pos(pos_), n(n_) {
    ctx = pos + n + extra;
    Rng r{seed};
    q.resize(static_cast<size_t>(n) * hq * kD);
    k.assign(static_cast<size_t>(ctx) * hk * kD, kNanBf16);
    v = k;
    for (auto& x : q) x = floatToBf16(4.f * r.uni());
    const size_t live = static_cast<size_t>(pos + n) * hk * kD;
    for (size_t i = 0; i < live; ++i) k[i] = floatToBf16(r.uni()), v[i] = floatToBf16(r.uni());
  }
};

enum class Kernel { kFa3, kFa2, kCudnn };

// The kernel's output for p's rows [t0, t0 + len) as one call at position p.pos + t0, with the cache
// slots past that call's last one set to NaN (the slots a real chunked prefill has not written).
std::vector<uint16_t> runAttention(Kernel kern, const Problem& p, int t0, int len) {
  const size_t row = static_cast<size_t>(p.hq) * kD, qN = static_cast<size_t>(len) * row;
  const size_t kvN = static_cast<size_t>(p.ctx) * p.hk * kD, live = static_cast<size_t>(p.pos + t0 + len) * p.hk * kD;
  std::vector<uint16_t> k(p.k), v(p.v), out(qN);
  std::fill(k.begin() + static_cast<std::ptrdiff_t>(live), k.end(), kNanBf16);
  std::fill(v.begin() + static_cast<std::ptrdiff_t>(live), v.end(), kNanBf16);
  DevBuf dq(qN * 2), dk(kvN * 2), dv(kvN * 2), dout(qN * 2), dpos(4);
  const int pos = p.pos + t0;
  EXPECT_EQ(cudaMemcpy(dq.p, p.q.data() + static_cast<size_t>(t0) * row, qN * 2, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(dk.p, k.data(), kvN * 2, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(dv.p, v.data(), kvN * 2, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(dpos.p, &pos, 4, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemset(dout.p, 0xff, qN * 2), cudaSuccess);  // NaN poison
  if (kern == Kernel::kFa3) {
    EXPECT_TRUE(gpu::attentionPrefillFa3(dq.bf(), dk.bf(), dv.bf(), static_cast<int32_t*>(dpos.p), len, p.hq, p.hk, kD,
                                         p.ctx, dout.bf(), nullptr));
  } else if (kern == Kernel::kCudnn) {
    const size_t wsBytes = 64u << 20;
    DevBuf ws(wsBytes);
    gpu::CudnnPrefillAttention cudnn;
    std::string why;
    EXPECT_TRUE(cudnn.init(p.hq, p.hk, kD, p.ctx, ws.p, wsBytes, &why)) << why;
    EXPECT_TRUE(cudnn.run(dq.bf(), dk.bf(), dv.bf(), pos, len, dout.bf(), nullptr, &why)) << why;
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // before the workspace goes
  } else {
    EXPECT_TRUE(gpu::prepareAttentionPrefill());
    gpu::attentionPrefill(dq.bf(), dk.bf(), dv.bf(), static_cast<int32_t*>(dpos.p), len, p.hq, p.hk, kD, dout.bf(),
                          nullptr);
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(out.data(), dout.p, qN * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

// fp64 attention of token t, query head h over slots 0 .. pos + t (acc gets D values).
void reference(const Problem& p, int t, int h, std::vector<double>* acc) {
  const int kvh = h / (p.hq / p.hk), last = p.pos + t;
  const double scale = 1.0 / std::sqrt(static_cast<double>(kD));
  std::vector<double> sc(static_cast<size_t>(last) + 1);
  const uint16_t* qr = &p.q[(static_cast<size_t>(t) * p.hq + h) * kD];
  double mx = -1e300;
  for (int s = 0; s <= last; ++s) {
    const uint16_t* kr = &p.k[(static_cast<size_t>(s) * p.hk + kvh) * kD];
    double d = 0;
    for (int i = 0; i < kD; ++i) d += static_cast<double>(bf16ToFloat(qr[i])) * bf16ToFloat(kr[i]);
    sc[s] = d * scale;
    mx = std::max(mx, sc[s]);
  }
  double l = 0;
  acc->assign(kD, 0.0);
  for (int s = 0; s <= last; ++s) {
    const double w = std::exp(sc[s] - mx);
    l += w;
    const uint16_t* vr = &p.v[(static_cast<size_t>(s) * p.hk + kvh) * kD];
    for (int i = 0; i < kD; ++i) (*acc)[i] += w * bf16ToFloat(vr[i]);
  }
  for (double& x : *acc) x /= l;
}

struct Case {
  int hq, hk, pos, n, extra;
};
const Case kCases[] = {
    {8, 8, 0, 1, 0},     {32, 8, 0, 7, 0},     {32, 8, 0, 129, 37},   {32, 8, 2048, 1000, 0},
    {8, 1, 0, 1000, 37}, {64, 8, 100, 300, 0}, {40, 8, 0, 200, 37},   {16, 8, 5, 257, 0},
    {24, 8, 0, 33, 37},  {128, 1, 0, 20, 200}, {8, 2, 8191, 1999, 0}, {32, 8, 28000, 4096, 37},
};
std::string tagOf(const Case& c, const Problem& p) {
  return "hq " + std::to_string(c.hq) + " hk " + std::to_string(c.hk) + " pos " + std::to_string(c.pos) + " n " +
         std::to_string(c.n) + " ctx " + std::to_string(p.ctx);
}

// Every element of `o` (kernel `name`) written and a number, and within the two kernels' bounds
// of fa2's `o2`: |o - o2| <= 2^-7 (1 + |o2|). Returns the largest difference.
double againstFa2(const char* name, const std::vector<uint16_t>& o, const std::vector<uint16_t>& o2,
                  const std::string& tag) {
  int bad = 0;
  double worst = 0;
  for (size_t i = 0; i < o.size(); ++i) {
    const double a = bf16ToFloat(o[i]), b = bf16ToFloat(o2[i]), e = std::fabs(a - b);
    if (!std::isfinite(a)) {
      ADD_FAILURE() << tag << ": element " << i << " is " << a << " (unwritten or NaN)";
      break;
    }
    worst = std::max(worst, e);
    if (!(e <= std::ldexp(1.0 + std::fabs(b), -7)) && ++bad == 1)
      ADD_FAILURE() << tag << ": element " << i << " " << name << " " << a << " fa2 " << b;
  }
  EXPECT_EQ(bad, 0) << tag;
  return worst;
}

TEST(QwenPrefillFa3Gpu, MatchesFp64ReferenceAndFa2) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  if (!fa3Here()) GTEST_SKIP() << "attentionPrefillFa3 needs compute capability 9.0 and an sm_90a build";
  uint64_t seed = 0x9e3779b97f4a7c15ull;
  for (const Case& c : kCases) {
    const Problem p(c.hq, c.hk, c.pos, c.n, c.extra, seed++);
    const std::string tag = tagOf(c, p);
    const std::vector<uint16_t> o3 = runAttention(Kernel::kFa3, p, 0, c.n);
    const std::vector<uint16_t> o2 = runAttention(Kernel::kFa2, p, 0, c.n);
    const double worst2 = againstFa2("fa3", o3, o2, tag);
    // fp64 reference on a subset of rows, spread over the host's threads.
    std::vector<int> rows;
    Rng r{seed * 31};
    if (static_cast<int64_t>(c.n) * p.ctx <= 4200000) {
      for (int t = 0; t < c.n; ++t) rows.push_back(t);
    } else {
      for (int t : {0, 1, 15, 16, 31, 32, 63, 64, c.n / 2, c.n - 33, c.n - 32, c.n - 2, c.n - 1}) rows.push_back(t);
      for (int i = 0; i < 48; ++i) rows.push_back(static_cast<int>((r.uni() * 0.5f + 0.5f) * (c.n - 1)));
    }
    const int nth = static_cast<int>(std::max(1u, std::min(16u, std::thread::hardware_concurrency())));
    std::vector<int> bad(nth, 0);
    std::vector<double> worst(nth, 0.0);
    std::vector<std::string> first(nth);
    std::vector<std::thread> pool;
    for (int w = 0; w < nth; ++w)
      pool.emplace_back([&, w] {
        std::vector<double> ref;
        for (size_t ri = w; ri < rows.size(); ri += nth)
          for (int h = 0; h < c.hq; ++h) {
            const int t = rows[ri];
            reference(p, t, h, &ref);
            for (int i = 0; i < kD; ++i) {
              const double got = bf16ToFloat(o3[(static_cast<size_t>(t) * c.hq + h) * kD + i]);
              const double e = std::fabs(got - ref[i]);
              worst[w] = std::max(worst[w], e);
              if (!(e <= std::ldexp(1.0 + std::fabs(ref[i]), -8)) && ++bad[w] == 1)
                first[w] = "token " + std::to_string(t) + " head " + std::to_string(h) + " dim " + std::to_string(i) +
                           " got " + std::to_string(got) + " ref " + std::to_string(ref[i]);
            }
          }
      });
    for (auto& th : pool) th.join();
    int nbad = 0;
    double wr = 0;
    for (int w = 0; w < nth; ++w) {
      nbad += bad[w];
      wr = std::max(wr, worst[w]);
      if (!first[w].empty()) ADD_FAILURE() << tag << ": " << first[w];
    }
    EXPECT_EQ(nbad, 0) << tag;
    std::printf("fa3 %s: %zu rows against fp64, worst %.2e; all rows against fa2, worst %.2e\n", tag.c_str(),
                rows.size(), wr, worst2);
  }
}

TEST(QwenPrefillFa3Gpu, BitsDoNotDependOnTheChunking) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  if (!fa3Here()) GTEST_SKIP() << "attentionPrefillFa3 needs compute capability 9.0 and an sm_90a build";
  for (const int hq : {32, 40}) {
    const Problem p(hq, 8, 300, 1000, 64, 77 + hq);
    const std::vector<uint16_t> one = runAttention(Kernel::kFa3, p, 0, p.n);
    EXPECT_EQ(runAttention(Kernel::kFa3, p, 0, p.n), one) << "hq " << hq << ": a repeat of the same call";
    const size_t row = static_cast<size_t>(hq) * kD;
    for (const std::vector<int>& chunks :
         {std::vector<int>{1, 7, 129, 863}, std::vector<int>{200, 200, 200, 200, 200}}) {
      int t0 = 0, diff = 0;
      for (int len : chunks) {
        const std::vector<uint16_t> part = runAttention(Kernel::kFa3, p, t0, len);
        for (size_t i = 0; i < part.size(); ++i)
          if (part[i] != one[static_cast<size_t>(t0) * row + i] && ++diff == 1)
            ADD_FAILURE() << "hq " << hq << ": token " << t0 + static_cast<int>(i / row) << " of the chunk at " << t0
                          << " (length " << len << ") differs from the one call";
        t0 += len;
      }
      EXPECT_EQ(diff, 0) << "hq " << hq << ", chunks starting with " << chunks[0];
    }
  }
}

// ---- the model ----

ModelConfig tiny128() {  // tiny with head_dim 128, 8 query heads on 2 KV heads (group 4)
  ModelConfig c;
  std::string err;
  presetConfig("tiny", &c, &err);
  c.headDim = 128;
  c.numKvHeads = 2;
  return c;
}

std::vector<int32_t> promptIds(int n, int vocab) {
  std::vector<int32_t> p(n);
  for (int i = 0; i < n; ++i) p[i] = (i * 389 + 17) % vocab;
  return p;
}

TEST(QwenPrefillFa3Gpu, ModelSelectsTheKernel) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  TpShape s;
  std::string err;
  ModelConfig tiny;
  ASSERT_TRUE(presetConfig("tiny", &tiny, &err));
  EXPECT_FALSE(gpu::attentionPrefillFa3Supported(16, 8, 4, 0)) << "head_dim 16";
  EXPECT_FALSE(gpu::attentionPrefillFa3Supported(64, 8, 4, 0)) << "head_dim 64";
  EXPECT_FALSE(gpu::attentionPrefillFa3Supported(128, 12, 8, 0)) << "hq not a multiple of hk";
  EXPECT_FALSE(gpu::attentionPrefillFa3Supported(128, 258, 2, 0)) << "129 query heads a KV head";
  const bool here = fa3Here();
  struct Unset {  // the other tests must not inherit this test's QWEN_PREFILL_ATTN, even on a failure
    ~Unset() { unsetenv("QWEN_PREFILL_ATTN"); }
  } unset;
  for (const char* v : {"fa2", "fa3"})
    for (const ModelConfig& c : {tiny, tiny128()}) {
      setenv("QWEN_PREFILL_ATTN", v, 1);
      ASSERT_TRUE(makeTpShape(c, 1, 0, &s, &err));
      GpuModel m(c, s, 0, nullptr);
      GpuModelOptions o;
      o.ctxSize = 64;
      ASSERT_TRUE(m.init(o, &err)) << err;
      const bool fa3 = std::strcmp(v, "fa3") == 0 && c.headDim == 128 && here;
      EXPECT_STREQ(m.prefillKernel(), fa3 ? "fa3" : "fa2") << v << " head_dim " << c.headDim;
    }
  setenv("QWEN_PREFILL_ATTN", "fa4", 1);
  {
    ASSERT_TRUE(makeTpShape(tiny, 1, 0, &s, &err));
    GpuModel m(tiny, s, 0, nullptr);
    EXPECT_FALSE(m.init(GpuModelOptions{}, &err));
    EXPECT_NE(err.find("QWEN_PREFILL_ATTN"), std::string::npos) << err;
  }
}

// Logits of each prompt chunk's last row against the fp32 CPU reference: 3% of max |logit|
// (QwenDecodeGpu.EveryPathMatchesTheCpuReference's bound), the prefill attention through
// `kernel` ("fa3" or "cudnn").
void modelLogitsMatchTheCpuReference(const std::string& kernel) {
  unsetenv("QWEN_PREFILL_ATTN");
  const ModelConfig c = tiny128();
  HostWeights w;
  makeSyntheticHostWeights(c, 31, /*roundBf16=*/true, &w);
  TpShape s;
  std::string err;
  ASSERT_TRUE(makeTpShape(c, 1, 0, &s, &err));
  for (const std::vector<int>& chunks : {std::vector<int>{20}, std::vector<int>{300, 40}}) {
    int total = 0;
    for (int len : chunks) total += len;
    CpuModel cpu(c, s, &w, nullptr, total + 8);
    GpuModel gpu(c, s, 0, nullptr);
    GpuModelOptions o;
    o.ctxSize = total + 8;
    o.maxTokensPerCall = 512;
    o.seed = 31;
    o.prefillFa3 = kernel == "fa3";
    o.prefillCudnn = kernel == "cudnn";
    ASSERT_TRUE(gpu.init(o, &err)) << err;
    ASSERT_EQ(gpu.prefillKernel(), kernel);
    const auto ids = promptIds(total, c.vocabSize);
    std::vector<int32_t> nc(total), ng(total);
    int pos = 0;
    for (int len : chunks) {
      ASSERT_TRUE(cpu.target(ids.data() + pos, len, pos, nc.data() + pos, &err)) << err;
      ASSERT_TRUE(gpu.target(ids.data() + pos, len, pos, ng.data() + pos, &err)) << err;
      std::vector<float> lg;
      ASSERT_TRUE(gpu.lastLogits(1, &lg, &err)) << err;
      const float* lc = cpu.lastLogits().data() + static_cast<size_t>(len - 1) * c.vocabSize;
      float mx = 0, e = 0;
      for (int i = 0; i < c.vocabSize; ++i) {
        ASSERT_TRUE(std::isfinite(lg[i])) << "logit " << i;
        mx = std::max(mx, std::fabs(lc[i]));
        e = std::max(e, std::fabs(lg[i] - lc[i]));
      }
      EXPECT_LE(e, 0.03f * mx) << kernel << ": chunk ending at " << pos + len - 1;
      pos += len;
    }
  }
}

TEST(QwenPrefillFa3Gpu, ModelLogitsMatchTheCpuReference) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  if (!fa3Here()) GTEST_SKIP() << "attentionPrefillFa3 needs compute capability 9.0 and an sm_90a build";
  modelLogitsMatchTheCpuReference("fa3");
}

// Greedy, then MTP speculation (real drafts and simulated acceptance): every token equal. The
// prompt's chunks run the same fa3 calls either way; verify calls (<= 16 tokens) run the decode
// attention, whose bits depend on a query's length only.
TEST(QwenPrefillFa3Gpu, SpeculativeEqualsGreedy) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  if (!fa3Here()) GTEST_SKIP() << "attentionPrefillFa3 needs compute capability 9.0 and an sm_90a build";
  unsetenv("QWEN_PREFILL_ATTN");
  const ModelConfig c = tiny128();
  const int prompt = 700, predict = 48, ctx = prompt + predict + 16;
  auto run = [&](const GenerateOptions& g, std::vector<int32_t>* out, GenerateStats* st, std::string* err) {
    TpShape s;
    if (!makeTpShape(c, 1, 0, &s, err)) return false;
    GpuModel m(c, s, 0, nullptr);
    GpuModelOptions o;
    o.ctxSize = ctx;
    o.maxTokensPerCall = 256;
    o.seed = 5;
    o.prefillFa3 = true;
    if (!m.init(o, err)) return false;
    if (std::strcmp(m.prefillKernel(), "fa3") != 0) return *err = std::string("prefill ") + m.prefillKernel(), false;
    return generate(m, promptIds(prompt, c.vocabSize), g, out, st, err);
  };
  std::vector<int32_t> ref;
  GenerateStats st;
  std::string err;
  GenerateOptions g;
  g.nPredict = predict;
  ASSERT_TRUE(run(g, &ref, &st, &err)) << err;
  for (int n : {3, 5})
    for (double sim : {-1.0, 0.6}) {
      GenerateOptions gs = g;
      gs.draftNMax = n;
      gs.simAcceptance = sim;
      gs.reference = &ref;
      std::vector<int32_t> out;
      ASSERT_TRUE(run(gs, &out, &st, &err)) << err;
      EXPECT_EQ(out, ref) << "N " << n << " sim " << sim;
      if (sim > 0) EXPECT_GT(st.accepted, 0);
    }
}

// ---- the microbenchmark (prefill_ab.sh: --gtest_also_run_disabled_tests) ----

// One qwen3-8b layer's attention over a 32000-token prompt in chunks of U (QWEN_FA3_BENCH_UBATCH,
// default "2048,8192"): each chunk timed alone (CUDA events, median of 5 after a warm-up), the
// chunk times summed. Causal work: 4 D hq (pos + 1) FLOP a query (Q K^T and P V).
TEST(QwenPrefillFa3Gpu, DISABLED_Bench) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  if (!fa3Here()) GTEST_SKIP() << "attentionPrefillFa3 needs compute capability 9.0 and an sm_90a build";
  ASSERT_TRUE(gpu::prepareAttentionPrefill());
  const int hq = 32, hk = 8, S = 32000, ctx = 32768, layers = 36;
  std::vector<int> ubatches = {2048, 8192};
  if (const char* e = std::getenv("QWEN_FA3_BENCH_UBATCH")) {
    ubatches.clear();
    for (const char* c = e; *c;) {
      ubatches.push_back(std::atoi(c));
      while (*c && *c != ',') ++c;
      if (*c) ++c;
    }
  }
  const size_t kvN = static_cast<size_t>(ctx) * hk * kD, qMax = static_cast<size_t>(8192) * hq * kD;
  DevBuf dk(kvN * 2), dv(kvN * 2), dq(qMax * 2), dout(qMax * 2), dpos(4);
  {  // random bf16 in [-1, 1) (never zeros: METHOD.md), q x4 as in the tests
    std::vector<uint16_t> h(kvN);
    Rng r{12345};
    for (auto& x : h) x = floatToBf16(r.uni());
    ASSERT_EQ(cudaMemcpy(dk.p, h.data(), kvN * 2, cudaMemcpyHostToDevice), cudaSuccess);
    for (auto& x : h) x = floatToBf16(r.uni());
    ASSERT_EQ(cudaMemcpy(dv.p, h.data(), kvN * 2, cudaMemcpyHostToDevice), cudaSuccess);
    h.resize(qMax);
    for (auto& x : h) x = floatToBf16(4.f * r.uni());
    ASSERT_EQ(cudaMemcpy(dq.p, h.data(), qMax * 2, cudaMemcpyHostToDevice), cudaSuccess);
  }
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  struct K {
    const char* name;
    int kind;  // 0 fa2, 1 fa3, 2 fa3 without ping-pong
  };
  const K kernels[] = {{"fa2", 0}, {"fa3", 1}, {"fa3-nopingpong", 2}};
  std::printf("\n| ubatch | kernel | ms a layer (32000-token prompt) | TFLOP/s | x 36 layers (s) | last chunk ms |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (int U : ubatches) {
    if (U < 17 || U > 8192) continue;
    double flop = 0;
    for (int t = 0; t < S; ++t) flop += 4.0 * kD * hq * (t + 1.0);
    for (const K& k : kernels) {
      double total = 0, last = 0;
      for (int p0 = 0; p0 < S; p0 += U) {
        const int n = std::min(U, S - p0);
        ASSERT_EQ(cudaMemcpy(dpos.p, &p0, 4, cudaMemcpyHostToDevice), cudaSuccess);
        auto launch = [&]() {
          if (k.kind == 0)
            gpu::attentionPrefill(dq.bf(), dk.bf(), dv.bf(), static_cast<int32_t*>(dpos.p), n, hq, hk, kD, dout.bf(),
                                  nullptr);
          else
            EXPECT_TRUE(gpu::attentionPrefillFa3Variant(
                k.kind == 1 ? gpu::Fa3Variant::kDefault : gpu::Fa3Variant::kNoPingPong, dq.bf(), dk.bf(), dv.bf(),
                static_cast<int32_t*>(dpos.p), n, hq, hk, kD, ctx, dout.bf(), nullptr));
        };
        launch();
        std::vector<float> ms;
        for (int rep = 0; rep < 5; ++rep) {
          cudaEventRecord(e0);
          launch();
          cudaEventRecord(e1);
          ASSERT_EQ(cudaEventSynchronize(e1), cudaSuccess);
          float x = 0;
          cudaEventElapsedTime(&x, e0, e1);
          ms.push_back(x);
        }
        ASSERT_EQ(cudaGetLastError(), cudaSuccess);
        std::sort(ms.begin(), ms.end());
        total += ms[2];
        last = ms[2];
      }
      std::printf("| %d | %s | %.3f | %.1f | %.3f | %.3f |\n", U, k.name, total, flop / (total * 1e-3) / 1e12,
                  total * layers * 1e-3, last);
    }
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
}

}  // namespace
}  // namespace qwen

namespace qwen {
namespace {

// Why cuDNN's attention cannot run here, or "" when it can.
std::string cudnnMissing() {
  if (!gpu::CudnnPrefillAttention::built()) return "this build has no cuDNN path (QWEN_TP_CUDNN headers not found)";
  void* ws = nullptr;
  if (cudaMalloc(&ws, 1 << 20) != cudaSuccess) return "cudaMalloc failed";
  gpu::CudnnPrefillAttention c;
  std::string why;
  const bool ok = c.init(32, 8, kD, 64, ws, 1 << 20, &why);
  cudaFree(ws);
  return ok ? "" : why;
}

TEST(QwenPrefillCudnnGpu, MatchesFa2) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  const std::string missing = cudnnMissing();
  if (!missing.empty()) GTEST_SKIP() << missing;
  for (size_t i = 0; i < sizeof(kCases) / sizeof(kCases[0]); ++i) {
    const Case& c = kCases[i];
    const Problem p(c.hq, c.hk, c.pos, c.n, c.extra, 0x2545f4914f6cdd1dull + i);
    const double worst = againstFa2("cudnn", runAttention(Kernel::kCudnn, p, 0, c.n),
                                    runAttention(Kernel::kFa2, p, 0, c.n), tagOf(c, p));
    std::printf("cudnn %s: all rows against fa2, worst %.2e\n", tagOf(c, p).c_str(), worst);
  }
}

TEST(QwenPrefillCudnnGpu, ModelLogitsMatchTheCpuReference) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  const std::string missing = cudnnMissing();
  if (!missing.empty()) GTEST_SKIP() << missing;
  modelLogitsMatchTheCpuReference("cudnn");
}

}  // namespace
}  // namespace qwen
