// qwen_tokenizer_test.cc: the byte-level BPE tokenizer. Without Python: the hand-written Qwen2
// split against expected pieces, a hand-made tokenizer.json (merges by rank, added tokens,
// streamed decode), malformed files. With QWEN_TOKENIZER_REF_DIR (set by
// tokenizer/run_parity.sh, ctest qwen_tokenizer_hf_parity): token-for-token equality with the
// `tokenizers` package on its reference texts, and decode(encode(s)) == s.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenizer.h"

namespace qwen {
namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  for (const auto& r : pretokenizeQwen2(s)) out.push_back(s.substr(r.first, r.second - r.first));
  return out;
}

using V = std::vector<std::string>;

// One row per case: text, the pieces Qwen2's regex makes of it.
TEST(TokenizerSplit, MatchesQwen2Pattern) {
  struct Row {
    std::string text;
    V pieces;
  };
  const std::vector<Row> rows = {
      {"Hello world", {"Hello", " world"}},
      {"I'll DON'T", {"I", "'ll", " DON", "'T"}},
      {"it\xC5\xBFs 'S", {"it\xC5\xBFs", " '", "S"}},  // U+017F is a letter: part of the word
      {"x 'q", {"x", " '", "q"}},
      {"12345", {"1", "2", "3", "4", "5"}},
      {"a  b", {"a", " ", " b"}},
      {"a   ", {"a", "   "}},
      {"x\n\n y", {"x", "\n\n", " y"}},
      {"  \n  \n  z", {"  \n  \n", " ", " z"}},
      {"f(x);\n", {"f", "(x", ");\n"}},
      {" !!!\n\nok", {" !!!\n\n", "ok"}},
      {"\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C", {"\xE4\xBD\xA0\xE5\xA5\xBD", "\xEF\xBC\x8C"}},  // 你好，
      {"e\xCC\x81t", {"e", "\xCC\x81t"}},  // U+0301 (Mn) is not a letter: it prefixes the next word
      {"\xC2\xA0x", {"\xC2\xA0x"}},        // NBSP is whitespace but not \r\n: an optional prefix
      {"\t\tx", {"\t", "\tx"}},
      {"", {}},
  };
  for (const Row& r : rows) EXPECT_EQ(split(r.text), r.pieces) << "text: " << r.text;
}

// A tokenizer.json with bytes a, b, c, space (Ġ), merges "a b" (rank 0), "Ġ a" (rank 1),
// "ab c" (rank 2), and added tokens.
std::string tinyJson(const std::string& pattern = "") {
  nlohmann::json j;
  const std::string pat = pattern.empty() ? std::string(
                                                "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
                                                "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
                                          : pattern;
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Regex", pat}}}, {"behavior", "Isolated"}, {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  j["decoder"] = {{"type", "ByteLevel"}};
  j["normalizer"] = nullptr;
  j["model"] = {{"type", "BPE"},
                {"vocab",
                 {{"a", 0},
                  {"b", 1},
                  {"c", 2},
                  {"\xC4\xA0", 3},
                  {"ab", 4},
                  {"\xC4\xA0"
                   "a",
                   5},
                  {"abc", 6},
                  {"\xC3\xA4", 7},
                  {"\xC2\xBD", 8}}},
                {"merges", {"a b", {"\xC4\xA0", "a"}, "ab c"}}};
  j["added_tokens"] = {{{"id", 9}, {"content", "<|x|>"}, {"special", true}},
                       {{"id", 10}, {"content", "<|x|>y"}, {"special", false}}};
  return j.dump();
}

TEST(Tokenizer, MergesByRankAddedTokensAndDecode) {
  std::unique_ptr<Tokenizer> t;
  std::string err;
  ASSERT_TRUE(Tokenizer::loadFromString(tinyJson(), "tiny", &t, &err)) << err;
  std::vector<int32_t> ids;
  ASSERT_TRUE(t->encode("abc ab a", &ids, &err)) << err;
  // "abc" -> ab(rank 0) then abc(rank 2); " ab": a+b (rank 0) before Ġ+a (rank 1) -> Ġ, ab; " a" -> Ġa
  EXPECT_EQ(ids, (std::vector<int32_t>{6, 3, 4, 5}));
  ASSERT_TRUE(t->encode("a<|x|>y<|x|>b", &ids, &err)) << err;  // longest added token wins
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 10, 9, 1}));
  std::string back;
  ASSERT_TRUE(t->decode({6, 3, 4, 9}, &back, &err)) << err;
  EXPECT_EQ(back, "abc ab<|x|>");
  EXPECT_FALSE(t->decode({11}, &back, &err));
  EXPECT_NE(err.find("11"), std::string::npos) << err;
  EXPECT_FALSE(t->encode("bad \xFF utf8", &ids, &err));
  EXPECT_NE(err.find("UTF-8"), std::string::npos) << err;
  EXPECT_EQ(t->tokenId("<|x|>"), 9);
  EXPECT_EQ(t->idLimit(), 11);
}

