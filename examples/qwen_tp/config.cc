// config.cc: config.json parsing (nlohmann_json), presets and the tensor-parallel split.
#include "config.h"

#include <sys/stat.h>

#include <cstdint>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "json_limits.h"

namespace qwen {
namespace {

using nlohmann::json;

bool fail(std::string* error, const std::string& msg) {
  if (error) *error = msg;
  return false;
}

// Reads an integer field; `required` fields must exist.
bool readInt(const json& j, const char* key, bool required, int* out, const std::string& src, std::string* error) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) return fail(error, src + ": missing required field \"" + key + "\"");
    return true;
  }
  if (!it->is_number_integer())
    return fail(error, src + ": field \"" + key + "\" must be an integer, got " + it->type_name());
  long long v = it->is_number_unsigned() && it->get<unsigned long long>() > (1ULL << 62) ? -1 : it->get<long long>();
  if (v < 0 || v > (1LL << 31) - 1)
    return fail(error, src + ": field \"" + key + "\" out of range (0 .. 2^31 - 1)");
  *out = static_cast<int>(v);
  return true;
}

bool readFloat(const json& j, const char* key, float* out, const std::string& src, std::string* error) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return true;
  if (!it->is_number()) return fail(error, src + ": field \"" + key + "\" must be a number, got " + it->type_name());
  *out = it->get<float>();
  return true;
}

bool readBool(const json& j, const char* key, bool* out, const std::string& src, std::string* error) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return true;
  if (!it->is_boolean()) return fail(error, src + ": field \"" + key + "\" must be true or false, got " + it->type_name());
  *out = it->get<bool>();
  return true;
}

// transformers 5 writes rope_parameters {"rope_type": "default", "rope_theta": X} instead of a
// top-level rope_theta (and renames rope_scaling to it). Both forms are read; when both carry a
// theta they must agree. Any rope_type but "default" is scaling this decoder does not implement.
bool readRopeParameters(const json& j, float* theta, const std::string& src, std::string* error) {
  auto rp = j.find("rope_parameters");
  if (rp == j.end() || rp->is_null()) return true;
  if (!rp->is_object())
    return fail(error, src + ": field \"rope_parameters\" must be an object, got " + rp->type_name());
  auto type = rp->find("rope_type");
  if (type != rp->end() && !type->is_null() && !(type->is_string() && type->get<std::string>() == "default"))
    return fail(error, src + ": rope_parameters.rope_type " + type->dump() +
                           " is not supported by this decoder (only \"default\": plain rotary)");
  auto t = rp->find("rope_theta");
  if (t == rp->end() || t->is_null()) return true;
  if (!t->is_number())
    return fail(error, src + ": field \"rope_parameters.rope_theta\" must be a number, got " + t->type_name());
  const float v = t->get<float>();
  auto top = j.find("rope_theta");
  if (top != j.end() && !top->is_null() && *theta != v)
    return fail(error, src + ": rope_theta (" + top->dump() + ") and rope_parameters.rope_theta (" + t->dump() +
                           ") disagree");
  *theta = v;
  return true;
}

}  // namespace

