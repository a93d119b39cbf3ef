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

// Forwards to an engine and records every draft it returns (token and top probability): drafts
// on random weights are almost never accepted, so the output alone would not show a draft
// computed from a stale MTP cache slot; the drafts themselves do.
class RecordingEngine : public DecoderEngine {
 public:
  explicit RecordingEngine(DecoderEngine& e) : e_(e) {}
  bool target(const int32_t* t, int n, int pos, int32_t* next, std::string* err) override {
    return e_.target(t, n, pos, next, err);
  }
  bool prefill(const int32_t* t, int n, int pos, int32_t* last, std::string* err) override {
    return e_.prefill(t, n, pos, last, err);
  }
  bool mtpFromTarget(const int32_t* t, int n, int slot, int32_t* draft, std::string* err) override {
    return note(e_.mtpFromTarget(t, n, slot, draft, err), *draft);
  }
  bool mtpChain(int32_t token, int slot, int32_t* draft, std::string* err) override {
    return note(e_.mtpChain(token, slot, draft, err), *draft);
  }
  bool enableDraftProbability() override { return probs_ = e_.enableDraftProbability(); }
  double lastDraftProbability() const override { return e_.lastDraftProbability(); }
  bool hasMtp() const override { return e_.hasMtp(); }
  int vocabSize() const override { return e_.vocabSize(); }
  int ctxSize() const override { return e_.ctxSize(); }
  int maxTokensPerCall() const override { return e_.maxTokensPerCall(); }
  std::vector<double> drafts;  // token, then its probability when asked for

 private:
  bool note(bool ok, int32_t draft) {
    if (ok) drafts.push_back(draft);
    if (ok && probs_) drafts.push_back(e_.lastDraftProbability());
    return ok;
  }
  DecoderEngine& e_;
  bool probs_ = false;
};

