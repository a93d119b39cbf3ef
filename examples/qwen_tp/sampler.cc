// sampler.cc: top-k / top-p / temperature distributions, draws, and the speculative rule (sampler.h).
#include "sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "synth.h"

namespace qwen {

void samplingDistribution(const float* logits, int V, const SamplingParams& p, std::vector<double>* probs) {
  probs->assign(static_cast<size_t>(V), 0.0);
  if (V <= 0) return;
  std::vector<int> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  auto larger = [logits](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  int k = p.topK > 0 && p.topK < V ? p.topK : V;
  std::partial_sort(order.begin(), order.begin() + k, order.end(), larger);
  // Top-p over the k kept, at temperature 1 (llama.cpp applies the temperature last).
  const double m = logits[order[0]];
  int keep = k;
  if (p.topP < 1) {
    double total = 0;
    for (int i = 0; i < k; ++i) total += std::exp(static_cast<double>(logits[order[i]]) - m);
    double cum = 0;
    for (int i = 0; i < k; ++i) {
      cum += std::exp(static_cast<double>(logits[order[i]]) - m);
      if (cum >= p.topP * total) {
        keep = i + 1;
        break;
      }
    }
  }
  const double invT = 1.0 / (p.temp > 0 ? p.temp : 1.0);
  double sum = 0;
  for (int i = 0; i < keep; ++i)
    sum += (*probs)[order[i]] = std::exp((static_cast<double>(logits[order[i]]) - m) * invT);
  for (int i = 0; i < keep; ++i) (*probs)[order[i]] /= sum;
}

int32_t drawToken(const std::vector<double>& probs, double u) {
  double total = 0;
  for (double x : probs) total += x;
  const double target = u * total;
  double cum = 0;
  int32_t last = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] <= 0) continue;
    cum += probs[i];
    last = static_cast<int32_t>(i);
    if (target < cum) return last;
  }
  return last;
}

double uniform01(uint64_t seed, uint64_t round, uint64_t index, uint64_t stream) {
  uint64_t h = splitmix64(seed ^ splitmix64(round ^ splitmix64(index ^ splitmix64(stream + 0x5a3c))));
  return static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);
}

bool acceptOrResample(const std::vector<double>& p, const std::vector<double>& q, int32_t d, double u, double u2,
                      int32_t* resampled) {
  const double pd = p[static_cast<size_t>(d)], qd = q[static_cast<size_t>(d)];
  if (qd <= 0) return pd > 0;    // never offered: d is drawn from q
  if (u * qd < pd) return true;  // u < min(1, p(d) / q(d))
  std::vector<double> residual(p.size());
  double mass = 0;
  for (size_t i = 0; i < p.size(); ++i) mass += residual[i] = std::max(0.0, p[i] - q[i]);
  *resampled = drawToken(mass > 0 ? residual : p, u2);
  return false;
}

}  // namespace qwen