bool validateConfig(const ModelConfig& c, std::string* error) {
  const std::string& s = c.name;
  if (c.vocabSize <= 0) return fail(error, s + ": vocab_size must be > 0");
  if (c.hiddenSize <= 0) return fail(error, s + ": hidden_size must be > 0");
  if (c.intermediateSize <= 0) return fail(error, s + ": intermediate_size must be > 0");
  if (c.numLayers <= 0) return fail(error, s + ": num_hidden_layers must be > 0");
  if (c.numHeads <= 0) return fail(error, s + ": num_attention_heads must be > 0");
  if (c.numKvHeads <= 0) return fail(error, s + ": num_key_value_heads must be > 0");
  if (c.numHeads % c.numKvHeads != 0)
    return fail(error, s + ": num_attention_heads (" + std::to_string(c.numHeads) +
                           ") must be a multiple of num_key_value_heads (" + std::to_string(c.numKvHeads) + ")");
  if (c.headDim <= 0 || c.headDim % 2 != 0) return fail(error, s + ": head_dim must be a positive even number");
  if (c.headDim > 256) return fail(error, s + ": head_dim " + std::to_string(c.headDim) + " > 256 is not supported");
  if (!(c.rmsNormEps > 0)) return fail(error, s + ": rms_norm_eps must be > 0");
  if (!(c.ropeTheta > 0)) return fail(error, s + ": rope_theta must be > 0");
  // Every size the decoder forms as an int must fit one: q/k/v widths, the fused q|k|v and
  // gate|up rows (int64 here, so the check itself cannot overflow).
  const int64_t kIntMax = 2147483647;
  const int64_t qkvRows = (static_cast<int64_t>(c.numHeads) + 2 * static_cast<int64_t>(c.numKvHeads)) * c.headDim;
  if (qkvRows > kIntMax)
    return fail(error, s + ": (num_attention_heads + 2 * num_key_value_heads) * head_dim = " + std::to_string(qkvRows) +
                           " exceeds 2^31 - 1");
  if (2 * static_cast<int64_t>(c.intermediateSize) > kIntMax || 2 * static_cast<int64_t>(c.hiddenSize) > kIntMax)
    return fail(error, s + ": 2 * intermediate_size or 2 * hidden_size exceeds 2^31 - 1");
  if (c.mtpLayers < 0 || c.mtpLayers > 1)
    return fail(error, s + ": mtp_num_hidden_layers " + std::to_string(c.mtpLayers) + ": only 0 or 1 is supported");
  return true;
}

bool checkCtxSize(const ModelConfig& c, int ctx, std::string* error) {
  if (ctx < 1 || ctx > c.maxPositionEmbeddings)
    return fail(error, c.name + ": --ctx-size " + std::to_string(ctx) + " must be in 1 .. max_position_embeddings (" +
                           std::to_string(c.maxPositionEmbeddings) + ")");
  return true;
}

size_t kvCacheBytes(const ModelConfig& c, const TpShape& s, int ctx) {
  const size_t layers = static_cast<size_t>(c.numLayers) + (c.mtpLayers > 0 ? 1 : 0);
  return layers * 2 /* K, V */ * static_cast<size_t>(ctx) * static_cast<size_t>(s.kvHeads) *
         static_cast<size_t>(c.headDim) * 2 /* bf16 */;
}

bool parseConfigJson(const std::string& text, const std::string& src, ModelConfig* out, std::string* error) {
  std::string why;
  if (!jsonWithinLimits(text.data(), text.data() + text.size(), kMaxConfigJsonBytes, kMaxConfigJsonDepth, &why))
    return fail(error, src + ": " + why);
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return fail(error, src + ": not valid JSON");
  if (!j.is_object()) return fail(error, src + ": expected a JSON object at the top level");
  ModelConfig c;
  c.name = src;
  if (!readInt(j, "vocab_size", true, &c.vocabSize, src, error)) return false;
  if (!readInt(j, "hidden_size", true, &c.hiddenSize, src, error)) return false;
  if (!readInt(j, "intermediate_size", true, &c.intermediateSize, src, error)) return false;
  if (!readInt(j, "num_hidden_layers", true, &c.numLayers, src, error)) return false;
  if (!readInt(j, "num_attention_heads", true, &c.numHeads, src, error)) return false;
  c.numKvHeads = c.numHeads;
  if (!readInt(j, "num_key_value_heads", false, &c.numKvHeads, src, error)) return false;
  c.headDim = c.numHeads > 0 ? c.hiddenSize / c.numHeads : 0;  // HF's fallback when head_dim is absent
  if (!readInt(j, "head_dim", false, &c.headDim, src, error)) return false;
  if (!readInt(j, "max_position_embeddings", false, &c.maxPositionEmbeddings, src, error)) return false;
  if (!readInt(j, "mtp_num_hidden_layers", false, &c.mtpLayers, src, error)) return false;
  if (!readFloat(j, "rms_norm_eps", &c.rmsNormEps, src, error)) return false;
  if (!readFloat(j, "rope_theta", &c.ropeTheta, src, error)) return false;
  if (!readRopeParameters(j, &c.ropeTheta, src, error)) return false;
  if (!readBool(j, "tie_word_embeddings", &c.tieWordEmbeddings, src, error)) return false;
  bool bias = false;
  if (!readBool(j, "attention_bias", &bias, src, error)) return false;
  if (bias) return fail(error, src + ": attention_bias=true is not supported (Qwen3 has none)");
  auto rs = j.find("rope_scaling");
  if (rs != j.end() && !rs->is_null())
    return fail(error, src + ": rope_scaling is not supported by this decoder (got a " + std::string(rs->type_name()) + ")");
  if (!validateConfig(c, error)) return false;
  *out = c;
  return true;
}

