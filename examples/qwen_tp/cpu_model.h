// cpu_model.h: the plain C++ fp32 reference forward of Qwen3 (+ MTP head) for tiny configs,
// written for reading, not speed. One object is one tensor-parallel rank: it computes its
// Megatron shard (whole heads, intermediate columns, vocab rows) from full host weights and
// joins partial sums with tpcomm all-reduces over a host communicator (device -1), ranks as
// threads. With tp == 1 no communicator is needed.
//
// The two all-reduces of a layer (after o_proj, after down_proj) are each followed by the residual
// add and the next RMSNorm (post_attention_layernorm; the next layer's input_layernorm, or the
// final / mtp.norm after the last layer). With `fusedNorm` (the default) and tp > 1 the three go
// through one Communicator::allReduceResidualRmsNorm call (host path: all-reduce, then tpcomm's
// hostResidualRmsNorm); otherwise allReduce, the add and this file's rmsNorm. The two differ only
// in the norm's rounding (tpcomm: fp32 sum of squares in a fixed order, r * inv * w; here: a
// double sum of squares, w * (r * inv)), below a few fp32 ulps; the residual stream has the same
// bits on both paths (the same all-reduce, one fp32 add).
#pragma once

#include <cstdint>
#include <vector>

#include "config.h"
#include "engine.h"
#include "weights.h"

namespace tpcomm {
class Communicator;
}

namespace qwen {

class CpuModel : public DecoderEngine {
 public:
  /// `weights` must outlive the model; `comm` may be null when shape.tp == 1.
  CpuModel(const ModelConfig& cfg, const TpShape& shape, const HostWeights* weights, tpcomm::Communicator* comm,
           int ctxSize, bool fusedNorm = true);

  bool target(const int32_t* tokens, int n, int pos, int32_t* next, std::string* error) override;
  bool mtpFromTarget(const int32_t* tokens, int n, int slot, int32_t* draft, std::string* error) override;
  bool mtpChain(int32_t token, int slot, int32_t* draft, std::string* error) override;
  bool hasMtp() const override { return cfg_.mtpLayers > 0; }
  /// From now on each MTP pass also computes its draft's top softmax probability (two more
  /// all-reduces: the max, then the sum of exponentials over the vocab shards).
  bool enableDraftProbability() override { return draftProb_ = true; }
  double lastDraftProbability() const override { return draftP_; }
  /// The last rows of lastLogits(), each rank's shard in its columns of a zeroed row, summed
  /// over the ranks (exact: the other ranks add zeros).
  bool logitsRows(int rows, std::vector<float>* out, std::string* error) override;
  int vocabSize() const override { return cfg_.vocabSize; }
  int ctxSize() const override { return ctx_; }
  int maxTokensPerCall() const override { return ubatch_ > 0 ? ubatch_ : ctx_; }
  /// The prefill chunk generate() uses (0: the whole context); for testing chunked prefill.
  void setMaxTokensPerCall(int n) { ubatch_ = n; }

  /// This rank's logits of the last target() call: [n, shape.vocab], vocab rows from
  /// shape.vocabBegin().
  const std::vector<float>& lastLogits() const { return logits_; }
  /// Final hidden states of the last target() call, [n, hidden].
  const std::vector<float>& lastHidden() const { return hidden_; }
  /// Number of all-reduces issued so far (two per layer plus embedding and argmax).
  int allReduceCount() const { return allReduces_; }
  /// How many of those went through allReduceResidualRmsNorm (0 with tp == 1 or !fusedNorm).
  int fusedNormCount() const { return fusedNorms_; }

 private:
  struct Cache { std::vector<float> k, v; };  // [ctx, kvHeads, headDim] per layer
  // One decoder layer on the residual stream x [n, H]; on entry h = input_layernorm(x), on exit x
  // is updated and normOut = rmsnorm(x) * nextNorm (normOut may be h).
  bool layer(const std::string& prefix, Cache& cache, float* x, float* h, int n, int slot0, int ropePos0,
             const float* nextNorm, float* normOut, std::string* error);
  // x += all-reduce(partial); out = rmsnorm(x) * weight, row by row (partial is clobbered).
  bool allReduceAddNorm(float* partial, float* x, const float* weight, int n, float* out, std::string* error);
  bool embed(const int32_t* tokens, int n, float* x, std::string* error);
  bool greedy(const float* hidden, int n, int32_t* out, std::string* error);
  /// Sums buf over the ranks. exact: never compressed, whatever the communicator's compression
  /// (Config::compression): for the exchanges that carry ids or must stay exact (the argmax
  /// table, the top-probability terms, the vocab-parallel embedding), not the layers' sums.
  bool allReduce(float* buf, size_t count, std::string* error, bool exact = false);
  // Softmax probability of the top logit of row `row` of logits_ (over all ranks' shards).
  bool topProbability(int row, double* p, std::string* error);
  bool mtpForward(const int32_t* tokens, const float* hiddenIn, int n, int slot, int32_t* draft, std::string* error);
  const std::vector<float>& w(const std::string& name) const { return weights_->at(name); }

  ModelConfig cfg_;
  TpShape shape_;
  const HostWeights* weights_;
  tpcomm::Communicator* comm_;
  int ctx_;
  bool fusedNorm_;
  std::vector<Cache> caches_;  // target layers
  Cache mtpCache_;
  std::vector<float> hidden_, logits_, mtpHidden_;
  int allReduces_ = 0, fusedNorms_ = 0, ubatch_ = 0;
  bool draftProb_ = false;
  double draftP_ = 1.0;
};

}  // namespace qwen
