// config.h: the Qwen3 model shape (Hugging Face config.json fields) and its tensor-parallel split.
// A model comes from a config.json or a named preset (`tiny` for tests, and the qwen3-0.6b/8b/32b
// shapes), each with an optional MTP head in the Qwen3-Next layout (mtp_num_hidden_layers).
// Errors are returned as a bool plus a message naming the file and field; nothing throws out.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace qwen {

/// Model hyper-parameters, named as in Hugging Face's Qwen3Config.
struct ModelConfig {
  std::string name;             ///< preset name or the config.json path
  int vocabSize = 0;            ///< vocab_size
  int hiddenSize = 0;           ///< hidden_size (H)
  int intermediateSize = 0;     ///< intermediate_size (I)
  int numLayers = 0;            ///< num_hidden_layers
  int numHeads = 0;             ///< num_attention_heads
  int numKvHeads = 0;           ///< num_key_value_heads
  int headDim = 0;              ///< head_dim (its own field; not hidden/heads)
  float rmsNormEps = 1e-6f;     ///< rms_norm_eps
  float ropeTheta = 1e6f;       ///< rope_theta, or rope_parameters.rope_theta (transformers 5)
  bool tieWordEmbeddings = false;  ///< tie_word_embeddings: lm_head is embed_tokens
  int maxPositionEmbeddings = 40960;  ///< max_position_embeddings
  int mtpLayers = 0;            ///< mtp_num_hidden_layers (0: no MTP head; 1 supported)

  /// num_attention_heads * head_dim; validateConfig rejects configs where it exceeds INT_MAX.
  int qDim() const { return numHeads * headDim; }
  /// num_key_value_heads * head_dim (bounded like qDim).
  int kvDim() const { return numKvHeads * headDim; }
};

/// Reads a Hugging Face config.json. Missing required fields, wrong types or inconsistent
/// values (e.g. heads not a multiple of kv heads) fail with a message naming the field.
bool parseConfigJson(const std::string& jsonText, const std::string& sourceName, ModelConfig* out,
                     std::string* error);
/// Same, from a file.
bool loadConfigFile(const std::string& path, ModelConfig* out, std::string* error);

/// Named shapes: "tiny", "qwen3-0.6b", "qwen3-8b", "qwen3-32b" (all with one MTP layer).
bool presetConfig(const std::string& name, ModelConfig* out, std::string* error);
/// The names presetConfig accepts.
std::vector<std::string> presetNames();

/// Checks the config is one this decoder runs (positive sizes, GQA grouping, head_dim even).
bool validateConfig(const ModelConfig& c, std::string* error);

/// Checks a KV cache of `ctx` positions: 1 .. max_position_embeddings (the model's rotary
/// range), with a message naming --ctx-size otherwise.
bool checkCtxSize(const ModelConfig& c, int ctx, std::string* error);

struct TpShape;
/// Bytes of one rank's bf16 KV cache of `ctx` positions: K and V of every target layer, and of
/// the MTP layer when the model has one.
size_t kvCacheBytes(const ModelConfig& c, const TpShape& s, int ctx);

/// Megatron split of one model over `tp` ranks: whole heads and whole GQA groups per rank,
/// column-parallel q/k/v and gate/up, row-parallel o/down, vocab-parallel embedding and lm_head.
struct TpShape {
  int tp = 1, rank = 0;
  int heads = 0;      ///< query heads on this rank
  int kvHeads = 0;    ///< kv heads on this rank
  int inter = 0;      ///< intermediate columns on this rank
  int vocab = 0;      ///< vocab rows on this rank
  int headBegin() const { return rank * heads; }
  int kvHeadBegin() const { return rank * kvHeads; }
  int interBegin() const { return rank * inter; }
  int vocabBegin() const { return rank * vocab; }
};

/// The split for rank `rank` of `tp`; fails (naming the field) when heads, kv heads,
/// intermediate size or vocab are not multiples of tp.
bool makeTpShape(const ModelConfig& c, int tp, int rank, TpShape* out, std::string* error);

}  // namespace qwen
