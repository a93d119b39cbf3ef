// qwen_sampling_test: speculative sampling keeps the target's distribution (a chi-square test over
// every sequence of a small vocabulary, many seeds), the sampling distribution's top-k / top-p /
// temperature, teacher-forced acceptance against a brute-force count, and round traces.
//
// TableEngine is a DecoderEngine whose target and MTP logits are fixed tables of the last two
// tokens: the exact distribution of any generated sequence is a product of table rows, so the
// empirical distribution of generate()'s output over many seeds can be compared with it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>

#include "sampler.h"
#include "speculative.h"
#include "synth.h"
#include "teacher_forced.h"

namespace qwen {
namespace {

constexpr int kV = 5;

class TableEngine : public DecoderEngine {
 public:
  // draftNoise 0: the MTP head's logits are the target's (the drafts then predict it well).
  TableEngine(uint64_t seed, double draftNoise) : hist_(64, 0), target_(kV * kV * kV), draft_(kV * kV * kV) {
    for (size_t i = 0; i < target_.size(); ++i) {
      target_[i] = static_cast<float>(3.0 * (uniform01(seed, 1, i, 9) - 0.5));
      draft_[i] = static_cast<float>(target_[i] + draftNoise * 3.0 * (uniform01(seed, 2, i, 9) - 0.5));
    }
  }
  const float* targetRow(int a, int b) const { return &target_[static_cast<size_t>((a * kV + b) * kV)]; }
  const float* draftRow(int a, int b) const { return &draft_[static_cast<size_t>((a * kV + b) * kV)]; }
  static int32_t argmax(const float* row) {
    int best = 0;
    for (int v = 1; v < kV; ++v)
      if (row[v] > row[best]) best = v;
    return best;
  }

  bool target(const int32_t* tokens, int n, int pos, int32_t* next, std::string*) override {
    last_.clear();
    for (int i = 0; i < n; ++i) {
      hist_[static_cast<size_t>(pos + i)] = tokens[i];
      const float* row = targetRow(pos + i > 0 ? hist_[static_cast<size_t>(pos + i - 1)] : 0, tokens[i]);
      last_.insert(last_.end(), row, row + kV);
      next[i] = argmax(row);
    }
    return true;
  }
  // Pair slot s: (h_s, t_{s+1}); h_s stands for t_s, so the draft of t_{s+2} reads (t_s, t_{s+1}).
  bool mtpFromTarget(const int32_t* tokens, int n, int slot, int32_t* draft, std::string*) override {
    prevTok_ = tokens[n - 1];
    return emitDraft(hist_[static_cast<size_t>(slot + n - 1)], tokens[n - 1], draft);
  }
  bool mtpChain(int32_t token, int, int32_t* draft, std::string*) override {
    const int32_t a = prevTok_;
    prevTok_ = token;
    return emitDraft(a, token, draft);
  }
  bool logitsRows(int rows, std::vector<float>* out, std::string*) override {
    out->assign(last_.end() - static_cast<ptrdiff_t>(rows) * kV, last_.end());
    return true;
  }
  bool hasMtp() const override { return true; }
  int vocabSize() const override { return kV; }
  int ctxSize() const override { return static_cast<int>(hist_.size()); }
  int maxTokensPerCall() const override { return 16; }

