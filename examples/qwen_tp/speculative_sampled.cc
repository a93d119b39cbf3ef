// speculative_sampled.cc: the decoding loop with temperature > 0, plain or with MTP speculation
// under the standard accept/reject rule (sampler.h), written against DecoderEngine as the greedy
// loop in speculative.cc is. A round at committed length n (t_n not yet in the target's cache):
//   drafts d_i ~ q_i for i = 1..N, q_1 from the MTP pass that ended the previous round, q_i (i > 1)
//   from a chained step fed d_{i-1}; the target verifies [t_n, d_1..d_N] and gives p_1..p_{N+1};
//   for i = 1..N: accept d_i with probability min(1, p_i(d_i) / q_i(d_i)), else commit a draw from
//   max(0, p_i - q_i) normalised and stop; after N acceptances, commit a draw from p_{N+1}.
// Each committed token then follows p given what precedes it, so the output is distributed as
// plain sampling from the target (the test: qwen_sampling_test). Uniforms: uniform01(seed, round,
// index, stream), one per decision, never reused.
#include <algorithm>
#include <chrono>

#include "sampler.h"
#include "speculative.h"

namespace qwen {
namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

bool fail(std::string* error, const std::string& msg) {
  if (error) *error = msg;
  return false;
}

// Row r of the engine's last `rows` logits as a sampling distribution.
bool distributions(DecoderEngine& e, int rows, const SamplingParams& sp, std::vector<std::vector<double>>* out,
                   std::string* error) {
  std::vector<float> logits;
  if (!e.logitsRows(rows, &logits, error)) return false;
  const int V = e.vocabSize();
  out->resize(static_cast<size_t>(rows));
  for (int r = 0; r < rows; ++r) samplingDistribution(logits.data() + static_cast<size_t>(r) * V, V, sp, &(*out)[r]);
  return true;
}

}  // namespace

bool generateSampled(DecoderEngine& e, const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                     std::vector<int32_t>* out, GenerateStats* st, std::string* error) {
  *st = GenerateStats();
  out->clear();
  const SamplingParams& sp = opt.sampling;
  const int P = static_cast<int>(prompt.size());
  const int N = opt.draftNMax;
  st->promptTokens = P;
  st->speculative = N > 0;
  if (P == 0) return fail(error, "the prompt is empty");
  if (opt.nPredict <= 0) return fail(error, "--n-predict must be > 0");
  if (N > 0 && !e.hasMtp()) return fail(error, "--spec-type draft-mtp: the model has no MTP head");
  if (N < 0 || N + 1 > e.maxTokensPerCall())
    return fail(error, "--spec-draft-n-max " + std::to_string(N) + " out of range");
  if (opt.draftNMin < 0 || (N > 0 && opt.draftNMin > N)) return fail(error, "--spec-draft-n-min out of range");
  if (opt.draftPMin > 0 || opt.simAcceptance >= 0 || opt.replay)
    return fail(error, "--temp > 0: no --spec-draft-p-min, --sim-* or --replay-trace (they are greedy-run tools)");
  if (!(sp.topP > 0 && sp.topP <= 1)) return fail(error, "--top-p must be in (0, 1]");
  if (P + opt.nPredict + N + 1 > e.ctxSize())
    return fail(error, "--ctx-size " + std::to_string(e.ctxSize()) + " is too small for " + std::to_string(P) +
                           " prompt + " + std::to_string(opt.nPredict) + " generated + " + std::to_string(N + 1) +
                           " verify tokens");

  std::vector<int32_t> tokens = prompt, next(static_cast<size_t>(N) + 1), batch(next.size());
  std::vector<std::vector<double>> p, q(static_cast<size_t>(N) + 1), one;
  uint64_t round = 0;  // 0: the prefill's token; rounds from 1
  const double t0 = now();
  int32_t draft = 0;
  auto pickFirst = [&](int32_t* last, std::string* err) {
    if (!distributions(e, 1, sp, &one, err)) return false;
    *last = drawToken(one[0], uniform01(sp.seed, 0, 0, kStreamTarget));
    return true;
  };
  if (!prefillChunked(e, &tokens, N > 0, &draft, error, pickFirst)) return false;
  if (N > 0 && !distributions(e, 1, sp, &one, error)) return false;  // q_1 of the first round
  if (N > 0) q[1] = one[0];
  const double t1 = now();
  st->prefillSeconds = t1 - t0;
  if (opt.onTokens) opt.onTokens(&tokens[static_cast<size_t>(P)], 1);

  const int target = P + opt.nPredict;
  while (static_cast<int>(tokens.size()) < target) {
    const int n = static_cast<int>(tokens.size()) - 1;
    const int ndMax = std::min(N, target - static_cast<int>(tokens.size()) - 1);
    ++st->rounds;
    ++round;
    batch[0] = tokens[static_cast<size_t>(n)];
    int nd = 0;
    for (int i = 1; i <= ndMax; ++i) {
      batch[static_cast<size_t>(i)] = drawToken(q[static_cast<size_t>(i)], uniform01(sp.seed, round, i, kStreamDraft));
      nd = i;
      if (i < ndMax) {  // q_{i+1}: the chained step fed this draft
        if (!e.mtpChain(batch[static_cast<size_t>(i)], n + i - 1, &draft, error) ||
            !distributions(e, 1, sp, &one, error))
          return false;
        q[static_cast<size_t>(i) + 1] = one[0];
      }
    }
    if (ndMax > 0 && nd < std::max(opt.draftNMin, 1)) {
      nd = 0;
      ++st->draftsDropped;
    }
    if (!e.target(batch.data(), nd + 1, n, next.data(), error) || !distributions(e, nd + 1, sp, &p, error))
      return false;
    int k = 0;
    int32_t last = 0;
    bool rejected = false;
    for (int i = 1; i <= nd && !rejected; ++i) {
      const size_t ii = static_cast<size_t>(i);
      if (acceptOrResample(p[ii - 1], q[ii], batch[ii], uniform01(sp.seed, round, i, kStreamAccept),
                           uniform01(sp.seed, round, i, kStreamResample), &last))
        ++k;
      else
        rejected = true;
    }
    if (!rejected) last = drawToken(p[static_cast<size_t>(nd)], uniform01(sp.seed, round, nd + 1, kStreamTarget));
    st->drafted += nd;
    st->accepted += k;
    if (rejected) ++st->rejected;
    if (N > 0) st->trace.push_back(RoundRecord{nd, k});
    for (int i = 1; i <= k; ++i) tokens.push_back(batch[static_cast<size_t>(i)]);
    tokens.push_back(last);
    if (opt.onTokens) opt.onTokens(&tokens[static_cast<size_t>(n) + 1], k + 1);
    // The MTP over the committed pairs (h_{n+i}, t_{n+1+i}), i = 0..k: its last row is q_1 next.
    if (N > 0 && static_cast<int>(tokens.size()) < target) {
      if (!e.mtpFromTarget(&tokens[static_cast<size_t>(n) + 1], k + 1, n, &draft, error) ||
          !distributions(e, 1, sp, &one, error))
        return false;
      q[1] = one[0];
    }
  }
  st->decodeSeconds = now() - t1;
  out->assign(tokens.begin() + P, tokens.begin() + target);
  st->generated = static_cast<int>(out->size());
  return true;
}

}  // namespace qwen
