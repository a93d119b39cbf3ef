// speculative.h: greedy decoding, plain or with MTP speculation (llama.cpp's draft-mtp), written
// once against DecoderEngine. A round: draft N tokens with the MTP head (the first from the
// target's hidden states, the rest chained on the MTP's own hidden), verify t_n + N drafts in one
// target forward, accept the longest prefix the target agrees with, emit the target's token after
// it (correction or bonus), then roll both KV caches back to the committed length (engine.h) and
// re-run the MTP over the accepted positions with the target's real hidden states.
//
// Draft length as llama.cpp's: up to --spec-draft-n-max tokens; drafting stops early when the
// draft's top probability is below --spec-draft-p-min; a draft shorter than --spec-draft-n-min is
// dropped (that round is a plain one-token step).
//
// Simulated acceptance (for synthetic weights, whose drafts never match): each draft token is
// replaced by the reference greedy token with per-token probability p (seeded), else by a
// different token. The MTP still runs in full and the target still decides; the results are
// "simulated acceptance". --sim-token-acceptance gives p; --sim-draft-acceptance R gives
// llama.cpp's ratio accepted/drafted, turned into p by perTokenForDraftAcceptance(R, n-max).
// With drafts of length N, accepted tokens per round are min(N, leading successes), so
//   E[accepted] = p + p^2 + ... + p^N,  accepted/drafted = E[accepted] / N,
//   mean accepted length (tokens per verify) = 1 + E[accepted].
// Per-token 0.77 at N = 5: accepted/drafted 0.488, mean length 3.44; per-token 0.485: 0.183, 1.92.
//
// Replayed trace (--replay-trace): the per-round accepted counts of a real run (GenerateStats::trace,
// --trace-out) decide which drafts are made right, round after round (cycling), so a model with
// random weights at another shape decodes with a measured acceptance pattern. The drafts are made
// as in a real run (drafts 2..N in one mtpChainRun call: the same draft cost), then replaced.
//
// Sampling (temperature > 0, sampler.h): speculative_sampled.cc's loop, with the standard
// accept/reject rule, so the output follows the target's sampling distribution.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine.h"
#include "sampler.h"

