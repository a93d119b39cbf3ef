// sampler.h: sampling from logits (temperature > 0) as llama.cpp's default chain orders it (top-k,
// then top-p, then temperature, then a draw; no min-p, no penalties), and the speculative
// accept/reject rule that keeps the target's distribution (Leviathan et al. 2023, Chen et al.
// 2023): a draft token d drawn from the draft's distribution q is accepted with probability
// min(1, p(d) / q(d)); on rejection the token is drawn from max(0, p - q), normalised. Then the
// committed token follows p exactly, whatever q is. Randomness is counter-based (splitmix64 of
// seed, round, index, stream), so every tensor-parallel rank draws the same numbers from the same
// (gathered) logits, and a run is reproducible from its seed.
#pragma once

#include <cstdint>
#include <vector>

namespace qwen {

struct SamplingParams {
  double temp = 0;     ///< <= 0: greedy (argmax), the decoder's default
  int topK = 40;       ///< keep the k largest logits (0, or >= the vocabulary: all); llama.cpp's default 40
  double topP = 0.95;  ///< then the smallest set, largest first, whose softmax mass reaches p (1: all)
  uint64_t seed = 1;
  bool greedy() const { return !(temp > 0); }
};

/// probs[V]: the distribution a sampler with `p` draws from: the top-k logits (ties: the lower
/// index first), of those the smallest prefix whose softmax mass at temperature 1 reaches topP
/// (at least one token), then softmax at temperature p.temp over the prefix; 0 elsewhere.
void samplingDistribution(const float* logits, int V, const SamplingParams& p, std::vector<double>* probs);

/// The token at which the cumulative sum of probs first exceeds u * sum (u in [0, 1)); the last
/// token with non-zero probability when rounding leaves u * sum unreached.
int32_t drawToken(const std::vector<double>& probs, double u);

/// A uniform number in [0, 1) (53 bits) from (seed, round, index, stream): independent draws for
/// distinct tuples, the same on every rank.
double uniform01(uint64_t seed, uint64_t round, uint64_t index, uint64_t stream);

/// The speculative rule for one draft token d drawn from q, with target distribution p: true
/// (accepted) when u < p[d] / q[d]; else false and *resampled = a draw (u2) from max(0, p - q)
/// normalised (from p itself in the degenerate case where that has no mass, p == q up to
/// rounding, which rejection then never reaches in exact arithmetic).
bool acceptOrResample(const std::vector<double>& p, const std::vector<double>& q, int32_t d, double u, double u2,
                      int32_t* resampled);

/// Streams of uniform01 used by the sampled decoding loop (speculative_sampled.cc).
enum SampleStream : uint64_t { kStreamDraft = 1, kStreamAccept = 2, kStreamResample = 3, kStreamTarget = 4 };

}  // namespace qwen
