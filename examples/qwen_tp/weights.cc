// weights.cc: tensor list, synthetic host weights, checkpoint loading.
#include "weights.h"

#include <cstdint>
#include <cmath>

#include "safetensors.h"
#include "synth.h"

namespace qwen {
namespace {

void addLayer(const ModelConfig& c, const std::string& p, bool mtp, std::vector<TensorSpec>* v) {
  const int64_t H = c.hiddenSize, I = c.intermediateSize, D = c.headDim;
  auto add = [&](const std::string& n, std::vector<int64_t> shape, Split s, int unit, float scale, float offset) {
    TensorSpec t;
    t.name = p + n; t.shape = std::move(shape); t.split = s; t.splitUnit = unit;
    t.synthScale = scale; t.synthOffset = offset; t.mtp = mtp;
    v->push_back(t);
  };
  const float norm = 0.125f;
  add("input_layernorm.weight", {H}, Split::kReplicated, 1, norm, 1.f);
  add("self_attn.q_proj.weight", {c.qDim(), H}, Split::kRows, static_cast<int>(D), synthScaleFor(H), 0);
  add("self_attn.k_proj.weight", {c.kvDim(), H}, Split::kRows, static_cast<int>(D), synthScaleFor(H), 0);
  add("self_attn.v_proj.weight", {c.kvDim(), H}, Split::kRows, static_cast<int>(D), synthScaleFor(H), 0);
  add("self_attn.q_norm.weight", {D}, Split::kReplicated, 1, norm, 1.f);
  add("self_attn.k_norm.weight", {D}, Split::kReplicated, 1, norm, 1.f);
  add("self_attn.o_proj.weight", {H, c.qDim()}, Split::kCols, static_cast<int>(D), synthScaleFor(c.qDim()), 0);
  add("post_attention_layernorm.weight", {H}, Split::kReplicated, 1, norm, 1.f);
  add("mlp.gate_proj.weight", {I, H}, Split::kRows, 1, synthScaleFor(H), 0);
  add("mlp.up_proj.weight", {I, H}, Split::kRows, 1, synthScaleFor(H), 0);
  add("mlp.down_proj.weight", {H, I}, Split::kCols, 1, synthScaleFor(I), 0);
}

}  // namespace

float synthScaleFor(int64_t fanIn) {
  double a = std::sqrt(3.0 / static_cast<double>(fanIn));
  return static_cast<float>(std::ldexp(1.0, static_cast<int>(std::lround(std::log2(a)))));
}

std::string lmHeadName(const ModelConfig& c) { return c.tieWordEmbeddings ? "model.embed_tokens.weight" : "lm_head.weight"; }

std::vector<TensorSpec> modelTensorSpecs(const ModelConfig& c) {
  std::vector<TensorSpec> v;
  const int64_t H = c.hiddenSize, V = c.vocabSize;
  auto add = [&](const std::string& n, std::vector<int64_t> shape, Split s, float scale, float offset, bool mtp) {
    TensorSpec t;
    t.name = n; t.shape = std::move(shape); t.split = s; t.synthScale = scale; t.synthOffset = offset; t.mtp = mtp;
    v.push_back(t);
  };
  add("model.embed_tokens.weight", {V, H}, Split::kRows, 1.f, 0, false);
  for (int l = 0; l < c.numLayers; ++l) addLayer(c, "model.layers." + std::to_string(l) + ".", false, &v);
  add("model.norm.weight", {H}, Split::kReplicated, 0.125f, 1.f, false);
  if (!c.tieWordEmbeddings) add("lm_head.weight", {V, H}, Split::kRows, synthScaleFor(H), 0, false);
  if (c.mtpLayers > 0) {
    add("mtp.pre_fc_norm_embedding.weight", {H}, Split::kReplicated, 0.125f, 1.f, true);
    add("mtp.pre_fc_norm_hidden.weight", {H}, Split::kReplicated, 0.125f, 1.f, true);
    add("mtp.fc.weight", {H, 2 * H}, Split::kReplicated, synthScaleFor(2 * H), 0, true);
    addLayer(c, "mtp.layers.0.", true, &v);
    add("mtp.norm.weight", {H}, Split::kReplicated, 0.125f, 1.f, true);
  }
  for (size_t i = 0; i < v.size(); ++i) v[i].id = static_cast<uint32_t>(i);
  return v;
}

void makeSyntheticHostWeights(const ModelConfig& c, uint64_t seed, bool roundBf16, HostWeights* out) {
  out->t.clear();
  for (const TensorSpec& s : modelTensorSpecs(c)) {
    int64_t n = 1;
    for (int64_t d : s.shape) n *= d;
    std::vector<float>& w = out->t[s.name];
    w.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      float x = synthValue(seed, s.id, static_cast<uint64_t>(i), s.synthScale, s.synthOffset);
      w[static_cast<size_t>(i)] = roundBf16 ? bf16ToFloat(floatToBf16(x)) : x;
    }
  }
}

bool loadHostWeights(const ModelConfig& c, const SafetensorsModel& m, HostWeights* out, std::string* error) {
  out->t.clear();
  for (const TensorSpec& s : modelTensorSpecs(c)) {
    const TensorView* v = nullptr;
    if (!m.require(s.name, s.shape, &v, error)) return false;
    v->toFloat(&out->t[s.name]);
  }
  return true;
}

}  // namespace qwen
