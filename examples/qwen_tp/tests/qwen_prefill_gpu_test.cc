// GPU tests of the prefill path (label gpu; part of qwen_gpu_test, whose main skips without a GPU):
//  - gpu::attentionPrefill against an fp64 host reference: causal, GQA (group 1, 4, 8), head_dim
//    16/32/64/128, lengths 1 .. 16384 that are and are not multiples of the 64-row / 64-slot
//    tiles, first chunks (pos 0) and later chunks (pos > 0, the cache prefix written before).
//    Output poisoned (NaN) before the call; every element of every checked row compared (all
//    rows where n x (pos + n) <= 4.2M; beyond, tile edges, the ends and 48 random rows). Queries are
//    scaled up (x4) so softmaxes are peaked and a mask that is off by one slot shows.
//    Tolerance |out - ref| <= 2^-7 |ref| + 4e-3: one bf16 rounding of the output, P rounded to
//    bf16 before P V (as FlashAttention does), fp32 sums over <= 16K slots.
//  - Chunked prefill equals one call: the tiny model (head_dim 16, prefill kernel) and a 4-layer
//    qwen3-0.6b shape (head_dim 128): the prompt in one call and in chunks of --ubatch-size
//    (20, 7: the last one only decode-kernel calls), plus the decode kernel for every call
//    (prefillAttention = false: the greedy path as it was). Last-row logits of every variant
//    within bf16 tolerance of the one-call run (and of the fp32 CPU reference on tiny), the next
//    token equal wherever the top-2 margin exceeds twice the bound, then 8 teacher-forced
//    decode steps through the graphs with the same checks.
//  - Overlapped prefill (GpuModelOptions::prefillOverlap) at TP=2 equals the serial TP=2 run on
//    the 4-layer head_dim-128 shape: one chunk of 300 rows (halves of 144 and 156), chunks of 128
//    (halves of 64; the 44-row tail runs serial), and the unfused epilogue; same bound and token
//    checks as above, and the model must report that the overlapped path ran. Two GPUs, or both
//    ranks on GPU 0 (TPCOMM_ALLOW_SHARED_DEVICE=1, set by qwen_gpu_test's main on one GPU).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cpu_model.h"
#include "gpu_kernels.h"
#include "gpu_model.h"
#include "rank_gate.h"
#include "safetensors.h"
#include "speculative.h"
#include "tpcomm/tpcomm.h"