TEST(Tokenizer, StreamDecoderHoldsSplitCharacters) {
  std::unique_ptr<Tokenizer> t;
  std::string err;
  ASSERT_TRUE(Tokenizer::loadFromString(tinyJson(), "tiny", &t, &err)) << err;
  // Token 7 is byte 0xE4 (byte-level "ä"), token 8 is 0xBD: "你" = E4 BD A0 needs three tokens;
  // use 0xE4 0xBD then 'a' is not a continuation -> emitted as they are once complete-or-invalid.
  StreamDecoder sd(*t);
  std::string out, all;
  ASSERT_TRUE(sd.push(0, &out));
  EXPECT_EQ(out, "a");
  ASSERT_TRUE(sd.push(7, &out));
  EXPECT_EQ(out, "");  // E4 starts a 3-byte character: held
  ASSERT_TRUE(sd.push(8, &out));
  EXPECT_EQ(out, "");  // E4 BD: still incomplete
  EXPECT_EQ(sd.flush(), "\xE4\xBD");
  EXPECT_FALSE(sd.push(99, &out));
}

TEST(Tokenizer, MalformedFilesAreRefusedWithTheReason) {
  struct Row {
    std::string json, expect;
  };
  nlohmann::json noModel = nlohmann::json::parse(tinyJson());
  noModel.erase("model");
  nlohmann::json badMerge = nlohmann::json::parse(tinyJson());
  badMerge["model"]["merges"].push_back("a zz");
  nlohmann::json badId = nlohmann::json::parse(tinyJson());
  badId["model"]["vocab"]["q"] = "seven";
  nlohmann::json fallback = nlohmann::json::parse(tinyJson());
  fallback["model"]["byte_fallback"] = true;
  nlohmann::json single = nlohmann::json::parse(tinyJson());
  single["added_tokens"][0]["single_word"] = true;
  nlohmann::json dropout = nlohmann::json::parse(tinyJson());
  dropout["model"]["dropout"] = 0.1;
  nlohmann::json norm = nlohmann::json::parse(tinyJson());
  norm["normalizer"] = {{"type", "Lowercase"}};
  const std::vector<Row> rows = {
      {"{", "not valid JSON"},
      {"[1]", "JSON object"},
      {std::string(100, '[') + std::string(100, ']'), "nested deeper"},
      {tinyJson("\\s+"), "not Qwen2's"},
      {noModel.dump(), "\"model\""},
      {badMerge.dump(), "merges[3]"},
      {badId.dump(), "model.vocab"},
      {fallback.dump(), "byte_fallback"},
      {single.dump(), "single_word"},
      {norm.dump(), "normalizer"},
      {dropout.dump(), "model.dropout"},
  };
  for (const Row& r : rows) {
    std::unique_ptr<Tokenizer> t;
    std::string err;
    EXPECT_FALSE(Tokenizer::loadFromString(r.json, "bad.json", &t, &err)) << r.expect;
    EXPECT_NE(err.find(r.expect), std::string::npos) << "expected \"" << r.expect << "\" in: " << err;
    EXPECT_NE(err.find("bad.json"), std::string::npos) << err;
  }
  std::unique_ptr<Tokenizer> t;
  std::string err;
  EXPECT_FALSE(Tokenizer::load("/nonexistent/tokenizer.json", &t, &err));
  EXPECT_NE(err.find("/nonexistent/tokenizer.json"), std::string::npos) << err;
}

