// Tests of examples/qwen_tp config parsing: presets, a real Qwen3 config.json, malformed input
// (each error must name the field), and the tensor-parallel split.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "config.h"

namespace qwen {
namespace {

const char* kQwen3_8B = R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
  "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 12288,
  "max_position_embeddings": 40960, "max_window_layers": 36, "model_type": "qwen3",
  "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_cache": true,
  "use_sliding_window": false, "vocab_size": 151936})";

TEST(QwenConfig, ParsesHuggingFaceQwen3Config) {
  ModelConfig c;
  std::string err;
  ASSERT_TRUE(parseConfigJson(kQwen3_8B, "config.json", &c, &err)) << err;
  EXPECT_EQ(c.vocabSize, 151936);
  EXPECT_EQ(c.hiddenSize, 4096);
  EXPECT_EQ(c.intermediateSize, 12288);
  EXPECT_EQ(c.numLayers, 36);
  EXPECT_EQ(c.numHeads, 32);
  EXPECT_EQ(c.numKvHeads, 8);
  EXPECT_EQ(c.headDim, 128);
  EXPECT_FLOAT_EQ(c.rmsNormEps, 1e-6f);
  EXPECT_FLOAT_EQ(c.ropeTheta, 1e6f);
  EXPECT_FALSE(c.tieWordEmbeddings);
  EXPECT_EQ(c.mtpLayers, 0);  // dense Qwen3 has no MTP head
  ModelConfig p;
  ASSERT_TRUE(presetConfig("qwen3-8b", &p, &err)) << err;
  EXPECT_EQ(p.hiddenSize, c.hiddenSize);
  EXPECT_EQ(p.intermediateSize, c.intermediateSize);
  EXPECT_EQ(p.numLayers, c.numLayers);
  EXPECT_EQ(p.mtpLayers, 1);
}

// transformers 5 writes rope_theta inside rope_parameters (and no top-level rope_theta); older
// versions write it at the top level. Both are read; a theta in both must agree; a rope_type
// other than "default" is scaling this decoder does not do.
TEST(QwenConfig, RopeThetaFromTopLevelOrRopeParameters) {
  const std::string base = R"("vocab_size":8,"hidden_size":64,"intermediate_size":8,"num_hidden_layers":1,
      "num_attention_heads":4)";
  struct Row { std::string extra; bool ok; float theta; const char* mustMention; };
  const Row rows[] = {
      {R"("rope_theta": 5000)", true, 5000.f, ""},
      {R"("rope_parameters": {"rope_type": "default", "rope_theta": 12345.0})", true, 12345.f, ""},
      {R"("rope_parameters": {"rope_theta": 777})", true, 777.f, ""},
      {R"("rope_theta": 250, "rope_parameters": {"rope_type": "default", "rope_theta": 250})", true, 250.f, ""},
      {R"("rope_parameters": {"rope_type": "default"}, "rope_theta": 99)", true, 99.f, ""},
      {R"("rope_parameters": null, "rope_theta": 42)", true, 42.f, ""},
      {R"("rope_theta": 250, "rope_parameters": {"rope_theta": 251})", false, 0, "disagree"},
      {R"("rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4})", false, 0, "rope_type"},
      {R"("rope_parameters": {"rope_theta": "1e6"})", false, 0, "rope_parameters.rope_theta"},
      {R"("rope_parameters": [1e6])", false, 0, "rope_parameters"},
      {R"("rope_parameters": {"rope_theta": -1})", false, 0, "rope_theta"},
  };
  for (const Row& r : rows) {
    ModelConfig c;
    std::string err;
    const bool ok = parseConfigJson("{" + base + ", " + r.extra + "}", "cfg.json", &c, &err);
    EXPECT_EQ(ok, r.ok) << r.extra << ": " << err;
    if (r.ok) EXPECT_FLOAT_EQ(c.ropeTheta, r.theta) << r.extra;
    else EXPECT_NE(err.find(r.mustMention), std::string::npos) << r.extra << ": " << err;
  }
}

TEST(QwenConfig, HeadDimDefaultsToHiddenOverHeadsOnlyWhenAbsent) {
  ModelConfig c;
  std::string err;
  ASSERT_TRUE(parseConfigJson(R"({"vocab_size":8,"hidden_size":64,"intermediate_size":8,"num_hidden_layers":1,
      "num_attention_heads":4})", "c", &c, &err)) << err;
  EXPECT_EQ(c.headDim, 16);
  EXPECT_EQ(c.numKvHeads, 4);
  ASSERT_TRUE(parseConfigJson(R"({"vocab_size":8,"hidden_size":64,"intermediate_size":8,"num_hidden_layers":1,
      "num_attention_heads":4,"head_dim":32,"mtp_num_hidden_layers":1})", "c", &c, &err)) << err;
  EXPECT_EQ(c.headDim, 32);
  EXPECT_EQ(c.mtpLayers, 1);
}

struct BadConfig { std::string json; const char* mustMention; };