namespace qwen {
namespace {

uint16_t toBf16(float f) { return floatToBf16(f); }  // safetensors.h
double fromBf16(uint16_t h) { return bf16ToFloat(h); }

struct PrefillCase {
  int D, hq, hk, pos, n;
};

TEST(QwenPrefillGpu, AttentionMatchesFp64Reference) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  if (!gpu::attentionPrefillSupported(128, 0)) GTEST_SKIP() << "attentionPrefill needs sm_80+";
  const std::vector<PrefillCase> cases = {
      {128, 8, 2, 0, 1},   {128, 8, 2, 0, 17},   {128, 8, 2, 0, 63},    {128, 8, 2, 0, 64},
      {128, 8, 2, 0, 65},  {128, 32, 8, 0, 200}, {128, 4, 1, 100, 77},  {128, 8, 2, 1000, 33},
      {64, 16, 2, 0, 300}, {64, 8, 8, 5, 129},   {32, 4, 4, 0, 97},     {16, 8, 4, 0, 33},
      {16, 8, 4, 20, 45},  {128, 8, 1, 0, 2048}, {128, 4, 1, 0, 16384}, {128, 8, 2, 8191, 1999},
  };
  uint64_t rng = 0x9e3779b97f4a7c15ull;
  auto uni = [&]() {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>((rng >> 40) & 0xffffff) / 8388608.f - 1.f;  // [-1, 1)
  };
  for (const PrefillCase& c : cases) {
    const int ctx = c.pos + c.n, G = c.hq / c.hk;
    const size_t qN = static_cast<size_t>(c.n) * c.hq * c.D, kvN = static_cast<size_t>(ctx) * c.hk * c.D;
    std::vector<uint16_t> q(qN), k(kvN), v(kvN), out(qN);
    for (auto& x : q) x = toBf16(4.f * uni());
    for (auto& x : k) x = toBf16(uni());
    for (auto& x : v) x = toBf16(uni());
    void *dq, *dk, *dv, *dout, *dpos;
    ASSERT_EQ(cudaMalloc(&dq, qN * 2), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dk, kvN * 2), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dv, kvN * 2), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dout, qN * 2), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dpos, 4), cudaSuccess);
    cudaMemcpy(dq, q.data(), qN * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dk, k.data(), kvN * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dv, v.data(), kvN * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dpos, &c.pos, 4, cudaMemcpyHostToDevice);
    cudaMemset(dout, 0xff, qN * 2);  // NaN poison
    ASSERT_TRUE(gpu::prepareAttentionPrefill());
    gpu::attentionPrefill(static_cast<__nv_bfloat16*>(dq), static_cast<__nv_bfloat16*>(dk),
                          static_cast<__nv_bfloat16*>(dv), static_cast<int32_t*>(dpos), c.n, c.hq, c.hk, c.D,
                          static_cast<__nv_bfloat16*>(dout), nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(out.data(), dout, qN * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    cudaFree(dq);
    cudaFree(dk);
    cudaFree(dv);
    cudaFree(dout);
    cudaFree(dpos);
    // Rows to check: all up to 2048 tokens, else tile edges, ends and random rows.
    std::vector<int> rows;
    if (static_cast<int64_t>(c.n) * ctx <= 4200000) {
      for (int t = 0; t < c.n; ++t) rows.push_back(t);
    } else {
      for (int t : {0, 1, 15, 16, 63, 64, 65, c.n / 2, c.n - 65, c.n - 64, c.n - 2, c.n - 1}) rows.push_back(t);
      for (int i = 0; i < 48; ++i) rows.push_back(static_cast<int>((uni() * 0.5f + 0.5f) * (c.n - 1)));
    }
    // fp64 reference, rows spread over the host's threads.
    const double scale = 1.0 / std::sqrt(static_cast<double>(c.D));
    const int nth = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
    std::vector<int> badT(nth, 0);
    std::vector<double> worstT(nth, 0.0);
    std::vector<std::string> firstT(nth);
    std::vector<std::thread> pool;
    for (int w = 0; w < nth; ++w)
      pool.emplace_back([&, w] {
        std::vector<double> sc(ctx), acc(c.D);
        for (size_t ri = w; ri < rows.size(); ri += nth) {
          const int t = rows[ri];
          for (int h = 0; h < c.hq; ++h) {
            const int kvh = h / G, last = c.pos + t;
            double mx = -1e300;
            for (int s2 = 0; s2 <= last; ++s2) {
              double d = 0;
              for (int i = 0; i < c.D; ++i)
                d += fromBf16(q[(static_cast<size_t>(t) * c.hq + h) * c.D + i]) *
                     fromBf16(k[(static_cast<size_t>(s2) * c.hk + kvh) * c.D + i]);
              sc[s2] = d * scale;
              mx = std::max(mx, sc[s2]);
            }
            double l = 0;
            std::fill(acc.begin(), acc.end(), 0.0);
            for (int s2 = 0; s2 <= last; ++s2) {
              const double p = std::exp(sc[s2] - mx);
              l += p;
              for (int i = 0; i < c.D; ++i) acc[i] += p * fromBf16(v[(static_cast<size_t>(s2) * c.hk + kvh) * c.D + i]);
            }
            for (int i = 0; i < c.D; ++i) {
              const double ref = acc[i] / l, got = fromBf16(out[(static_cast<size_t>(t) * c.hq + h) * c.D + i]);
              const double e = std::fabs(got - ref);
              worstT[w] = std::max(worstT[w], e);
              if (!(e <= std::ldexp(std::fabs(ref), -7) + 4e-3) && ++badT[w] == 1)
                firstT[w] = "token " + std::to_string(t) + " head " + std::to_string(h) + " dim " + std::to_string(i) +
                            " got " + std::to_string(got) + " ref " + std::to_string(ref);
            }
          }
        }
      });
    for (auto& th : pool) th.join();
    int bad = 0;
    double worst = 0;
    for (int w = 0; w < nth; ++w) {
      bad += badT[w];
      worst = std::max(worst, worstT[w]);
      if (!firstT[w].empty())
        ADD_FAILURE() << "D " << c.D << " hq " << c.hq << " hk " << c.hk << " pos " << c.pos << " n " << c.n << ": "
                      << firstT[w];
    }
    EXPECT_EQ(bad, 0) << "D " << c.D << " n " << c.n << " pos " << c.pos << ": worst |out - ref| " << worst;
    std::printf("attentionPrefill D %d hq %d hk %d pos %d n %d: %zu rows checked, worst |out - ref| %.2e\n", c.D, c.hq,
                c.hk, c.pos, c.n, rows.size(), worst);
  }
}

// ---- chunked prefill == one call, and the decode-kernel path, on a model ----

struct Variant {
  const char* name;
  int ubatch;
  bool prefillAttention;
};