// warm: warmSpeculation() first, on the same model (what qwen_tp does before its timed runs);
// drafts (when given): rank 0's drafts during generate().
bool runGenerate(const ModelConfig& cfg, const HostWeights& w, int tp, const std::vector<int32_t>& p, const GenerateOptions& opt,
                 GenRun* run, std::string* err, int ctx = 96, bool warm = false, std::vector<double>* drafts = nullptr) {
  std::mutex mu;
  return runCpuTpGroup(tp, [&](int rank, tpcomm::Communicator* comm, std::string* e) {
    TpShape s;
    if (!makeTpShape(cfg, tp, rank, &s, e)) return false;
    CpuModel model(cfg, s, &w, comm, ctx);
    GenRun r;
    if (warm && !warmSpeculation(model, opt, static_cast<int>(p.size()), e)) return false;
    RecordingEngine rec(model);
    if (!generate(rec, p, opt, &r.out, &r.stats, e)) return false;
    if (drafts && rank == 0) *drafts = rec.drafts;
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

// The warm-up writes KV and MTP slots past the prompt with junk calls; the run that follows
// must not see them: the same tokens, drafts and acceptance as a run on a fresh model, with and
// without p-min, at TP = 1 and 2.
TEST_F(QwenSpeculative, WarmUpLeavesNoTrace) {
  for (int tp : {1, 2})
    for (int n : {1, 3, 6})
      for (double pmin : {0.0, 0.3}) {
        GenerateOptions g;
        g.nPredict = kTokens;
        g.draftNMax = n;
        g.draftPMin = pmin;
        GenRun fresh, warmed;
        std::vector<double> freshDrafts, warmedDrafts;
        std::string err;
        ASSERT_TRUE(runGenerate(cfg_, w_, tp, prompt_, g, &fresh, &err, 96, false, &freshDrafts)) << err;
        ASSERT_TRUE(runGenerate(cfg_, w_, tp, prompt_, g, &warmed, &err, 96, true, &warmedDrafts)) << err;
        const std::string at = "TP " + std::to_string(tp) + ", N " + std::to_string(n) + ", p-min " + std::to_string(pmin);
        EXPECT_EQ(warmed.out, greedy_.out) << at;
        EXPECT_EQ(warmed.out, fresh.out) << at;
        EXPECT_EQ(warmed.stats.drafted, fresh.stats.drafted) << at;
        EXPECT_EQ(warmed.stats.accepted, fresh.stats.accepted) << at;
        EXPECT_GT(freshDrafts.size(), static_cast<size_t>(kTokens / 2)) << at;
        EXPECT_EQ(warmedDrafts, freshDrafts) << at << ": the drafts differ after a warm-up";
      }
  GenerateOptions g;
  g.nPredict = kTokens;
  g.draftNMax = 6;
  GenRun r;
  std::string err;
  EXPECT_FALSE(runGenerate(cfg_, w_, 1, prompt_, g, &r, &err, 16, true)) << "a warm-up past the KV cache must fail";
  EXPECT_NE(err.find("outside the KV cache"), std::string::npos) << err;
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

// The simulation's ratio math: per-token p at draft length n against accepted/drafted and mean
// length (rows: the numbers; n = 1, where the ratio is p itself; the ends).
TEST(QwenSimMath, DraftAcceptanceFromPerTokenAndBack) {
  struct Row {
    double p;
    int n;
    double ratio, meanLength, tol;
  };
  const Row rows[] = {
      {0.77, 5, 0.50, 3.45, 0.015},   // the issue: "per-token 0.77 ... accepted/drafted 0.50, mean length 3.45"
      {0.485, 5, 0.19, 1.95, 0.015},  // the old --sim-acceptance 0.485: "0.19 and a mean length of 1.95"
      {0.6, 1, 0.6, 1.6, 1e-12},      // one draft: the ratio is p
      {0.0, 4, 0.0, 1.0, 1e-12},
      {1.0, 6, 1.0, 7.0, 1e-12},
  };
  for (const Row& r : rows) {
    EXPECT_NEAR(expectedDraftAcceptance(r.p, r.n), r.ratio, r.tol) << "p " << r.p << " n " << r.n;
    EXPECT_NEAR(expectedMeanAcceptedLength(r.p, r.n), r.meanLength, r.tol * r.n) << "p " << r.p << " n " << r.n;
  }
  // Exact values for 0.77 at n = 5: 0.77 + 0.77^2 + ... + 0.77^5 = 2.44155...
  EXPECT_NEAR(expectedDraftAcceptance(0.77, 5) * 5, 0.77 + 0.5929 + 0.456533 + 0.35153 + 0.270678, 1e-5);
  for (int n : {1, 2, 3, 5, 8})
    for (double ratio : {0.05, 0.35, 0.485, 0.5, 0.9}) {
      const double p = perTokenForDraftAcceptance(ratio, n);
      EXPECT_GT(p, 0);
      EXPECT_LT(p, 1);
      EXPECT_NEAR(expectedDraftAcceptance(p, n), ratio, 1e-9) << "n " << n << " ratio " << ratio;
    }
  EXPECT_NEAR(perTokenForDraftAcceptance(0.485, 5), 0.7679, 0.001);  // the field report's ratio at n = 5
  EXPECT_EQ(perTokenForDraftAcceptance(0, 5), 0);
  EXPECT_EQ(perTokenForDraftAcceptance(1, 5), 1);
}

// A simulated run lands near the expected ratio: per-token 0.77 at n-min = n-max = 5 over 300
// tokens (about 90 rounds; seeded, so the numbers are fixed; the bounds are ~3 standard errors).
TEST_F(QwenSpeculative, PerTokenSimulationReachesTheExpectedRatio) {
  const int T = 300;
  GenerateOptions g;
  g.nPredict = T;
  GenRun ref, r;
  std::string err;
  ASSERT_TRUE(runGenerate(cfg_, w_, 1, prompt_, g, &ref, &err, 400)) << err;
  g.draftNMax = 5;
  g.draftNMin = 5;
  g.simAcceptance = 0.77;
  g.reference = &ref.out;
  ASSERT_TRUE(runGenerate(cfg_, w_, 1, prompt_, g, &r, &err, 400)) << err;
  EXPECT_EQ(r.out, ref.out);
  EXPECT_NEAR(r.stats.acceptance(), expectedDraftAcceptance(0.77, 5), 0.09) << formatTimings(r.stats);
  EXPECT_NEAR(r.stats.tokenAcceptance(), 0.77, 0.07) << formatTimings(r.stats);
  EXPECT_NEAR(r.stats.meanAcceptedLength(), expectedMeanAcceptedLength(0.77, 5), 0.45) << formatTimings(r.stats);
  EXPECT_EQ(r.stats.drafted % 5, 0) << "n-min = n-max = 5: every draft has 5 tokens";
}

// n-min drops short drafts; p-min stops drafting on a low top probability. Random weights: the
// MTP's top probability is tiny (about 1/vocab), so p-min 0.5 stops every draft, and p-min 1e-9
// none. The output is greedy's in every case.
TEST_F(QwenSpeculative, DraftLengthLimitsAsLlamaCpp) {
  struct Row {
    int nMin, nMax;
    double pMin;
    bool allDropped, noneDropped;
  };
  const Row rows[] = {{0, 4, 0.0, false, true}, {4, 4, 0.0, false, false}, {0, 4, 0.5, true, false},
                      {0, 4, 1e-9, false, true}, {2, 3, 1e-9, false, false}};
  for (int tp : {1, 2})
    for (const Row& row : rows) {
      GenerateOptions g;
      g.nPredict = kTokens;
      g.draftNMax = row.nMax;
      g.draftNMin = row.nMin;
      g.draftPMin = row.pMin;
      GenRun r;
      std::string err;
      ASSERT_TRUE(runGenerate(cfg_, w_, tp, prompt_, g, &r, &err)) << err;
      const std::string what = "tp " + std::to_string(tp) + " n-min " + std::to_string(row.nMin) + " p-min " +
                               std::to_string(row.pMin) + "\n" + formatTimings(r.stats);
      EXPECT_EQ(r.out, greedy_.out) << what;
      if (row.allDropped) EXPECT_EQ(r.stats.drafted, 0) << what;
      EXPECT_NE(formatTimings(r.stats).find("drafts dropped by n-min/p-min"), std::string::npos) << what;
      if (row.allDropped) EXPECT_GT(r.stats.draftsDropped, kTokens / 2) << what;
      if (row.noneDropped) EXPECT_EQ(r.stats.draftsDropped, 0) << what;
      if (row.nMin > 0) {
        EXPECT_GT(r.stats.drafted, 0) << what;
        EXPECT_GT(r.stats.draftsDropped, 0) << what << " (the last rounds have room for fewer than n-min)";
      }
      if (row.nMin == row.nMax) EXPECT_EQ(r.stats.drafted % row.nMax, 0) << what;
    }
  // Refused: n-min above n-max, p-min outside [0, 1], p-min with simulation.
  GenerateOptions bad;
  bad.nPredict = 8;
  bad.draftNMax = 3;
  bad.draftNMin = 4;
  GenRun r;
  std::string err;
  EXPECT_FALSE(runGenerate(cfg_, w_, 1, prompt_, bad, &r, &err));
  EXPECT_NE(err.find("--spec-draft-n-min"), std::string::npos) << err;
  bad.draftNMin = 0;
  bad.draftPMin = 1.5;
  EXPECT_FALSE(runGenerate(cfg_, w_, 1, prompt_, bad, &r, &err));
  EXPECT_NE(err.find("--spec-draft-p-min"), std::string::npos) << err;
  bad.draftPMin = 0.5;
  bad.simAcceptance = 0.5;
  bad.reference = &greedy_.out;
  EXPECT_FALSE(runGenerate(cfg_, w_, 1, prompt_, bad, &r, &err));
  EXPECT_NE(err.find("simulated"), std::string::npos) << err;
}

// The draft's top probability on the CPU reference is a probability, the same at TP = 1 and 2.
TEST_F(QwenSpeculative, DraftProbabilityIsTheSameOnEveryTpSize) {
  std::vector<double> probs[2];
  for (int tp : {1, 2}) {
    std::string err;
    std::mutex mu;
    ASSERT_TRUE(runCpuTpGroup(tp, [&](int rank, tpcomm::Communicator* comm, std::string* e) {
      TpShape s;
      if (!makeTpShape(cfg_, tp, rank, &s, e)) return false;
      CpuModel m(cfg_, s, &w_, comm, 96);
      if (!m.enableDraftProbability()) return *e = "no draft probability", false;
      std::vector<int32_t> next(prompt_.size());
      int32_t d = 0;
      if (!m.target(prompt_.data(), static_cast<int>(prompt_.size()), 0, next.data(), e)) return false;
      if (!m.mtpFromTarget(next.data(), static_cast<int>(prompt_.size()), 0, &d, e)) return false;
      std::vector<double> mine{m.lastDraftProbability()};
      for (int i = 0; i < 3; ++i) {
        if (!m.mtpChain(d, static_cast<int>(prompt_.size()) + i, &d, e)) return false;
        mine.push_back(m.lastDraftProbability());
      }
      std::lock_guard<std::mutex> lock(mu);
      if (rank == 0) probs[tp - 1] = mine;
      return true;
    }, &err)) << err;
  }
  ASSERT_EQ(probs[0].size(), 4u);
  ASSERT_EQ(probs[1].size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_GT(probs[0][i], 1.0 / cfg_.vocabSize);  // the top one is at least the mean
    EXPECT_LE(probs[0][i], 1.0);
    EXPECT_NEAR(probs[0][i], probs[1][i], 1e-4 * probs[0][i]);
  }
}

}  // namespace
}  // namespace qwen
