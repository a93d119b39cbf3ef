// Chunked prefill on the CPU reference (label cpu): a prompt processed in chunks of
// --ubatch-size tokens (prefillChunked, what generate() does) gives the same greedy token, the
// same last-row logits (within fp32 rounding: the chunks see the same keys, summed in the same
// order, so the bound is a few ulps), the same KV cache (the next decode step's logits) and the
// same MTP draft as the whole prompt in one call; generate() gives the same tokens for every
// chunk size, plain and speculative; a prompt that does not fit the cache is an error.
#include <gtest/gtest.h>

#include <cmath>

#include "cpu_model.h"
#include "speculative.h"

namespace qwen {
namespace {

struct Tiny {
  ModelConfig cfg;
  HostWeights w;
  Tiny() {
    std::string err;
    presetConfig("tiny", &cfg, &err);
    makeSyntheticHostWeights(cfg, 11, /*roundBf16=*/false, &w);
  }
};

std::vector<int32_t> makePrompt(int n, int vocab) {
  std::vector<int32_t> p(n);
  for (int i = 0; i < n; ++i) p[i] = (i * 613 + 29) % vocab;
  return p;
}

float maxAbs(const float* a, int n) {
  float m = 0;
  for (int i = 0; i < n; ++i) m = std::max(m, std::fabs(a[i]));
  return m;
}

TEST(QwenPrefill, ChunkedPrefillEqualsOneCall) {
  Tiny m;
  TpShape s;
  std::string err;
  ASSERT_TRUE(makeTpShape(m.cfg, 1, 0, &s, &err));
  const int P = 37, V = m.cfg.vocabSize, ctx = 64;
  const auto prompt = makePrompt(P, V);
  // One call.
  CpuModel one(m.cfg, s, &m.w, nullptr, ctx);
  std::vector<int32_t> toksOne = prompt;
  int32_t draftOne = -1;
  ASSERT_TRUE(prefillChunked(one, &toksOne, true, &draftOne, &err)) << err;
  ASSERT_EQ(toksOne.size(), static_cast<size_t>(P + 1));
  const std::vector<float> lastOne(one.lastLogits().end() - V, one.lastLogits().end());
  int32_t stepOne = -1;
  ASSERT_TRUE(one.target(&toksOne[P], 1, P, &stepOne, &err)) << err;
  const std::vector<float> stepLogitsOne = one.lastLogits();
  const float scale = maxAbs(lastOne.data(), V), stepScale = maxAbs(stepLogitsOne.data(), V);
  ASSERT_GT(scale, 0.f);
  for (int ubatch : {1, 5, 8, 16, 36, 37, 64}) {
    CpuModel m2(m.cfg, s, &m.w, nullptr, ctx);
    m2.setMaxTokensPerCall(ubatch);
    std::vector<int32_t> toks = prompt;
    int32_t draft = -1;
    ASSERT_TRUE(prefillChunked(m2, &toks, true, &draft, &err)) << "ubatch " << ubatch << ": " << err;
    EXPECT_EQ(toks, toksOne) << "ubatch " << ubatch;
    EXPECT_EQ(draft, draftOne) << "ubatch " << ubatch;
    const std::vector<float>& l = m2.lastLogits();
    ASSERT_GE(l.size(), static_cast<size_t>(V));
    float worst = 0;
    for (int i = 0; i < V; ++i) worst = std::max(worst, std::fabs(l[l.size() - V + i] - lastOne[i]));
    EXPECT_LE(worst, 1e-5f * scale) << "ubatch " << ubatch << ": last-row logits";
    int32_t step = -1;
    ASSERT_TRUE(m2.target(&toks[P], 1, P, &step, &err)) << err;
    EXPECT_EQ(step, stepOne) << "ubatch " << ubatch;
    worst = 0;
    for (int i = 0; i < V; ++i) worst = std::max(worst, std::fabs(m2.lastLogits()[i] - stepLogitsOne[i]));
    EXPECT_LE(worst, 1e-5f * stepScale) << "ubatch " << ubatch << ": the next step (the KV cache)";
  }
}

TEST(QwenPrefill, GenerateGivesTheSameTokensForEveryChunkSize) {
  Tiny m;
  TpShape s;
  std::string err;
  ASSERT_TRUE(makeTpShape(m.cfg, 1, 0, &s, &err));
  const auto prompt = makePrompt(29, m.cfg.vocabSize);
  for (int draftN : {0, 3}) {
    std::vector<int32_t> ref;
    for (int ubatch : {0, 4, 7, 29}) {
      CpuModel model(m.cfg, s, &m.w, nullptr, 80);
      model.setMaxTokensPerCall(ubatch);
      GenerateOptions g;
      g.nPredict = 24;
      g.draftNMax = draftN;
      std::vector<int32_t> out;
      GenerateStats st;
      ASSERT_TRUE(generate(model, prompt, g, &out, &st, &err)) << "ubatch " << ubatch << ": " << err;
      if (ref.empty())
        ref = out;
      else
        EXPECT_EQ(out, ref) << "ubatch " << ubatch << " drafts " << draftN;
    }
  }
}

TEST(QwenPrefill, PromptThatDoesNotFitTheCacheIsAnError) {
  Tiny m;
  TpShape s;
  std::string err;
  ASSERT_TRUE(makeTpShape(m.cfg, 1, 0, &s, &err));
  CpuModel model(m.cfg, s, &m.w, nullptr, 16);
  model.setMaxTokensPerCall(4);
  std::vector<int32_t> toks = makePrompt(16, m.cfg.vocabSize);  // 16 + the token it makes > 16
  int32_t draft = 0;
  EXPECT_FALSE(prefillChunked(model, &toks, false, &draft, &err));
  EXPECT_NE(err.find("--ctx-size"), std::string::npos) << err;
  std::vector<int32_t> empty;
  EXPECT_FALSE(prefillChunked(model, &empty, false, &draft, &err));
}

}  // namespace
}  // namespace qwen
