// Tests of the speculative decoding loop (examples/qwen_tp/speculative) on the CPU reference:
// MTP speculation gives token-for-token the plain greedy output for N = 1..6, with the model's
// real drafts (almost never right on random weights) and with simulated acceptance (mostly
// right), at TP = 1 and TP = 2; the acceptance counters match what was simulated; metrics text.
#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>

#include "cpu_group.h"
#include "cpu_model.h"
#include "speculative.h"

namespace qwen {
namespace {

struct GenRun {
  std::vector<int32_t> out;
  GenerateStats stats;
};

bool runGenerate(const ModelConfig& cfg, const HostWeights& w, int tp, const std::vector<int32_t>& p, const GenerateOptions& opt,
                 GenRun* run, std::string* err) {
  std::mutex mu;
  return runCpuTpGroup(tp, [&](int rank, tpcomm::Communicator* comm, std::string* e) {
    TpShape s;
    if (!makeTpShape(cfg, tp, rank, &s, e)) return false;
    CpuModel model(cfg, s, &w, comm, 96);
    GenRun r;
    if (!generate(model, p, opt, &r.out, &r.stats, e)) return false;
    std::lock_guard<std::mutex> lock(mu);
    if (rank == 0) *run = r;
    return true;
  }, err);
}

class QwenSpeculative : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string err;
    ASSERT_TRUE(presetConfig("tiny", &cfg_, &err));
    makeSyntheticHostWeights(cfg_, 3, true, &w_);
    for (int i = 0; i < 11; ++i) prompt_.push_back((i * 577 + 5) % cfg_.vocabSize);
    GenerateOptions g;
    g.nPredict = kTokens;
    ASSERT_TRUE(runGenerate(cfg_, w_, 1, prompt_, g, &greedy_, &err)) << err;
    ASSERT_EQ(greedy_.out.size(), static_cast<size_t>(kTokens));
    EXPECT_EQ(greedy_.stats.drafted, 0);
  }
  static constexpr int kTokens = 40;
  ModelConfig cfg_;
  HostWeights w_;
  std::vector<int32_t> prompt_;
  GenRun greedy_;
};

TEST_F(QwenSpeculative, RealDraftsMatchGreedyForEveryN) {
  for (int n = 1; n <= 6; ++n) {
    GenerateOptions g;
    g.nPredict = kTokens;
    g.draftNMax = n;
    GenRun r;
    std::string err;
    ASSERT_TRUE(runGenerate(cfg_, w_, 1, prompt_, g, &r, &err)) << err;
    EXPECT_EQ(r.out, greedy_.out) << "N = " << n;
    EXPECT_GT(r.stats.drafted, 0);
    EXPECT_FALSE(r.stats.simulated);
    EXPECT_EQ(r.stats.generated, kTokens);
  }
}

TEST_F(QwenSpeculative, SimulatedAcceptanceMatchesGreedyAndIsCounted) {
  for (int tp : {1, 2}) {
    for (double a : {0.0, 0.485, 1.0}) {
      for (int n : {1, 3, 5, 6}) {
        GenerateOptions g;
        g.nPredict = kTokens;
        g.draftNMax = n;
        g.simAcceptance = a;
        g.reference = &greedy_.out;
        GenRun r;
        std::string err;
        ASSERT_TRUE(runGenerate(cfg_, w_, tp, prompt_, g, &r, &err)) << err;
        EXPECT_EQ(r.out, greedy_.out) << "tp " << tp << " A " << a << " N " << n;
        EXPECT_TRUE(r.stats.simulated);
        if (a == 0.0) EXPECT_EQ(r.stats.accepted, 0) << "N " << n;
        if (a == 1.0) {
          EXPECT_EQ(r.stats.accepted, r.stats.drafted) << "N " << n;  // every draft right and verified
          // 1 token from prefill; each round emits nd + 1 tokens, nd = min(N, still wanted - 1).
          int64_t rounds = 0;
          for (int left = kTokens - 1; left > 0; ++rounds) left -= std::max(0, std::min(n, left - 1)) + 1;
          EXPECT_EQ(r.stats.rounds, rounds) << "N " << n;
        }
        if (a == 0.485 && n == 5) {
          EXPECT_GT(r.stats.acceptance(), 0.15);
          EXPECT_LT(r.stats.acceptance(), 0.75);
        }
      }
    }
  }
}

