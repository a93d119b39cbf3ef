// weights.h: the list of tensors a Qwen3 (+ MTP head) model has, with Hugging Face names and
// shapes, and full-precision host copies of them for the CPU reference (from a checkpoint or
// from the synthetic generator). The GPU decoder uses the same list and generator.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "config.h"

namespace qwen {

class SafetensorsModel;

/// How a tensor is split across tensor-parallel ranks.
enum class Split {
  kReplicated,  ///< every rank holds all of it (norms, MTP fc)
  kRows,        ///< output rows split (column-parallel q/k/v, gate/up; vocab-parallel embed/lm_head)
  kCols,        ///< input columns split (row-parallel o_proj, down_proj)
};

/// One tensor of the model.
struct TensorSpec {
  std::string name;            ///< Hugging Face name, e.g. model.layers.3.self_attn.q_proj.weight
  std::vector<int64_t> shape;  ///< [rows, cols] or [n]
  Split split = Split::kReplicated;
  int splitUnit = 1;           ///< rows/cols per unit that must stay together (head_dim for heads)
  float synthScale = 0;        ///< synthetic values: offset + scale * u, u in [-1, 1)
  float synthOffset = 0;
  uint32_t id = 0;             ///< index in the list (synthetic generator stream)
  bool mtp = false;            ///< part of the MTP head
};

/// Every tensor of `c` (layers, final norm, lm_head unless tied, MTP head if c.mtpLayers).
std::vector<TensorSpec> modelTensorSpecs(const ModelConfig& c);

/// Power-of-two scale near sqrt(3 / fanIn) (uniform values of std ~ 1/sqrt(fanIn)).
float synthScaleFor(int64_t fanIn);

/// Full fp32 host copies of all tensors, by name.
struct HostWeights {
  std::map<std::string, std::vector<float>> t;
  const std::vector<float>& at(const std::string& name) const { return t.at(name); }
};

/// Synthetic weights for `c` from `seed`; with `roundBf16` each value is rounded to bf16 as the
/// GPU stores it (so the CPU reference sees the GPU's weights).
void makeSyntheticHostWeights(const ModelConfig& c, uint64_t seed, bool roundBf16, HostWeights* out);

/// Reads every tensor of modelTensorSpecs(c) from a checkpoint, checking shapes. MTP tensors are
/// required only when c.mtpLayers > 0. Errors name the file and tensor.
bool loadHostWeights(const ModelConfig& c, const SafetensorsModel& m, HostWeights* out, std::string* error);

/// Name of the embedding matrix used as lm_head ("lm_head.weight" or the tied embedding).
std::string lmHeadName(const ModelConfig& c);

}  // namespace qwen