// Per variant: prefillChunked over the prompt, then 8 decode steps teacher-forced with `follow`
// (when non-empty) or the variant's own tokens. Returns the last-row logits of each step.
void runVariant(const ModelConfig& c, const Variant& v, const std::vector<int32_t>& prompt,
                const std::vector<int32_t>& follow, std::vector<std::vector<float>>* logits,
                std::vector<int32_t>* tokens) {
  TpShape s;
  std::string err;
  ASSERT_TRUE(makeTpShape(c, 1, 0, &s, &err)) << err;
  GpuModel m(c, s, 0, nullptr);
  GpuModelOptions o;
  o.ctxSize = static_cast<int>(prompt.size()) + 16;
  o.maxTokensPerCall = v.ubatch;
  o.seed = 7;
  o.prefillAttention = v.prefillAttention;
  ASSERT_TRUE(m.init(o, &err)) << v.name << ": " << err;
  std::vector<int32_t> toks = prompt;
  int32_t draft = 0;
  ASSERT_TRUE(prefillChunked(m, &toks, false, &draft, &err)) << v.name << ": " << err;
  logits->assign(1, {});
  ASSERT_TRUE(m.lastLogits(1, &(*logits)[0], &err)) << err;
  tokens->assign(1, toks.back());
  for (int i = 0; i < 8; ++i) {
    const int pos = static_cast<int>(prompt.size()) + i;
    int32_t in = follow.empty() ? tokens->back() : follow[static_cast<size_t>(i)], next = -1;
    ASSERT_TRUE(m.target(&in, 1, pos, &next, &err)) << err;
    logits->emplace_back();
    ASSERT_TRUE(m.lastLogits(1, &logits->back(), &err)) << err;
    tokens->push_back(next);
  }
}

// |a - ref| <= tol * max|ref| per step, and equal argmax where ref's top-2 margin > 2 tol max|ref|.
void compareSteps(const char* what, const std::vector<std::vector<float>>& a, const std::vector<int32_t>& ta,
                  const std::vector<std::vector<float>>& ref, const std::vector<int32_t>& tref, float tol) {
  ASSERT_EQ(a.size(), ref.size());
  int checked = 0;
  for (size_t st = 0; st < ref.size(); ++st) {
    float mx = 0, e = 0, top = -1e30f, second = -1e30f;
    for (size_t i = 0; i < ref[st].size(); ++i) {
      const float r = ref[st][i];
      // NaN would pass the bound below (std::max drops it): every logit must be a number.
      if (!std::isfinite(a[st][i]) || !std::isfinite(r)) {
        ADD_FAILURE() << what << ": step " << st << " logit " << i << " is " << a[st][i] << " (reference " << r << ")";
        return;
      }
      mx = std::max(mx, std::fabs(r));
      e = std::max(e, std::fabs(a[st][i] - r));
      if (r > top)
        second = top, top = r;
      else if (r > second)
        second = r;
    }
    EXPECT_LE(e, tol * mx) << what << ": step " << st;
    if (top - second > 2 * tol * mx) {
      EXPECT_EQ(ta[st], tref[st]) << what << ": step " << st;
      ++checked;
    }
  }
  EXPECT_GT(checked, 0) << what << ": no step had a clear top-2 margin, so no token was compared";
  std::printf("%s: %d of %zu steps with a clear margin, tokens equal there\n", what, checked, ref.size());
}

TEST(QwenPrefillGpu, ChunkedPrefillEqualsOneCallTiny) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ModelConfig c;
  std::string err;
  ASSERT_TRUE(presetConfig("tiny", &c, &err));
  std::vector<int32_t> prompt(60);
  for (int i = 0; i < 60; ++i) prompt[i] = (i * 389 + 17) % c.vocabSize;
  // fp32 CPU reference (same synthetic weights, rounded to bf16), prompt in one call.
  HostWeights w;
  makeSyntheticHostWeights(c, 7, /*roundBf16=*/true, &w);
  TpShape s;
  ASSERT_TRUE(makeTpShape(c, 1, 0, &s, &err));
  CpuModel cpu(c, s, &w, nullptr, 76);
  std::vector<std::vector<float>> cl;
  std::vector<int32_t> ct, cn(60);
  ASSERT_TRUE(cpu.target(prompt.data(), 60, 0, cn.data(), &err)) << err;
  cl.emplace_back(cpu.lastLogits().end() - c.vocabSize, cpu.lastLogits().end());
  ct.push_back(cn[59]);
  for (int i = 0; i < 8; ++i) {
    int32_t in = ct.back(), next = -1;
    ASSERT_TRUE(cpu.target(&in, 1, 60 + i, &next, &err)) << err;
    cl.push_back(cpu.lastLogits());
    ct.push_back(next);
  }
  const std::vector<int32_t> follow(ct.begin(), ct.end() - 1);
  std::vector<std::vector<float>> one, l;
  std::vector<int32_t> tOne, t;
  runVariant(c, {"one call", 64, true}, prompt, follow, &one, &tOne);
  compareSteps("tiny one call vs CPU", one, tOne, cl, ct, 0.03f);
  for (const Variant& v :
       {Variant{"chunks of 20", 20, true}, Variant{"chunks of 7", 7, true}, Variant{"decode kernel only", 64, false}}) {
    runVariant(c, v, prompt, follow, &l, &t);
    compareSteps((std::string("tiny ") + v.name + " vs CPU").c_str(), l, t, cl, ct, 0.03f);
    compareSteps((std::string("tiny ") + v.name + " vs one call").c_str(), l, t, one, tOne, 0.02f);
  }
}

