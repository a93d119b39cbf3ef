// cpu_model.h: the plain C++ fp32 reference forward of Qwen3 (+ MTP head) for tiny configs,
// written for reading, not speed. One object is one tensor-parallel rank: it computes its
// Megatron shard (whole heads, intermediate columns, vocab rows) from full host weights and
// joins partial sums with tpcomm all-reduces over a host communicator (device -1), ranks as
// threads. With tp == 1 no communicator is needed.
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
           int ctxSize);

  bool target(const int32_t* tokens, int n, int pos, int32_t* next, std::string* error) override;
  bool mtpFromTarget(const int32_t* tokens, int n, int slot, int32_t* draft, std::string* error) override;
  bool mtpChain(int32_t token, int slot, int32_t* draft, std::string* error) override;
  bool hasMtp() const override { return cfg_.mtpLayers > 0; }
  int vocabSize() const override { return cfg_.vocabSize; }
  int ctxSize() const override { return ctx_; }
  int maxTokensPerCall() const override { return ctx_; }

  /// This rank's logits of the last target() call: [n, shape.vocab], vocab rows from
  /// shape.vocabBegin().
  const std::vector<float>& lastLogits() const { return logits_; }
  /// Final hidden states of the last target() call, [n, hidden].
  const std::vector<float>& lastHidden() const { return hidden_; }
  /// Number of all-reduces issued so far (two per layer plus embedding and argmax).
  int allReduceCount() const { return allReduces_; }

 private:
  struct Cache { std::vector<float> k, v; };  // [ctx, kvHeads, headDim] per layer
  bool layer(const std::string& prefix, Cache& cache, float* x, int n, int slot0, int ropePos0, std::string* error);
  bool embed(const int32_t* tokens, int n, float* x, std::string* error);
  bool greedy(const float* hidden, int n, int32_t* out, std::string* error);
  bool allReduce(float* buf, size_t count, std::string* error);
  bool mtpForward(const int32_t* tokens, const float* hiddenIn, int n, int slot, int32_t* draft, std::string* error);
  const std::vector<float>& w(const std::string& name) const { return weights_->at(name); }

  ModelConfig cfg_;
  TpShape shape_;
  const HostWeights* weights_;
  tpcomm::Communicator* comm_;
  int ctx_;
  std::vector<Cache> caches_;  // target layers
  Cache mtpCache_;
  std::vector<float> hidden_, logits_, mtpHidden_;
  int allReduces_ = 0;
};

}  // namespace qwen