TEST(QwenConfig, MalformedConfigsNameTheProblem) {
  const std::string base = R"("vocab_size":8,"hidden_size":64,"intermediate_size":8,"num_hidden_layers":1)";
  const BadConfig rows[] = {
      {"{", "not valid JSON"},
      {"[1,2]", "JSON object"},
      {R"({"hidden_size":64})", "vocab_size"},
      {"{" + base + "}", "num_attention_heads"},
      {R"({"vocab_size":"8","hidden_size":64,"intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":4})", "vocab_size"},
      {R"({"vocab_size":8,"hidden_size":64,"intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":6,"num_key_value_heads":4})", "num_key_value_heads"},
      {R"({"vocab_size":8,"hidden_size":64,"intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":4,"head_dim":15})", "head_dim"},
      {R"({"vocab_size":8,"hidden_size":64,"intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":4,"rms_norm_eps":"x"})", "rms_norm_eps"},
      {R"({"vocab_size":8,"hidden_size":64,"intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":4,"tie_word_embeddings":1})", "tie_word_embeddings"},
      {R"({"vocab_size":8,"hidden_size":64,"intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":4,"rope_scaling":{"type":"yarn"}})", "rope_scaling"},
      {R"({"vocab_size":8,"hidden_size":64,"intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":4,"attention_bias":true})", "attention_bias"},
      {R"({"vocab_size":-8,"hidden_size":64,"intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":4})", "vocab_size"},
      {R"({"vocab_size":8,"hidden_size":64,"intermediate_size":8,"num_hidden_layers":0,"num_attention_heads":4})", "num_hidden_layers"},
      {R"({"vocab_size":8,"hidden_size":64,"intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":4,"mtp_num_hidden_layers":2})", "mtp_num_hidden_layers"},
  };
  int i = 0;
  for (const BadConfig& r : rows) {
    ModelConfig c;
    c.vocabSize = 12345;
    std::string err;
    EXPECT_FALSE(parseConfigJson(r.json, "cfg.json", &c, &err)) << "row " << i;
    EXPECT_NE(err.find(r.mustMention), std::string::npos) << "row " << i << ": " << err;
    EXPECT_NE(err.find("cfg.json"), std::string::npos) << "row " << i << ": " << err;
    EXPECT_EQ(c.vocabSize, 12345) << "output written on failure, row " << i;
    ++i;
  }
}

TEST(QwenConfig, MissingFileIsAnError) {
  ModelConfig c;
  std::string err;
  EXPECT_FALSE(loadConfigFile("/nonexistent/config.json", &c, &err));
  EXPECT_NE(err.find("/nonexistent/config.json"), std::string::npos);
}

TEST(QwenConfig, PresetsAreValidAndSplitForTheirTpSizes) {
  std::string err;
  for (const std::string& n : presetNames()) {
    ModelConfig c;
    ASSERT_TRUE(presetConfig(n, &c, &err)) << err;
    EXPECT_TRUE(validateConfig(c, &err)) << n << ": " << err;
    EXPECT_EQ(c.mtpLayers, 1) << n;
    const int maxTp = n == "tiny" ? 4 : 8;
    for (int tp = 1; tp <= maxTp; tp *= 2)
      for (int r = 0; r < tp; ++r) {
        TpShape s;
        ASSERT_TRUE(makeTpShape(c, tp, r, &s, &err)) << n << " tp " << tp << ": " << err;
        EXPECT_EQ(s.heads * tp, c.numHeads);
        EXPECT_EQ(s.kvHeads * tp, c.numKvHeads);
        EXPECT_EQ(s.inter * tp, c.intermediateSize);
        EXPECT_EQ(s.vocab * tp, c.vocabSize);
        EXPECT_EQ(s.headBegin(), r * c.numHeads / tp);
        EXPECT_EQ(s.heads % s.kvHeads, 0);  // GQA groups stay on one rank
      }
  }
  ModelConfig c;
  EXPECT_FALSE(presetConfig("qwen3-999b", &c, &err));
  EXPECT_NE(err.find("qwen3-999b"), std::string::npos);
  EXPECT_NE(err.find("qwen3-32b"), std::string::npos);
}

TEST(QwenConfig, TpSplitRejectsIndivisibleShapes) {
  ModelConfig c;
  std::string err;
  ASSERT_TRUE(presetConfig("tiny", &c, &err));
  TpShape s;
  EXPECT_FALSE(makeTpShape(c, 8, 0, &s, &err));  // 4 kv heads over 8 ranks
  EXPECT_NE(err.find("num_key_value_heads"), std::string::npos) << err;
  EXPECT_FALSE(makeTpShape(c, 3, 0, &s, &err));
  EXPECT_FALSE(makeTpShape(c, 2, 2, &s, &err));
  EXPECT_FALSE(makeTpShape(c, 0, 0, &s, &err));
}

}  // namespace
}  // namespace qwen

// ---- bounds on untrusted input and on sizes formed as int ----