// The profile's prefill attention timing (GpuModel::timeChunkAttention): a chunk's causal FLOPs
// are 4 x head_dim x heads x the keys its queries see (query i sees i + 1), every layer; it times
// something (> 0 ms) at positions 0 and 100, and refuses a call the prefill kernel does not run
// (16 rows: the decode kernels'), one past the KV cache and one past the micro-batch.
TEST(QwenPrefillGpu, ChunkAttentionTimingCountsCausalFlops) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ModelConfig c;
  std::string err;
  ASSERT_TRUE(presetConfig("qwen3-0.6b", &c, &err));
  c.numLayers = 3;
  c.mtpLayers = 0;
  TpShape s;
  ASSERT_TRUE(makeTpShape(c, 1, 0, &s, &err)) << err;
  GpuModel m(c, s, 0, nullptr);
  GpuModelOptions o;
  o.ctxSize = 200;
  o.maxTokensPerCall = 64;
  o.seed = 5;
  ASSERT_TRUE(m.init(o, &err)) << err;
  for (int pos : {0, 100}) {
    double ms = 0, flop = 0;
    ASSERT_TRUE(m.timeChunkAttention(64, pos, 3, &ms, &flop, &err)) << err;
    EXPECT_GT(ms, 0.0);
    const double keys = 64.0 * pos + 64.0 * 65.0 / 2;
    EXPECT_DOUBLE_EQ(flop, 4.0 * c.headDim * c.numHeads * keys * c.numLayers) << "position " << pos;
  }
  double ms = 0, flop = 0;
  EXPECT_FALSE(m.timeChunkAttention(16, 0, 1, &ms, &flop, &err));
  EXPECT_FALSE(m.timeChunkAttention(64, 137, 1, &ms, &flop, &err));
  EXPECT_FALSE(m.timeChunkAttention(65, 0, 1, &ms, &flop, &err));
  EXPECT_NE(err.find("not a chunk the fa2 / fa3 prefill kernel runs"), std::string::npos) << err;
}

TEST(QwenPrefillGpu, ChunkedPrefillEqualsOneCallHeadDim128) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ModelConfig c;
  std::string err;
  ASSERT_TRUE(presetConfig("qwen3-0.6b", &c, &err));
  c.numLayers = 4;
  c.mtpLayers = 0;
  std::vector<int32_t> prompt(300);
  for (int i = 0; i < 300; ++i) prompt[i] = (i * 7919 + 13) % c.vocabSize;
  std::vector<std::vector<float>> one, l;
  std::vector<int32_t> tOne, t;
  runVariant(c, {"one call", 512, true}, prompt, {}, &one, &tOne);
  const std::vector<int32_t> follow(tOne.begin(), tOne.end() - 1);
  runVariant(c, {"one call", 512, true}, prompt, follow, &one, &tOne);
  for (const Variant& v : {Variant{"chunks of 128", 128, true}, Variant{"chunks of 50", 50, true},
                           Variant{"decode kernel only", 512, false}}) {
    runVariant(c, v, prompt, follow, &l, &t);
    compareSteps((std::string("0.6b-shape ") + v.name + " vs one call").c_str(), l, t, one, tOne, 0.02f);
  }
}