bool loadConfigFile(const std::string& path, ModelConfig* out, std::string* error) {
  // A regular file of bounded size only (a FIFO would block, a huge file be read whole).
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return fail(error, path + ": cannot open");
  if (!S_ISREG(st.st_mode)) return fail(error, path + ": not a regular file");
  if (static_cast<size_t>(st.st_size) > kMaxConfigJsonBytes)
    return fail(error, path + ": " + std::to_string(st.st_size) + " bytes exceed the config.json limit of " +
                           std::to_string(kMaxConfigJsonBytes));
  std::ifstream f(path);
  if (!f) return fail(error, path + ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  return parseConfigJson(ss.str(), path, out, error);
}

std::vector<std::string> presetNames() { return {"tiny", "qwen3-0.6b", "qwen3-8b", "qwen3-32b"}; }

bool presetConfig(const std::string& name, ModelConfig* out, std::string* error) {
  ModelConfig c;
  c.name = name;
  c.mtpLayers = 1;
  if (name == "tiny") {
    // head_dim * heads != hidden on purpose, so code that assumes it fails the tests.
    c.vocabSize = 1024; c.hiddenSize = 64; c.intermediateSize = 96; c.numLayers = 2;
    c.numHeads = 8; c.numKvHeads = 4; c.headDim = 16; c.ropeTheta = 10000.f; c.tieWordEmbeddings = false;
  } else if (name == "qwen3-0.6b") {
    c.vocabSize = 151936; c.hiddenSize = 1024; c.intermediateSize = 3072; c.numLayers = 28;
    c.numHeads = 16; c.numKvHeads = 8; c.headDim = 128; c.tieWordEmbeddings = true;
  } else if (name == "qwen3-8b") {
    c.vocabSize = 151936; c.hiddenSize = 4096; c.intermediateSize = 12288; c.numLayers = 36;
    c.numHeads = 32; c.numKvHeads = 8; c.headDim = 128;
  } else if (name == "qwen3-32b") {
    c.vocabSize = 151936; c.hiddenSize = 5120; c.intermediateSize = 25600; c.numLayers = 64;
    c.numHeads = 64; c.numKvHeads = 8; c.headDim = 128;
  } else {
    std::string names;
    for (auto& n : presetNames()) names += (names.empty() ? "" : ", ") + n;
    return fail(error, "unknown model preset \"" + name + "\" (known: " + names + ")");
  }
  *out = c;
  return true;
}

bool makeTpShape(const ModelConfig& c, int tp, int rank, TpShape* out, std::string* error) {
  if (tp < 1 || rank < 0 || rank >= tp)
    return fail(error, "tensor parallel: rank " + std::to_string(rank) + " of " + std::to_string(tp) + " is invalid");
  auto need = [&](int v, const char* field) {
    if (v % tp == 0) return true;
    return fail(error, c.name + ": " + field + " (" + std::to_string(v) + ") is not a multiple of --tp " + std::to_string(tp));
  };
  if (!need(c.numHeads, "num_attention_heads") || !need(c.numKvHeads, "num_key_value_heads") ||
      !need(c.intermediateSize, "intermediate_size") || !need(c.vocabSize, "vocab_size"))
    return false;
  TpShape s;
  s.tp = tp; s.rank = rank;
  s.heads = c.numHeads / tp; s.kvHeads = c.numKvHeads / tp;
  s.inter = c.intermediateSize / tp; s.vocab = c.vocabSize / tp;
  *out = s;
  return true;
}

}  // namespace qwen