namespace qwen {
namespace {

std::string configWith(const std::string& extra) {
  std::string s = kQwen3_8B;
  s.pop_back();  // the closing brace
  return s + ", " + extra + "}";
}

TEST(QwenConfig, DeeplyNestedJsonIsRejectedWithoutRecursion) {
  // Before the bound, a 100000-deep value in an integer field reached it->dump() in the error
  // message and overflowed the stack (a crash, so this test failed by dying).
  std::string deep(100000, '[');
  deep += std::string(100000, ']');
  for (const std::string& text : {std::string(R"({"vocab_size": )") + deep + "}", configWith("\"x\": " + deep)}) {
    ModelConfig c;
    std::string err;
    EXPECT_FALSE(parseConfigJson(text, "deep.json", &c, &err));
    EXPECT_NE(err.find("nested deeper than"), std::string::npos) << err;
    EXPECT_LT(err.size(), 200u) << "the message must not echo the input";
  }
  // Within the bound, still an error naming the field, not the value.
  ModelConfig c;
  std::string err;
  EXPECT_FALSE(parseConfigJson(configWith("\"rope_scaling\": [[[[1]]]]"), "c.json", &c, &err));
  EXPECT_NE(err.find("rope_scaling"), std::string::npos) << err;
  EXPECT_EQ(err.find("[[[["), std::string::npos) << err;
  // A string holding brackets is not nesting.
  EXPECT_TRUE(parseConfigJson(configWith("\"note\": \"" + std::string(100, '[') + "\""), "c.json", &c, &err)) << err;
}

TEST(QwenConfig, OversizedConfigFileIsRejectedBeforeReading) {
  const std::string path = ::testing::TempDir() + "/qwen_big_config.json";
  {
    std::ofstream f(path);
    f << configWith("\"pad\": \"" + std::string(2u << 20, 'x') + "\"");
  }
  ModelConfig c;
  std::string err;
  EXPECT_FALSE(loadConfigFile(path, &c, &err));
  EXPECT_NE(err.find("limit"), std::string::npos) << err;
  std::remove(path.c_str());
  EXPECT_FALSE(loadConfigFile("/dev/null", &c, &err));  // not a regular file
  EXPECT_NE(err.find("not a regular file"), std::string::npos) << err;
}

TEST(QwenConfig, HeadProductsThatOverflowIntAreRejected) {
  // 2^24 heads x head_dim 256 = 2^32: qDim() would overflow int. Before the check this config
  // was accepted (numHeads % numKvHeads == 0, each field < 2^31).
  ModelConfig c;
  std::string err;
  const std::string text = R"({"vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 1, "num_attention_heads": 16777216, "num_key_value_heads": 16777216,
      "head_dim": 256})";
  EXPECT_FALSE(parseConfigJson(text, "big.json", &c, &err));
  EXPECT_NE(err.find("exceeds 2^31 - 1"), std::string::npos) << err;
  // The fused q|k|v width counts too: (2^22 + 2 x 2^22) x 256 = 3 x 2^30 > 2^31 - 1, though
  // qDim alone (2^30) fits.
  const std::string qkv = R"({"vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 1, "num_attention_heads": 4194304, "num_key_value_heads": 4194304, "head_dim": 256})";
  EXPECT_FALSE(parseConfigJson(qkv, "qkv.json", &c, &err));
  EXPECT_NE(err.find("exceeds 2^31 - 1"), std::string::npos) << err;
  // Just inside: (2^21 + 2 x 2^21) x 256 = 1.5 x 2^30.
  const std::string ok = R"({"vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 1, "num_attention_heads": 2097152, "num_key_value_heads": 2097152, "head_dim": 256})";
  ASSERT_TRUE(parseConfigJson(ok, "ok.json", &c, &err)) << err;
  EXPECT_EQ(static_cast<int64_t>(c.qDim()), int64_t{2097152} * 256);
}

TEST(QwenConfig, ContextSizeAndKvCacheBytes) {
  ModelConfig c;
  std::string err;
  ASSERT_TRUE(presetConfig("qwen3-8b", &c, &err));
  EXPECT_TRUE(checkCtxSize(c, 32768, &err)) << err;
  EXPECT_TRUE(checkCtxSize(c, c.maxPositionEmbeddings, &err)) << err;
  EXPECT_FALSE(checkCtxSize(c, c.maxPositionEmbeddings + 1, &err));
  EXPECT_NE(err.find("max_position_embeddings"), std::string::npos) << err;
  EXPECT_FALSE(checkCtxSize(c, 0, &err));
  TpShape s1, s2;
  ASSERT_TRUE(makeTpShape(c, 1, 0, &s1, &err));
  ASSERT_TRUE(makeTpShape(c, 2, 1, &s2, &err));
  // 36 layers + the MTP layer, K and V, 32768 slots x 8 kv heads x 128 dims x 2 bytes.
  EXPECT_EQ(kvCacheBytes(c, s1, 32768), size_t{37} * 2 * 32768 * 8 * 128 * 2);
  EXPECT_EQ(kvCacheBytes(c, s2, 32768) * 2, kvCacheBytes(c, s1, 32768));
  c.mtpLayers = 0;
  EXPECT_EQ(kvCacheBytes(c, s1, 32768), size_t{36} * 2 * 32768 * 8 * 128 * 2);  // 4.83 GB
}

}  // namespace
}  // namespace qwen