// The TP=2 twin of runVariant: both ranks in threads, rank r's vocab shard of each step's
// last-row logits put into one full row. Fails the test when the overlapped path was asked for
// and did not run.
void runTp2Variant(const ModelConfig& c, int ubatch, bool overlap, bool fusedNorm, const std::vector<int32_t>& prompt,
                   const std::vector<int32_t>& follow, std::vector<std::vector<float>>* logits,
                   std::vector<int32_t>* tokens) {
  const int tp = 2, steps = 9;
  int ndev = 0;
  ASSERT_EQ(cudaGetDeviceCount(&ndev), cudaSuccess);
  const std::vector<int> devs = {0, 1 % ndev};
  std::vector<std::unique_ptr<tpcomm::Communicator>> comms;
  ASSERT_EQ(tpcomm::Communicator::createGroup(devs, tpcomm::Config{}, &comms), tpcomm::Status::kOk)
      << tpcomm::lastErrorMessage();
  logits->assign(steps, std::vector<float>(static_cast<size_t>(c.vocabSize), NAN));
  tokens->assign(steps, -1);
  std::vector<std::string> errs(tp);
  std::vector<int> overlapped(tp, 0);
  std::vector<std::thread> th;
  qwen::RankGate gate(tp);  // no collective before every rank's init (rank_gate.h)
  for (int r = 0; r < tp; ++r)
    th.emplace_back([&, r] {
      TpShape s;
      const bool shaped = makeTpShape(c, tp, r, &s, &errs[r]);
      GpuModel m(c, s, devs[r], comms[r].get());
      m.setRankGate(&gate, r);  // as qwen_tp runs: graph gate, host gate before each eager all-reduce
      GpuModelOptions o;
      o.ctxSize = static_cast<int>(prompt.size()) + 16;
      o.maxTokensPerCall = ubatch;
      o.seed = 7;
      o.prefillOverlap = overlap;
      o.pdl = ndev >= tp;  // no PDL with both ranks on one GPU (qwen_gpu_test.cc's main says why)
      o.fusedNorm = fusedNorm;
      const bool ready = shaped && m.init(o, &errs[r]);
      if (!gate.pass(ready)) {
        if (ready) errs[r] = "another rank's init failed";
        return;
      }
      std::vector<int32_t> toks = prompt;
      int32_t draft = 0, in = 0, next = -1;
      std::vector<float> lg;
      for (int st = 0; st < steps; ++st) {
        const int pos = static_cast<int>(prompt.size()) + st - 1;
        if (st == 0 ? !prefillChunked(m, &toks, false, &draft, &errs[r]) : !m.target(&in, 1, pos, &next, &errs[r]))
          return gate.leave(r);  // a peer at a gate stops at once
        if (!m.lastLogits(1, &lg, &errs[r])) return gate.leave(r);
        std::copy(lg.begin(), lg.end(), (*logits)[st].begin() + s.vocabBegin());  // disjoint shards
        const int32_t tok = st == 0 ? toks.back() : next;
        if (r == 0) (*tokens)[st] = tok;
        if (st + 1 < steps) in = follow.empty() ? tok : follow[static_cast<size_t>(st)];
      }
      overlapped[r] = m.overlappedCalls();
    });
  for (auto& t : th) t.join();
  for (auto& cm : comms) cm->destroy();
  for (int r = 0; r < tp; ++r) ASSERT_TRUE(errs[r].empty()) << "rank " << r << ": " << errs[r];
  for (int r = 0; r < tp; ++r)
    if (overlap) EXPECT_GT(overlapped[r], 0) << "rank " << r << ": the overlapped prefill never ran";
    else EXPECT_EQ(overlapped[r], 0) << "rank " << r;
}

TEST(QwenPrefillGpu, OverlappedPrefillEqualsSerialTp2) {
  ModelConfig c;
  std::string err;
  ASSERT_TRUE(presetConfig("qwen3-0.6b", &c, &err));
  c.numLayers = 4;
  c.mtpLayers = 0;
  std::vector<int32_t> prompt(300);
  for (int i = 0; i < 300; ++i) prompt[i] = (i * 7919 + 13) % c.vocabSize;
  std::vector<std::vector<float>> serial, l;
  std::vector<int32_t> tSerial, t;
  ASSERT_NO_FATAL_FAILURE(runTp2Variant(c, 512, false, true, prompt, {}, &serial, &tSerial));
  const std::vector<int32_t> follow(tSerial.begin(), tSerial.end() - 1);
  struct V {
    const char* name;
    int ubatch;
    bool fused;
  };
  for (const V& v : {V{"overlapped, one chunk of 300", 512, true}, V{"overlapped, chunks of 128", 128, true},
                     V{"overlapped, unfused epilogue", 512, false}}) {
    ASSERT_NO_FATAL_FAILURE(runTp2Variant(c, v.ubatch, true, v.fused, prompt, follow, &l, &t));
    compareSteps((std::string("TP=2 ") + v.name + " vs serial").c_str(), l, t, serial, tSerial, 0.02f);
  }
}

}  // namespace
}  // namespace qwen