 private:
  bool emitDraft(int32_t a, int32_t b, int32_t* draft) {
    const float* row = draftRow(a, b);
    last_.assign(row, row + kV);
    *draft = argmax(row);
    return true;
  }
  std::vector<int32_t> hist_;
  std::vector<float> target_, draft_, last_;
  int32_t prevTok_ = 0;
};

struct SamplingCase {
  double temp;
  int topK;
  double topP;
  int nMax, nMin;
};

// Chi-square critical value at upper-tail probability alpha = 1e-4 (z = 3.719), Wilson-Hilferty.
double chiSquareCritical(int df) {
  const double z = 3.719, a = 2.0 / (9.0 * df);
  return df * std::pow(1 - a + z * std::sqrt(a), 3);
}

// Runs `runs` seeds of generate() (prompt of two tokens, L generated) and returns the chi-square
// statistic of the sequence counts against the exact target distribution, with its degrees of
// freedom (cells expected below 5 pooled); also the drafts' accepted and rejected totals.
double chiSquare(const SamplingCase& c, int runs, int* df, int64_t* accepted, int64_t* rejected) {
  constexpr int L = 4;
  TableEngine e(7, 1.0);
  SamplingParams sp{c.temp, c.topK, c.topP, 0};
  const std::vector<int32_t> prompt = {1, 3};
  std::map<int, int64_t> counts;
  *accepted = *rejected = 0;
  for (int s = 0; s < runs; ++s) {
    GenerateOptions g;
    g.nPredict = L;
    g.draftNMax = c.nMax;
    g.draftNMin = c.nMin;
    g.sampling = sp;
    g.sampling.seed = 1000 + static_cast<uint64_t>(s);
    std::vector<int32_t> out;
    GenerateStats st;
    std::string err;
    EXPECT_TRUE(generate(e, prompt, g, &out, &st, &err)) << err;
    int code = 0;
    for (int32_t t : out) code = code * kV + t;
    ++counts[code];
    *accepted += st.accepted;
    *rejected += st.drafted - st.accepted;
  }
  // The exact distribution: the product of the target's sampling distributions along the sequence.
  double stat = 0, poolExp = 0, poolObs = 0;
  int cells = 0;
  int total = 1;
  for (int i = 0; i < L; ++i) total *= kV;
  for (int code = 0; code < total; ++code) {
    std::vector<int32_t> seq(prompt);
    for (int i = L - 1, c2 = code; i >= 0; --i, c2 /= kV) seq.insert(seq.begin() + 2, c2 % kV);
    double prob = 1;
    std::vector<double> p;
    for (int i = 0; i < L; ++i) {
      samplingDistribution(e.targetRow(seq[static_cast<size_t>(i)], seq[static_cast<size_t>(i) + 1]), kV, sp, &p);
      prob *= p[static_cast<size_t>(seq[static_cast<size_t>(i) + 2])];
    }
    const double expect = prob * runs, obs = static_cast<double>(counts.count(code) ? counts[code] : 0);
    if (expect < 5) {
      poolExp += expect, poolObs += obs;
      EXPECT_FALSE(prob == 0 && obs > 0) << "a sequence the target cannot produce was generated";
      continue;
    }
    stat += (obs - expect) * (obs - expect) / expect;
    ++cells;
  }
  if (poolExp > 0) stat += (poolObs - poolExp) * (poolObs - poolExp) / poolExp, ++cells;
  *df = cells - 1;
  return stat;
}

// One row per configuration; n-max 0 is plain sampling (the control).
const SamplingCase kCases[] = {
    {1.0, 0, 1.0, 0, 0}, {1.0, 0, 1.0, 1, 0}, {1.0, 0, 1.0, 3, 0},
    {0.7, 3, 0.9, 2, 0}, {1.5, 0, 0.8, 4, 0}, {1.0, 4, 1.0, 3, 2},
};

TEST(QwenSampling, SpeculativeSamplingFollowsTheTargetDistribution) {
  for (const SamplingCase& c : kCases) {
    int df = 0;
    int64_t acc = 0, rej = 0;
    const double stat = chiSquare(c, 40000, &df, &acc, &rej);
    const double crit = chiSquareCritical(df);
    std::printf(
        "temp %.2f top-k %d top-p %.2f n-max %d n-min %d: chi-square %.1f, df %d, critical (1e-4) %.1f; drafts "
        "accepted %lld, not accepted %lld\n",
        c.temp, c.topK, c.topP, c.nMax, c.nMin, stat, df, crit, static_cast<long long>(acc),
        static_cast<long long>(rej));
    EXPECT_LT(stat, crit) << "n-max " << c.nMax << " temp " << c.temp;
    if (c.nMax > 0) {  // both branches of the rule ran
      EXPECT_GT(acc, 1000);
      EXPECT_GT(rej, 1000);
    }
  }
}

TEST(QwenSampling, SameSeedSameTokens) {
  TableEngine e(3, 0.5);
  GenerateOptions g;
  g.nPredict = 12;
  g.draftNMax = 3;
  g.sampling = SamplingParams{0.9, 0, 1.0, 42};
  std::vector<int32_t> a, b, c;
  GenerateStats st;
  std::string err;
  ASSERT_TRUE(generate(e, {1, 2}, g, &a, &st, &err)) << err;
  ASSERT_TRUE(generate(e, {1, 2}, g, &b, &st, &err)) << err;
  g.sampling.seed = 43;
  ASSERT_TRUE(generate(e, {1, 2}, g, &c, &st, &err)) << err;
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(QwenSampling, Distribution) {
  const float logits[6] = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f, 0.0f};
  std::vector<double> p;
  samplingDistribution(logits, 6, SamplingParams{1.0, 0, 1.0, 0}, &p);  // plain softmax
  double z = 0;
  for (float l : logits) z += std::exp(static_cast<double>(l));
  for (int i = 0; i < 6; ++i)
    EXPECT_NEAR(p[static_cast<size_t>(i)], std::exp(static_cast<double>(logits[i])) / z, 1e-12);
  samplingDistribution(logits, 6, SamplingParams{1.0, 2, 1.0, 0}, &p);  // top-2: the two 3s
  EXPECT_NEAR(p[1], 0.5, 1e-12);
  EXPECT_NEAR(p[3], 0.5, 1e-12);
  samplingDistribution(logits, 6, SamplingParams{1.0, 3, 1.0, 0}, &p);  // top-3 at a tie: the lower index first
  EXPECT_GT(p[2], 0);
  EXPECT_EQ(p[0], 0);
  // top-p 0.5 over softmax(3, 3, 2, ...): the first 3 alone has 0.38 of the mass, the two 3s 0.76.
  samplingDistribution(logits, 6, SamplingParams{1.0, 0, 0.5, 0}, &p);
  EXPECT_NEAR(p[1] + p[3], 1.0, 1e-12);
  samplingDistribution(logits, 6, SamplingParams{0.5, 3, 1.0, 0}, &p);  // temperature after the cut
  EXPECT_NEAR(p[1] / p[2], std::exp((3.0 - 2.0) / 0.5), 1e-9);
  EXPECT_EQ(drawToken({0.0, 0.25, 0.0, 0.75}, 0.0), 1);
  EXPECT_EQ(drawToken({0.0, 0.25, 0.0, 0.75}, 0.2499), 1);
  EXPECT_EQ(drawToken({0.0, 0.25, 0.0, 0.75}, 0.25), 3);
  EXPECT_EQ(drawToken({0.0, 0.25, 0.0, 0.75}, 0.999999), 3);
  int32_t r = -1;  // p == q: always accepted; q > p at d: rejected when u >= p/q, resampled from p - q's positive part
  EXPECT_TRUE(acceptOrResample({0.5, 0.5}, {0.5, 0.5}, 0, 0.999, 0.1, &r));
  EXPECT_FALSE(acceptOrResample({0.2, 0.8}, {0.6, 0.4}, 0, 0.5, 0.1, &r));
  EXPECT_EQ(r, 1);
  EXPECT_TRUE(acceptOrResample({0.2, 0.8}, {0.6, 0.4}, 0, 0.3, 0.1, &r));
}

// Teacher-forced k at every position against a count from the tables, and TeacherForcedStats' math.
TEST(QwenTeacherForced, MatchesBruteForce) {
  constexpr int nMax = 4, window = 20, context = 3;
  TableEngine e(11, 0.4);
  std::vector<int32_t> text;
  for (int i = 0; i < 57; ++i) text.push_back(static_cast<int32_t>(splitmix64(i + 5) % kV));
  TeacherForcedStats st;
  std::string err;
  ASSERT_TRUE(teacherForcedAcceptance(e, text, nMax, window, context, &st, &err)) << err;
  std::vector<int64_t> hist(nMax + 1, 0);
  int64_t positions = 0;
  for (int w0 = 0; w0 + context < static_cast<int>(text.size()); w0 += window - context) {
    const int len = std::min(window, static_cast<int>(text.size()) - w0);
    for (int n = context; n < len; ++n) {
      const int32_t* x = text.data() + w0;
      // Drafts: d_1 from (x_{n-1}, x_n), d_i from (d_{i-2} or x_n, d_{i-1}); target: its greedy after each.
      std::vector<int32_t> seq = {x[n - 1], x[n]};
      int k = 0;
      bool right = true;
      for (int i = 0; i < nMax; ++i) {
        const size_t m = seq.size();
        const int32_t d = TableEngine::argmax(e.draftRow(seq[m - 2], seq[m - 1]));
        const int32_t g = TableEngine::argmax(e.targetRow(seq[m - 2], seq[m - 1]));
        right = right && d == g;
        k += right;
        seq.push_back(d);
      }
      ++hist[static_cast<size_t>(k)];
      ++positions;
    }
    if (w0 + window >= static_cast<int>(text.size())) break;
  }
  EXPECT_EQ(st.positions, static_cast<int64_t>(text.size()) - context);  // every position from `context` on, once
  EXPECT_EQ(st.positions, positions);
  EXPECT_EQ(st.hist, hist);
  for (int m = 1; m <= nMax; ++m) {
    int64_t a = 0, r = 0;
    for (int k = 0; k <= nMax; ++k)
      a += hist[static_cast<size_t>(k)] * std::min(k, m), r += k < m ? hist[static_cast<size_t>(k)] : 0;
    EXPECT_EQ(st.accepted(m), a);
    EXPECT_EQ(st.rejected(m), r);
    EXPECT_EQ(st.drafted(m), positions * m);
  }
  EXPECT_GT(st.hist[0], 0);
  EXPECT_GT(st.hist[nMax], 0);
  std::printf("%s", formatTeacherForced(st).c_str());
}

// At the position after a prompt, with the text continuing by the target's greedy token, the
// teacher-forced count is the first round of a greedy speculative run from that prompt.
TEST(QwenTeacherForced, EqualsTheFirstRoundOfAGreedyRun) {
  TableEngine e(5, 0.3);
  for (int start = 0; start < 40; ++start) {
    const std::vector<int32_t> prompt = {static_cast<int32_t>(start % kV), static_cast<int32_t>((start / kV) % kV), 2};
    GenerateOptions g;
    g.nPredict = 8;
    g.draftNMax = 3;
    std::vector<int32_t> out;
    GenerateStats st;
    std::string err;
    ASSERT_TRUE(generate(e, prompt, g, &out, &st, &err)) << err;
    std::vector<int32_t> text = prompt;
    text.push_back(out[0]);
    TeacherForcedStats tf;
    ASSERT_TRUE(teacherForcedAcceptance(e, text, 3, 4, 3, &tf, &err)) << err;
    ASSERT_EQ(tf.positions, 1);
    EXPECT_EQ(tf.hist[static_cast<size_t>(st.trace[0].accepted)], 1) << "prompt start " << start;
  }
}

TEST(QwenTrace, WriteReadAndReplay) {
  const std::string path = ::testing::TempDir() + "qwen_trace.txt";
  std::string err;
  ASSERT_TRUE(writeTrace(path, "test", {{3, 1}, {3, 3}, {2, 2}, {3, 0}}, &err)) << err;
  std::vector<RoundRecord> r;
  ASSERT_TRUE(readTrace(path, &r, &err)) << err;
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[1].accepted, 3);
  for (const char* bad : {"3 4\n", "3\n", "x y\n", "3 1 2\n", "65 1\n", "# only a comment\n"}) {
    std::ofstream(path) << bad;
    EXPECT_FALSE(readTrace(path, &r, &err)) << bad;
  }
  // Replay at n-max 3 on a greedy run: rounds follow the trace's full rounds (3 1, 3 3, 3 0, ...).
  TableEngine e(5, 2.0);
  GenerateOptions g;
  g.nPredict = 30;
  std::vector<int32_t> ref, out;
  GenerateStats st;
  ASSERT_TRUE(generate(e, {1, 2}, g, &ref, &st, &err)) << err;
  const std::vector<RoundRecord> trace = {{3, 1}, {3, 3}, {2, 2}, {3, 0}};
  g.draftNMax = 3;
  g.replay = &trace;
  g.reference = &ref;
  ASSERT_TRUE(generate(e, {1, 2}, g, &out, &st, &err)) << err;
  EXPECT_EQ(out, ref);
  EXPECT_TRUE(st.replayed);
  const int want[] = {1, 3, 0};
  for (size_t i = 0; i + 1 < st.trace.size(); ++i) EXPECT_EQ(st.trace[i].accepted, want[i % 3]) << "round " << i;
}

}  // namespace
}  // namespace qwen