namespace qwen {

/// One verify round of a speculative run: drafts verified, and how many of them were accepted.
struct RoundRecord {
  int drafted = 0, accepted = 0;
};

/// Teacher-forced acceptance (teacher_forced.h): at each evaluated position of a text, the number
/// of leading tokens of a draft chain of nMax tokens that equal the target's greedy tokens.
struct TeacherForcedStats {
  int nMax = 0;
  int64_t positions = 0, windows = 0, targetTop1 = 0;  ///< targetTop1: the target's greedy token was the text's
  std::vector<int64_t> hist;                           ///< hist[k]: positions whose first k drafts were right
  /// At drafts of m <= nMax tokens: accepted tokens (sum of min(k, m)), drafted (m per
  /// position), first rejections (positions with k < m).
  int64_t accepted(int m) const;
  int64_t drafted(int m) const { return positions * m; }
  int64_t rejected(int m) const;
};

struct GenerateOptions {
  int nPredict = 16;        ///< tokens to generate after the prompt
  int draftNMax = 0;        ///< 0: plain greedy; N > 0: MTP speculation with up to N drafts
  int draftNMin = 0;        ///< drafts shorter than this are dropped (llama.cpp's --spec-draft-n-min)
  double draftPMin = 0;     ///< stop drafting when the draft's top probability is below (0: off)
  double simAcceptance = -1;  ///< < 0: real drafts; else the per-token probability a draft is made right
  const std::vector<int32_t>* reference = nullptr;  ///< greedy continuation for simAcceptance
  uint64_t seed = 1234;
  /// temp > 0: sample (speculative_sampled.cc); else greedy.
  SamplingParams sampling;
  /// Not null: replay these rounds' accepted counts (cycling; needs `reference`).
  const std::vector<RoundRecord>* replay = nullptr;
  /// Called with each batch of newly committed tokens, in order (for streamed text output).
  std::function<void(const int32_t* ids, int n)> onTokens;
};

struct GenerateStats {
  int promptTokens = 0;
  int generated = 0;
  double prefillSeconds = 0;   ///< prompt forward (+ the MTP pass over the prompt)
  double decodeSeconds = 0;    ///< everything after the first generated token
  int64_t drafted = 0;         ///< draft tokens verified
  int64_t accepted = 0;        ///< draft tokens the target agreed with
  int64_t rounds = 0;          ///< verify forwards (speculative) or decode steps (plain)
  int64_t rejected = 0;        ///< rounds whose draft had a rejected token (k < drafted)
  int64_t draftsDropped = 0;   ///< rounds whose draft was shorter than n-min (or empty by p-min)
  bool simulated = false;
  bool replayed = false;             ///< drafts made right or wrong by a replayed trace
  std::vector<RoundRecord> trace;    ///< every verify round of a speculative run, in order
  TeacherForcedStats teacherForced;  ///< --teacher-forced (positions > 0): what formatTimings prints
  bool speculative = false;    ///< MTP speculation ran (draftNMax > 0), even if every draft was dropped
  /// llama.cpp's draft acceptance: accepted / drafted.
  double acceptance() const { return drafted ? static_cast<double>(accepted) / drafted : 0; }
  /// Per-token acceptance: accepted / (accepted + rejected), the estimate of p under the
  /// per-token model (each draft token right with p until the first wrong one).
  double tokenAcceptance() const { return accepted + rejected ? static_cast<double>(accepted) / (accepted + rejected) : 0; }
  /// Tokens emitted per verify forward: 1 + accepted / rounds.
  double meanAcceptedLength() const { return rounds ? 1.0 + static_cast<double>(accepted) / rounds : 0; }
};

/// Generates opt.nPredict tokens after `prompt` into *out. Every rank of a TP group calls it
/// with the same arguments. Fails on engine errors, a context overflow, or draftNMax > 0 on an
/// engine without an MTP head.
bool generate(DecoderEngine& engine, const std::vector<int32_t>& prompt, const GenerateOptions& opt,
              std::vector<int32_t>* out, GenerateStats* stats, std::string* error);

/// generate() with opt.sampling.temp > 0 (generate() calls it): every token drawn from the
/// target's sampling distribution; with MTP, drafts drawn from the MTP head's distribution (the
/// same top-k / top-p / temperature), accepted or resampled by acceptOrResample, the bonus token
/// drawn from the target's distribution after the last draft. Needs DecoderEngine::logitsRows.
/// No p-min, no simulation or replay.
bool generateSampled(DecoderEngine& engine, const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                     std::vector<int32_t>* out, GenerateStats* stats, std::string* error);

/// Whether generate() keeps every draft of a round it makes (no p-min stop, no simulation
/// replacing a draft before the next is chained on it), and so chains drafts 2..n-max in one
/// DecoderEngine::mtpChainRun call.
inline bool chainsDraftsInOneCall(const GenerateOptions& opt) { return opt.draftPMin <= 0 && opt.simAcceptance < 0; }

/// Makes every call shape a speculative run with `opt` can use once, at positions pos.. (KV and
/// MTP slots written there are overwritten by the next run's prefill and decode): target() and
/// mtpFromTarget() of 1..draftNMax+1 tokens, one mtpChain(), and mtpChainRun() of 1..draftNMax-1
/// steps when generate() would use it (no p-min, no simulation); enableDraftProbability() first
/// when draftPMin > 0. An engine that captures a CUDA graph per shape then replays warm graphs in
/// the timed run: without this, a 32-token run spent most of its time capturing them. Needs
/// pos + draftNMax + 1 <= ctxSize() (generate()'s own requirement for a prompt of pos tokens).
bool warmSpeculation(DecoderEngine& e, const GenerateOptions& opt, int pos, std::string* error);

/// Prefill of the prompt in *tokens (t_0 .. t_{P-1}) in chunks of e.maxTokensPerCall() tokens
/// (llama.cpp's --ubatch-size), each through e.prefill() at its positions; appends t_P, the
/// greedy token after the prompt. With `mtp`, each chunk is followed by the MTP pass over its
/// pairs (h_s, t_{s+1}), and *draft is the MTP's draft after the last chunk. `pick` (may be
/// empty) is called with t_P before it is appended and may replace it (a sampled token, or the
/// text's own in a teacher-forced run); it runs before the last chunk's MTP pass, which pairs
/// the last hidden with the token picked. Fails when the prompt does not fit the KV cache.
bool prefillChunked(DecoderEngine& e, std::vector<int32_t>* tokens, bool mtp, int32_t* draft, std::string* error,
                    const std::function<bool(int32_t*, std::string*)>& pick = nullptr);

/// Expected accepted/drafted for per-token probability p and drafts of n tokens.
double expectedDraftAcceptance(double p, int n);
/// Expected tokens per verify round (1 + expected accepted) for p and drafts of n tokens.
double expectedMeanAcceptedLength(double p, int n);
/// The per-token probability whose expected accepted/drafted at draft length n is r (bisection;
/// r in [0, 1], n >= 1).
double perTokenForDraftAcceptance(double r, int n);

/// A draft token made right with probability `a` (seeded by (seed, position)), else wrong.
int32_t simulateDraft(int32_t draft, int32_t reference, double a, uint64_t seed, int64_t position, int vocab);

/// llama.cpp-server-style lines for one request (prompt eval, eval, draft acceptance).
std::string formatTimings(const GenerateStats& s);
/// Prometheus text exposition of the counters the issue lists (llamacpp: prefix).
std::string formatPrometheus(const GenerateStats& s, int ctxSize);

}  // namespace qwen