// --- parity with the `tokenizers` package (needs QWEN_TOKENIZER_REF_DIR) ---

struct Reference {
  std::string text, decoded, nfc;
  std::vector<int32_t> ids;
};

// Loads DIR/tokenizer<suffix>.json and DIR/reference<suffix>.jsonl (suffix "" or "_nfc"), or skips
// when QWEN_TOKENIZER_REF_DIR is unset.
class TokenizerHf : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const char* dir = std::getenv("QWEN_TOKENIZER_REF_DIR");
    if (!dir) GTEST_SKIP() << "QWEN_TOKENIZER_REF_DIR not set (ctest qwen_tokenizer_hf_parity sets it)";
    const std::string base = std::string(dir) + "/", sfx = GetParam();
    std::string err;
    ASSERT_TRUE(Tokenizer::load(base + "tokenizer" + sfx + ".json", &tok, &err)) << err;
    EXPECT_EQ(tok->normalizesNfc(), sfx == "_nfc");
    std::ifstream in(base + "reference" + sfx + ".jsonl");
    ASSERT_TRUE(in.good()) << base << "reference" << sfx << ".jsonl missing";
    std::string line;
    while (std::getline(in, line)) {
      nlohmann::json j = nlohmann::json::parse(line);
      refs.push_back({j["text"].get<std::string>(), j["decoded"].get<std::string>(), j["nfc"].get<std::string>(),
                      j["ids"].get<std::vector<int32_t>>()});
    }
    ASSERT_GT(refs.size(), 400u);
  }
  std::unique_ptr<Tokenizer> tok;
  std::vector<Reference> refs;
};

std::string showIds(const std::vector<int32_t>& v) {
  std::string s;
  for (int32_t x : v) s += std::to_string(x) + " ";
  return s;
}

TEST_P(TokenizerHf, SameIdsAsTokenizersPackage) {
  int bad = 0;
  size_t total = 0;
  for (const Reference& r : refs) {
    std::vector<int32_t> ids;
    std::string err;
    ASSERT_TRUE(tok->encode(r.text, &ids, &err)) << err;
    total += ids.size();
    if (ids != r.ids && ++bad <= 10)
      ADD_FAILURE() << "text: [" << r.text << "]\n  ours: " << showIds(ids) << "\n  hf:   " << showIds(r.ids);
  }
  EXPECT_EQ(bad, 0) << "of " << refs.size() << " texts";
  EXPECT_GT(total, 5000u);
}

// decode(encode(s)) is s (the NFC of s with the NFC normalizer), as Hugging Face's decode, and
// the streamed decode gives the same bytes.
TEST_P(TokenizerHf, DecodeOfEncodeIsTheText) {
  const bool nfc = GetParam() == "_nfc";
  for (const Reference& r : refs) {
    std::vector<int32_t> ids;
    std::string err, back, streamed, piece;
    ASSERT_TRUE(tok->encode(r.text, &ids, &err)) << err;
    ASSERT_TRUE(tok->decode(ids, &back, &err)) << err;
    EXPECT_EQ(back, nfc ? r.nfc : r.text);
    EXPECT_EQ(back, r.decoded) << "Hugging Face's decode differs";
    StreamDecoder sd(*tok);
    for (int32_t id : ids) {
      ASSERT_TRUE(sd.push(id, &piece));
      streamed += piece;
    }
    streamed += sd.flush();
    EXPECT_EQ(streamed, back);
  }
}

// nfcNormalize against Python's unicodedata.normalize("NFC") (the same Unicode version), on every
// reference text; at least the NFC texts must change.
TEST_P(TokenizerHf, NfcMatchesPython) {
  int changed = 0;
  for (const Reference& r : refs) {
    EXPECT_EQ(nfcNormalize(r.text), r.nfc) << "text: [" << r.text << "]";
    changed += r.nfc != r.text;
  }
  EXPECT_GE(changed, 6);
}

INSTANTIATE_TEST_SUITE_P(NoNormalizerAndNfc, TokenizerHf, ::testing::Values(std::string(""), std::string("_nfc")),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           return i.param.empty() ? "plain" : "nfc";
                         });

}  // namespace
}  // namespace qwen
