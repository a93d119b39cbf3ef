// speculative.h: greedy decoding, plain or with MTP speculation (llama.cpp's draft-mtp), written
// once against DecoderEngine. A round: draft N tokens with the MTP head (the first from the
// target's hidden states, the rest chained on the MTP's own hidden), verify t_n + N drafts in one
// target forward, accept the longest prefix the target agrees with, emit the target's token after
// it (correction or bonus), then roll both KV caches back to the committed length (engine.h) and
// re-run the MTP over the accepted positions with the target's real hidden states.
//
// --sim-acceptance A (for synthetic weights, whose drafts never match): each draft is replaced by
// the reference greedy token with probability A (seeded), else by a different token. The MTP
// still runs in full and the target still decides; the results are "simulated acceptance".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine.h"

namespace qwen {

struct GenerateOptions {
  int nPredict = 16;        ///< tokens to generate after the prompt
  int draftNMax = 0;        ///< 0: plain greedy; N > 0: MTP speculation with up to N drafts
  double simAcceptance = -1;  ///< < 0: real drafts; else the probability a draft is made right
  const std::vector<int32_t>* reference = nullptr;  ///< greedy continuation for simAcceptance
  uint64_t seed = 1234;
};

struct GenerateStats {
  int promptTokens = 0;
  int generated = 0;
  double prefillSeconds = 0;   ///< prompt forward (+ the MTP pass over the prompt)
  double decodeSeconds = 0;    ///< everything after the first generated token
  int64_t drafted = 0;         ///< draft tokens verified
  int64_t accepted = 0;        ///< draft tokens the target agreed with
  int64_t rounds = 0;          ///< verify forwards (speculative) or decode steps (plain)
  bool simulated = false;
  double acceptance() const { return drafted ? static_cast<double>(accepted) / drafted : 0; }
  /// Tokens emitted per verify forward: 1 + accepted / rounds.
  double meanAcceptedLength() const { return rounds ? 1.0 + static_cast<double>(accepted) / rounds : 0; }
};

/// Generates opt.nPredict tokens after `prompt` into *out. Every rank of a TP group calls it
/// with the same arguments. Fails on engine errors, a context overflow, or draftNMax > 0 on an
/// engine without an MTP head.
bool generate(DecoderEngine& engine, const std::vector<int32_t>& prompt, const GenerateOptions& opt,
              std::vector<int32_t>* out, GenerateStats* stats, std::string* error);

/// Prefill of the prompt in *tokens (t_0 .. t_{P-1}) in chunks of e.maxTokensPerCall() tokens
/// (llama.cpp's --ubatch-size), each through e.prefill() at its positions; appends t_P, the
/// greedy token after the prompt. With `mtp`, each chunk is followed by the MTP pass over its
/// pairs (h_s, t_{s+1}), and *draft is the MTP's draft after the last chunk. Fails when the
/// prompt does not fit the KV cache.
bool prefillChunked(DecoderEngine& e, std::vector<int32_t>* tokens, bool mtp, int32_t* draft, std::string* error);

/// A draft token made right with probability `a` (seeded by (seed, position)), else wrong.
int32_t simulateDraft(int32_t draft, int32_t reference, double a, uint64_t seed, int64_t position, int vocab);

/// llama.cpp-server-style lines for one request (prompt eval, eval, draft acceptance).
std::string formatTimings(const GenerateStats& s);
/// Prometheus text exposition of the counters the issue lists (llamacpp: prefix).
std::string formatPrometheus(const GenerateStats& s, int ctxSize);

}  // namespace qwen