// Wraps the engine under test and checks every draft against a fresh model that recomputes the
// whole MTP cache from the committed tokens: catches MTP caches left stale after a rollback
// (which the target's verification would otherwise hide, costing only acceptance).
class CheckingEngine : public DecoderEngine {
 public:
  CheckingEngine(const ModelConfig& c, const TpShape& s, const HostWeights* w)
      : c_(c), s_(s), w_(w), inner_(c, s, w, nullptr, 96) {}
  bool target(const int32_t* t, int n, int pos, int32_t* next, std::string* e) override {
    if (seq_.size() < static_cast<size_t>(pos + n)) seq_.resize(pos + n);
    for (int i = 0; i < n; ++i) seq_[pos + i] = t[i];
    return inner_.target(t, n, pos, next, e);
  }
  bool mtpFromTarget(const int32_t* t, int n, int slot, int32_t* draft, std::string* e) override {
    if (seq_.size() < static_cast<size_t>(slot + 1 + n)) seq_.resize(slot + 1 + n);
    for (int i = 0; i < n; ++i) seq_[slot + 1 + i] = t[i];
    committed_ = slot + n;  // pairs 0..slot+n-1 are real
    chain_.clear();
    if (!inner_.mtpFromTarget(t, n, slot, draft, e)) return false;
    return check(*draft, e);
  }
  bool mtpChain(int32_t token, int slot, int32_t* draft, std::string* e) override {
    if (slot != committed_ + static_cast<int>(chain_.size())) return *e = "mtpChain at an unexpected slot", false;
    chain_.push_back(token);
    if (!inner_.mtpChain(token, slot, draft, e)) return false;
    return check(*draft, e);
  }
  bool hasMtp() const override { return true; }
  int vocabSize() const override { return c_.vocabSize; }
  int ctxSize() const override { return 96; }
  int maxTokensPerCall() const override { return 96; }
  int checks = 0, mismatches = 0;

 private:
  bool check(int32_t draft, std::string* e) {
    CpuModel fresh(c_, s_, w_, nullptr, 96);
    std::vector<int32_t> next(committed_);
    int32_t d = -1;
    if (!fresh.target(seq_.data(), committed_, 0, next.data(), e)) return false;
    if (!fresh.mtpFromTarget(seq_.data() + 1, committed_, 0, &d, e)) return false;
    for (size_t i = 0; i < chain_.size(); ++i)
      if (!fresh.mtpChain(chain_[i], committed_ + static_cast<int>(i), &d, e)) return false;
    ++checks;
    if (d != draft) ++mismatches;
    return true;
  }
  ModelConfig c_;
  TpShape s_;
  const HostWeights* w_;
  CpuModel inner_;
  std::vector<int32_t> seq_, chain_;
  int committed_ = 0;
};

TEST_F(QwenSpeculative, DraftsComeFromAnMtpCacheThatMatchesARecompute) {
  TpShape s;
  std::string err;
  ASSERT_TRUE(makeTpShape(cfg_, 1, 0, &s, &err));
  for (double a : {0.0, 0.7}) {
    CheckingEngine e(cfg_, s, &w_);
    GenerateOptions g;
    g.nPredict = 24;
    g.draftNMax = 4;
    g.simAcceptance = a;
    std::vector<int32_t> ref(greedy_.out.begin(), greedy_.out.begin() + 24);
    g.reference = &ref;
    std::vector<int32_t> out;
    GenerateStats st;
    ASSERT_TRUE(generate(e, prompt_, g, &out, &st, &err)) << err;
    EXPECT_EQ(out, ref);
    EXPECT_GT(e.checks, 10);
    EXPECT_EQ(e.mismatches, 0) << "A " << a;
  }
}

TEST(QwenSimulateDraft, RightWithProbabilityAElseNeverRight) {
  int right = 0;
  const int trials = 20000;
  for (int i = 0; i < trials; ++i) {
    int32_t d = simulateDraft(5, 77, 0.3, 42, i, 1000);
    if (d == 77) ++right;
    ASSERT_GE(d, 0);
    ASSERT_LT(d, 1000);
  }
  EXPECT_NEAR(right / static_cast<double>(trials), 0.3, 0.02);
  for (int i = 0; i < 1000; ++i) ASSERT_NE(simulateDraft(77, 77, 0.0, 1, i, 1000), 77);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(simulateDraft(3, 77, 1.0, 1, i, 1000), 77);
  EXPECT_EQ(simulateDraft(3, 9, 0.5, 7, 12, 1000), simulateDraft(3, 9, 0.5, 7, 12, 1000));  // seeded
}

TEST(QwenMetrics, TimingsAndPrometheusText) {
  GenerateStats s;
  s.promptTokens = 512;
  s.generated = 257;
  s.prefillSeconds = 0.25;
  s.decodeSeconds = 2.0;
  s.drafted = 500;
  s.accepted = 250;
  s.rounds = 100;
  s.simulated = true;
  std::string t = formatTimings(s);
  EXPECT_NE(t.find("2048.00 tokens per second"), std::string::npos) << t;  // 512 / 0.25
  EXPECT_NE(t.find("128.00 tokens per second"), std::string::npos) << t;   // 256 / 2.0
  EXPECT_NE(t.find("simulated acceptance"), std::string::npos) << t;
  EXPECT_NE(t.find("0.50000"), std::string::npos) << t;
  EXPECT_NE(t.find("mean accepted length = 3.500"), std::string::npos) << t;
  std::string p = formatPrometheus(s, 1024);
  for (const char* m : {"llamacpp:tokens_predicted_total 257", "llamacpp:tokens_predicted_seconds 2",
                        "llamacpp:prompt_tokens_total 512", "llamacpp:prompt_seconds_total 0.25",
                        "llamacpp:spec_decode_num_accepted_tokens_total 250",
                        "llamacpp:spec_decode_num_draft_tokens_total 500", "llamacpp:n_tokens_max 769"})
    EXPECT_NE(p.find(m), std::string::npos) << m << "\n" << p;
}

}  // namespace
}  // namespace qwen
