// speculative.cc: the decoding loop, acceptance simulation and metrics text.
#include "speculative.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>

#include "synth.h"
#include "teacher_forced.h"

namespace qwen {
namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool fail(std::string* error, const std::string& msg) {
  if (error) *error = msg;
  return false;
}

}  // namespace

double expectedDraftAcceptance(double p, int n) {
  if (n <= 0) return 0;
  double sum = 0, pk = 1;
  for (int i = 1; i <= n; ++i) sum += (pk *= p);
  return sum / n;
}

double expectedMeanAcceptedLength(double p, int n) { return 1.0 + expectedDraftAcceptance(p, n) * std::max(n, 0); }

double perTokenForDraftAcceptance(double r, int n) {
  if (n <= 0 || !(r > 0)) return 0;
  if (r >= 1) return 1;
  double lo = 0, hi = 1;  // expectedDraftAcceptance is increasing in p
  for (int it = 0; it < 100; ++it) {
    const double mid = 0.5 * (lo + hi);
    (expectedDraftAcceptance(mid, n) < r ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

int32_t simulateDraft(int32_t draft, int32_t reference, double a, uint64_t seed, int64_t position, int vocab) {
  (void)draft;
  uint64_t h = splitmix64(seed ^ splitmix64(static_cast<uint64_t>(position) + 0x51ed));
  double u = static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);
  if (u < a) return reference;
  int32_t off = 1 + static_cast<int32_t>(splitmix64(h) % static_cast<uint64_t>(vocab - 1));
  return (reference + off) % vocab;  // never the reference
}

int64_t TeacherForcedStats::accepted(int m) const {
  int64_t a = 0;
  for (size_t k = 0; k < hist.size(); ++k) a += hist[k] * std::min<int64_t>(static_cast<int64_t>(k), m);
  return a;
}

int64_t TeacherForcedStats::rejected(int m) const {
  int64_t r = 0;
  for (size_t k = 0; k < hist.size() && static_cast<int>(k) < m; ++k) r += hist[k];
  return r;
}

bool prefillChunked(DecoderEngine& e, std::vector<int32_t>* tokens, bool mtp, int32_t* draft, std::string* error,
                    const std::function<bool(int32_t*, std::string*)>& pick) {
  const int P = static_cast<int>(tokens->size()), U = e.maxTokensPerCall();
  if (P <= 0) return fail(error, "the prompt is empty");
  if (U <= 0) return fail(error, "the engine accepts no tokens per call");
  if (P + 1 > e.ctxSize())
    return fail(error, "prompt of " + std::to_string(P) + " tokens does not fit the KV cache of " +
                           std::to_string(e.ctxSize()) + " positions (--ctx-size)");
  for (int a = 0; a < P; a += U) {
    const int n = std::min(U, P - a);
    int32_t last = 0;
    if (!e.prefill(tokens->data() + a, n, a, &last, error)) return false;
    if (a + n == P) {  // t_P: the first generated token
      if (pick && !pick(&last, error)) return false;
      tokens->push_back(last);
    }
    // MTP pairs (h_s, t_{s+1}) for s in [a, a + n): t_{s+1} is in the prompt, or t_P just made.
    if (mtp && !e.mtpFromTarget(tokens->data() + a + 1, n, a, draft, error)) return false;
  }
  return true;
}

bool warmSpeculation(DecoderEngine& e, const GenerateOptions& opt, int pos, std::string* error) {
  const int N = opt.draftNMax;
  if (N <= 0 || !e.hasMtp()) return true;
  if (pos < 0 || pos + N + 1 > e.ctxSize())
    return fail(error, "warmSpeculation: positions " + std::to_string(pos) + ".." + std::to_string(pos + N) +
                           " outside the KV cache of " + std::to_string(e.ctxSize()));
  if (opt.draftPMin > 0 && !e.enableDraftProbability())
    return fail(error, "--spec-draft-p-min: this engine does not compute the draft's probability");
  const int most = std::min(N + 1, e.maxTokensPerCall());
  std::vector<int32_t> toks(static_cast<size_t>(most), 0), next(static_cast<size_t>(most));
  for (int n = 1; n <= most; ++n) {
    int32_t draft = 0;
    if (!e.target(toks.data(), n, pos, next.data(), error) || !e.mtpFromTarget(toks.data(), n, pos, &draft, error) ||
        !e.mtpChain(draft, pos + n - 1, &draft, error))
      return false;
  }
  // generate() chains a round's drafts in one call when it keeps them all (no p-min, no simulation).
  std::vector<int32_t> drafts(static_cast<size_t>(N));
  for (int count = 1; chainsDraftsInOneCall(opt) && count < N; ++count)
    if (!e.mtpChainRun(0, pos, count, drafts.data(), nullptr, error)) return false;
  return true;
}

bool generate(DecoderEngine& e, const std::vector<int32_t>& prompt, const GenerateOptions& opt, std::vector<int32_t>* out,
              GenerateStats* st, std::string* error) {
  if (!opt.sampling.greedy()) return generateSampled(e, prompt, opt, out, st, error);
  *st = GenerateStats();
  out->clear();
  const int P = static_cast<int>(prompt.size());
  const int N = opt.draftNMax;
  st->promptTokens = P;
  st->simulated = N > 0 && opt.simAcceptance >= 0;
  st->replayed = N > 0 && opt.replay != nullptr;
  st->speculative = N > 0;
  if (P == 0) return fail(error, "the prompt is empty");
  if (opt.nPredict <= 0) return fail(error, "--n-predict must be > 0");
  if (N > 0 && !e.hasMtp()) return fail(error, "--spec-type draft-mtp: the model has no MTP head");
  if (N < 0 || N + 1 > e.maxTokensPerCall()) return fail(error, "--spec-draft-n-max " + std::to_string(N) + " out of range");
  if (st->simulated && (!opt.reference || opt.simAcceptance > 1))
    return fail(error, "--sim-token-acceptance needs a value in [0, 1] and a reference continuation");
  if (opt.draftNMin < 0 || (N > 0 && opt.draftNMin > N))
    return fail(error, "--spec-draft-n-min " + std::to_string(opt.draftNMin) + " must be in [0, --spec-draft-n-max " +
                           std::to_string(N) + "]");
  if (!(opt.draftPMin >= 0 && opt.draftPMin <= 1)) return fail(error, "--spec-draft-p-min must be in [0, 1]");
  // The replayed trace: its full rounds (drafted >= N; a run's last rounds may draft fewer).
  std::vector<int> replayAccepted;
  if (st->replayed) {
    if (st->simulated || opt.draftPMin > 0 || !opt.reference)
      return fail(error, "--replay-trace needs the reference continuation and no --sim-* or --spec-draft-p-min");
    for (const RoundRecord& r : *opt.replay)
      if (r.drafted >= N) replayAccepted.push_back(std::min(r.accepted, N));
    if (replayAccepted.empty())
      return fail(error, "--replay-trace: no round of the trace drafted " + std::to_string(N) +
                             " tokens (record it at --spec-draft-n-max " + std::to_string(N) + " or more)");
  }
  if (N > 0 && opt.draftPMin > 0) {
    if (st->simulated)
      return fail(error, "--spec-draft-p-min cannot be combined with simulated acceptance (the probability is the real "
                         "draft's, and simulation replaces the draft)");
    if (!e.enableDraftProbability())
      return fail(error, "--spec-draft-p-min: this engine does not compute the draft's probability");
  }
  if (P + opt.nPredict + N + 1 > e.ctxSize())
    return fail(error, "--ctx-size " + std::to_string(e.ctxSize()) + " is too small for " + std::to_string(P) + " prompt + " +
                           std::to_string(opt.nPredict) + " generated + " + std::to_string(N + 1) + " verify tokens");

  // tokens[i] = t_i: the prompt, then everything generated. t_n is the last committed token;
  // it is not in the target's KV cache yet.
  std::vector<int32_t> tokens = prompt, next(static_cast<size_t>(N + 1));
  double t0 = now();
  int32_t draft = 0;
  if (!prefillChunked(e, &tokens, N > 0, &draft, error)) return false;
  double t1 = now();
  st->prefillSeconds = t1 - t0;
  if (opt.onTokens) opt.onTokens(&tokens[static_cast<size_t>(P)], 1);

  const int target = P + opt.nPredict;  // stop once tokens.size() reaches this
  std::vector<int32_t> batch(static_cast<size_t>(N + 1));
  while (static_cast<int>(tokens.size()) < target) {
    const int n = static_cast<int>(tokens.size()) - 1;
    const int room = target - static_cast<int>(tokens.size());  // tokens still wanted
    const int ndMax = std::min(N, room - 1);
    ++st->rounds;
    batch[0] = tokens[n];
    int nd = 0;  // draft tokens made this round
    if (chainsDraftsInOneCall(opt) && ndMax >= 2) {
      // Every draft of the round is kept (no p-min stop, no simulation replacing one before the
      // next is chained on it): drafts 2..ndMax in one call (DecoderEngine::mtpChainRun).
      batch[1] = draft;
      if (!e.mtpChainRun(draft, n, ndMax - 1, &batch[2], nullptr, error)) return false;
      nd = ndMax;
    }
    for (int i = nd + 1; i <= ndMax; ++i) {
      if (opt.draftPMin > 0 && e.lastDraftProbability() < opt.draftPMin) break;
      const int64_t outIndex = n + i - P;  // index of this position in the generated output
      int32_t d = draft;
      if (st->simulated && outIndex < static_cast<int64_t>(opt.reference->size()))
        d = simulateDraft(draft, (*opt.reference)[outIndex], opt.simAcceptance, opt.seed, outIndex, e.vocabSize());
      batch[i] = d;
      nd = i;
      if (i < ndMax && !e.mtpChain(d, n + i - 1, &draft, error)) return false;
    }
    if (st->replayed && nd > 0) {
      // The trace's next round says how many drafts are right: those become the reference
      // tokens, the next one a wrong token (the draft the target rejects).
      const int right = std::min(replayAccepted[static_cast<size_t>((st->rounds - 1) % replayAccepted.size())], nd);
      for (int i = 1; i <= nd; ++i) {
        const size_t at = static_cast<size_t>(n + i - P);
        if (at >= opt.reference->size()) break;
        const int32_t ref = (*opt.reference)[at];
        batch[i] = i <= right ? ref : (ref + 1) % e.vocabSize();
      }
    }
    if (ndMax > 0 && nd < std::max(opt.draftNMin, 1)) {  // llama.cpp drops a draft shorter than n-min
      nd = 0;
      ++st->draftsDropped;
    }
    if (!e.target(batch.data(), nd + 1, n, next.data(), error)) return false;
    int k = 0;
    while (k < nd && batch[k + 1] == next[k]) ++k;
    st->drafted += nd;
    st->accepted += k;
    if (k < nd) ++st->rejected;
    if (N > 0) st->trace.push_back(RoundRecord{nd, k});
    for (int i = 1; i <= k; ++i) tokens.push_back(batch[i]);
    tokens.push_back(next[k]);
    if (opt.onTokens) opt.onTokens(&tokens[static_cast<size_t>(n + 1)], k + 1);
    // KV rollback is implicit: the target holds slots 0..n+k, the MTP is brought to the same
    // length by running it over the accepted pairs (h_{n+i}, t_{n+1+i}), i = 0..k (not needed
    // once the last token is out, nor in plain greedy).
    if (N > 0 && static_cast<int>(tokens.size()) < target && !e.mtpFromTarget(&tokens[n + 1], k + 1, n, &draft, error))
      return false;
  }
  st->decodeSeconds = now() - t1;
  out->assign(tokens.begin() + P, tokens.begin() + target);
  st->generated = static_cast<int>(out->size());
  return true;
}

std::string formatTimings(const GenerateStats& s) {
  if (s.teacherForced.positions > 0) return formatTeacherForced(s.teacherForced);
  char buf[1024];
  int gen = std::max(0, s.generated - 1);  // the first token comes from the prefill
  int n = std::snprintf(buf, sizeof(buf),
                        "prompt eval time = %10.2f ms / %5d tokens (%8.2f ms per token, %8.2f tokens per second)\n"
                        "       eval time = %10.2f ms / %5d tokens (%8.2f ms per token, %8.2f tokens per second)\n",
                        s.prefillSeconds * 1e3, s.promptTokens, s.promptTokens ? s.prefillSeconds * 1e3 / s.promptTokens : 0,
                        s.prefillSeconds > 0 ? s.promptTokens / s.prefillSeconds : 0, s.decodeSeconds * 1e3, gen,
                        gen ? s.decodeSeconds * 1e3 / gen : 0, s.decodeSeconds > 0 ? gen / s.decodeSeconds : 0);
  std::string r(buf, static_cast<size_t>(n));
  if (s.drafted > 0 || s.simulated || s.speculative) {
    std::snprintf(buf, sizeof(buf),
                  "draft acceptance%s = %.5f (%lld accepted / %lld generated), per-token acceptance = %.5f "
                  "(%lld accepted / %lld accepted + first rejections), mean accepted length = %.3f (%lld verify "
                  "rounds, %lld drafts dropped by n-min/p-min)\n",
                  s.simulated  ? " (simulated acceptance)"
                  : s.replayed ? " (replayed trace)"
                               : "",
                  s.acceptance(), static_cast<long long>(s.accepted), static_cast<long long>(s.drafted),
                  s.tokenAcceptance(), static_cast<long long>(s.accepted),
                  static_cast<long long>(s.accepted + s.rejected), s.meanAcceptedLength(),
                  static_cast<long long>(s.rounds), static_cast<long long>(s.draftsDropped));
    r += buf;
  }
  return r;
}

std::string formatPrometheus(const GenerateStats& s, int ctxSize) {
  std::string r;
  auto metric = [&](const char* name, const char* type, const char* help, double v) {
    char buf[512];
    std::snprintf(buf, sizeof(buf), "# HELP llamacpp:%s %s\n# TYPE llamacpp:%s %s\nllamacpp:%s %.9g\n", name, help, name, type, name, v);
    r += buf;
  };
  const char* sim = s.simulated ? " (simulated acceptance)" : "";
  metric("prompt_tokens_total", "counter", "Number of prompt tokens processed.", s.promptTokens);
  metric("prompt_seconds_total", "counter", "Prompt process time", s.prefillSeconds);
  metric("tokens_predicted_total", "counter", "Number of generation tokens processed.", s.generated);
  metric("tokens_predicted_seconds", "counter", "Predict process time", s.decodeSeconds);
  metric("spec_decode_num_accepted_tokens_total", "counter",
         (std::string("Accepted draft tokens") + sim + ".").c_str(), static_cast<double>(s.accepted));
  metric("spec_decode_num_draft_tokens_total", "counter", (std::string("Draft tokens verified") + sim + ".").c_str(),
         static_cast<double>(s.drafted));
  metric("n_tokens_max", "counter", "Largest observed n_tokens (context size in use).", std::min(ctxSize, s.promptTokens + s.generated));
  return r;
}

}  // namespace qwen
