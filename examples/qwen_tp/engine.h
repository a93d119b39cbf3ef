// engine.h: the three forward passes speculative decoding needs, as one interface implemented by
// the CPU reference (cpu_model) and the GPU decoder (gpu_model). The decoding loop (speculative.h)
// is written once against it. Every rank of a tensor-parallel group runs the same calls with the
// same tokens, in the same order; the results (greedy tokens) are identical on all ranks.
//
// Cache convention. Target KV slot p holds token t_p at rotary position p. MTP KV slot s holds
// the pair (h_s, t_{s+1}) -- the target's final hidden state at position s and the next token --
// at rotary position s+1, and its output predicts t_{s+2}. "Rollback" is only a length: slots
// past the committed length are stale and overwritten before they are ever attended to, since
// every pass attends to slots 0..(its own slot) only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qwen {

class DecoderEngine {
 public:
  virtual ~DecoderEngine() = default;
  /// Target forward over tokens[0..n) at positions pos..pos+n-1 (writing those KV slots);
  /// next[i] = greedy next token after position pos+i. Keeps the n final hidden states
  /// (after the final RMSNorm) for mtpFromTarget.
  virtual bool target(const int32_t* tokens, int n, int pos, int32_t* next, std::string* error) = 0;
  /// Like target(), but only the greedy token after the last position is wanted (*last): a
  /// prefill chunk. An engine may skip the other rows' logits (the GPU decoder computes the
  /// lm_head for the last row only). The n final hidden states are kept as target() keeps them.
  virtual bool prefill(const int32_t* tokens, int n, int pos, int32_t* last, std::string* error) {
    std::vector<int32_t> next(static_cast<size_t>(n > 0 ? n : 1));
    if (!target(tokens, n, pos, next.data(), error)) return false;
    *last = next[static_cast<size_t>(n - 1)];
    return true;
  }
  /// MTP forward over n pairs (hidden row i of the last target() call, tokens[i]) at MTP slots
  /// slot..slot+n-1; *draft = greedy token predicted by the last pair. Keeps the last output
  /// hidden for mtpChain.
  virtual bool mtpFromTarget(const int32_t* tokens, int n, int slot, int32_t* draft, std::string* error) = 0;
  /// One chained MTP step: (the last MTP output hidden, token) at MTP slot `slot`.
  virtual bool mtpChain(int32_t token, int slot, int32_t* draft, std::string* error) = 0;
  /// `count` chained MTP steps in one call: step k takes (the previous step's output hidden, the
  /// previous step's draft; `token` for k = 0) at slot slot + k, and writes drafts[k] (and, when
  /// probs is given and enableDraftProbability() returned true, probs[k]). The same drafts as
  /// `count` mtpChain() calls; this default makes those calls. The GPU decoder runs the chain
  /// as one CUDA graph: the drafts stay on the device between steps, one host round trip in all.
  virtual bool mtpChainRun(int32_t token, int slot, int count, int32_t* drafts, double* probs, std::string* error) {
    for (int k = 0; k < count; ++k) {
      if (!mtpChain(k == 0 ? token : drafts[k - 1], slot + k, &drafts[k], error)) return false;
      if (probs) probs[k] = lastDraftProbability();
    }
    return true;
  }
  /// Asks the engine to compute, from now on, the top softmax probability of each draft (the
  /// greedy token's probability after mtpFromTarget / mtpChain), for --spec-draft-p-min. False
  /// when the engine cannot (the default). Both decoders can: the top probability is
  /// 1 / sum over the vocabulary of exp(logit - max), its shards' sums gathered with the argmax.
  virtual bool enableDraftProbability() { return false; }
  /// The top probability of the last draft, once enableDraftProbability() returned true.
  virtual double lastDraftProbability() const { return 1.0; }
  /// Full-vocabulary fp32 logits of the last `rows` rows of the last call into out [rows, vocab]
  /// (target(): its rows, up to the engine's limit; prefill() and an MTP pass: their last row),
  /// gathered from the ranks' vocabulary shards, the same on every rank (a collective: every
  /// rank calls it). For sampling (sampler.h). False with a message when the engine cannot.
  virtual bool logitsRows(int rows, std::vector<float>* out, std::string* error) {
    (void)rows, (void)out;
    if (error) *error = "this engine does not give its logits (sampling needs them)";
    return false;
  }
  /// True when the model has an MTP head.
  virtual bool hasMtp() const = 0;
  virtual int vocabSize() const = 0;
  /// KV cache capacity in positions (target and MTP alike).
  virtual int ctxSize() const = 0;
  /// Largest n target() and prefill() accept in one call (the prefill chunk, --ubatch-size);
  /// generate() cuts longer prompts into chunks of this size.
  virtual int maxTokensPerCall() const = 0;
};

}  // namespace qwen
