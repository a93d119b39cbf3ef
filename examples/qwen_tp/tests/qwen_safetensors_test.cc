// Tests of examples/qwen_tp's safetensors reader: good files in F32/F16/BF16 (every element
// checked), a sharded directory, and malformed files -- each error must name the file and the
// tensor. Also the dtype conversions and loading a whole model's weights by name and shape.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "safetensors.h"
#include "weights.h"

namespace qwen {
namespace {

std::vector<uint8_t> f32Bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}
std::vector<uint8_t> u16Bytes(const std::vector<uint16_t>& v) {
  std::vector<uint8_t> b(v.size() * 2);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// A file image from a raw JSON header and `dataBytes` bytes of data.
std::vector<uint8_t> rawImage(const std::string& header, size_t dataBytes) {
  std::vector<uint8_t> out(8);
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
  out.insert(out.end(), header.begin(), header.end());
  out.resize(out.size() + dataBytes, 0xab);
  return out;
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/qwen_st_XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(QwenSafetensors, ReadsEveryDtypeExactly) {
  // Integer-valued and half-integer values: exact in all three dtypes.
  std::vector<float> vals(6 * 5);
  for (size_t i = 0; i < vals.size(); ++i) vals[i] = static_cast<float>(static_cast<int>(i) - 13) * 0.5f;
  std::vector<uint16_t> bf(vals.size()), hf(vals.size());
  for (size_t i = 0; i < vals.size(); ++i) bf[i] = floatToBf16(vals[i]), hf[i] = floatToF16(vals[i]);
  std::vector<TensorToWrite> t = {{"a.f32", StDtype::kF32, {6, 5}, f32Bytes(vals)},
                                  {"b.bf16", StDtype::kBF16, {30}, u16Bytes(bf)},
                                  {"c.f16", StDtype::kF16, {5, 3, 2}, u16Bytes(hf)},
                                  {"d.empty", StDtype::kF32, {0, 4}, {}}};
  std::unique_ptr<SafetensorsFile> f;
  std::string err;
  ASSERT_TRUE(SafetensorsFile::fromBytes(buildSafetensors(t), "mem.safetensors", &f, &err)) << err;
  ASSERT_EQ(f->tensors().size(), 4u);
  for (const char* name : {"a.f32", "b.bf16", "c.f16"}) {
    const TensorView* v = f->find(name);
    ASSERT_NE(v, nullptr) << name;
    EXPECT_EQ(v->numel(), 30);
    std::vector<float> got;
    v->toFloat(&got);
    ASSERT_EQ(got.size(), vals.size());
    for (size_t i = 0; i < vals.size(); ++i) EXPECT_EQ(got[i], vals[i]) << name << "[" << i << "]";
  }
  EXPECT_EQ(f->find("c.f16")->shape, (std::vector<int64_t>{5, 3, 2}));
  EXPECT_EQ(f->find("b.bf16")->dtype, StDtype::kBF16);
  EXPECT_EQ(f->find("d.empty")->numel(), 0);
  EXPECT_EQ(f->find("nope"), nullptr);
}

TEST(QwenSafetensors, HalfConversionsRoundToNearestEven) {
  EXPECT_EQ(floatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(floatToBf16(-2.0f), 0xc000);
  EXPECT_EQ(bf16ToFloat(floatToBf16(1.00390625f)), 1.0f);       // tie -> even (down)
  EXPECT_EQ(bf16ToFloat(floatToBf16(1.01171875f)), 1.015625f);  // tie -> even (up)
  EXPECT_EQ(floatToF16(1.0f), 0x3c00);
  EXPECT_EQ(floatToF16(65504.f), 0x7bff);
  EXPECT_EQ(floatToF16(1e6f), 0x7c00);
  EXPECT_EQ(f16ToFloat(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f16ToFloat(0xc000), -2.0f);
  for (uint32_t h = 0; h < 0x7c00; ++h) EXPECT_EQ(floatToF16(f16ToFloat(static_cast<uint16_t>(h))), h) << h;
}

struct BadFile { std::string name; std::vector<uint8_t> bytes; const char* mustMention; const char* tensor; };

TEST(QwenSafetensors, MalformedFilesGiveErrorsNamingFileAndTensor) {
  const std::string ok = R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";
  std::vector<BadFile> rows = {
      {"empty", {}, "truncated", nullptr},
      {"short length", {1, 0, 0}, "truncated", nullptr},
      {"header past end", rawImage(ok, 16), "", nullptr},  // patched below: length too big
      {"huge header length", {0, 0, 0, 0, 0, 0, 0, 1}, "exceeds", nullptr},
      {"not json", rawImage("{\"w\": [", 0), "not valid JSON", nullptr},
      {"not an object", rawImage("[1]", 0), "JSON object", nullptr},
      {"data truncated", rawImage(ok, 15), "truncated", "w"},
      {"bad dtype", rawImage(R"({"w":{"dtype":"I8","shape":[4],"data_offsets":[0,4]}})", 4), "I8", "w"},
      {"no dtype", rawImage(R"({"w":{"shape":[4],"data_offsets":[0,16]}})", 16), "dtype", "w"},
      {"bad shape", rawImage(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,16]}})", 16), "shape", "w"},
      {"shape/size mismatch", rawImage(R"({"w":{"dtype":"F32","shape":[3,2],"data_offsets":[0,16]}})", 16), "size mismatch", "w"},
      {"dtype/size mismatch", rawImage(R"({"w":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,16]}})", 16), "size mismatch", "w"},
      {"reversed offsets", rawImage(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[16,0]}})", 16), "< begin", "w"},
      {"bad offsets", rawImage(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0]}})", 16), "data_offsets", "w"},
      {"deep nesting", rawImage("{\"w\":" + std::string(100000, '[') + std::string(100000, ']') + "}", 0),
       "nested deeper than", nullptr},
      {"nested shape", rawImage(R"({"w":{"dtype":"F32","shape":[[[[4]]]],"data_offsets":[0,16]}})", 16),
       "dimension 0", "w"},
      {"overlap", rawImage(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", 16),
       "overlapping", "a"},
  };
  rows[2].bytes[0] = 0xff;  // header length 255 + ... > file size
  rows[2].mustMention = "truncated";
  for (const BadFile& r : rows) {
    std::unique_ptr<SafetensorsFile> f;
    std::string err;
    EXPECT_FALSE(SafetensorsFile::fromBytes(r.bytes, "bad.safetensors", &f, &err)) << r.name;
    EXPECT_EQ(f, nullptr) << r.name;
    EXPECT_NE(err.find("bad.safetensors"), std::string::npos) << r.name << ": " << err;
    EXPECT_NE(err.find(r.mustMention), std::string::npos) << r.name << ": " << err;
    if (r.tensor) EXPECT_NE(err.find(std::string("\"") + r.tensor + "\""), std::string::npos) << r.name << ": " << err;
  }
}

// toFloat on an empty tensor must not call memcpy(out->data() == nullptr,
// data == nullptr, 0), undefined behaviour that UBSan reports (-fsanitize=nonnull-attribute);
// this test fails before the fix only under UBSan (the sanitizer stage of CI).
TEST(QwenSafetensors, EmptyTensorToFloatTouchesNothing) {
  for (StDtype dt : {StDtype::kF32, StDtype::kBF16, StDtype::kF16}) {
    TensorView v;
    v.dtype = dt;
    v.shape = {0, 4};
    v.data = nullptr;
    v.bytes = 0;
    std::vector<float> out = {1.f, 2.f};
    v.toFloat(&out);
    EXPECT_TRUE(out.empty());
  }
}

TEST(QwenSafetensors, TruncatedFileOnDisk) {
  TempDir d;
  std::vector<uint8_t> img = buildSafetensors({{"x", StDtype::kF32, {8}, f32Bytes(std::vector<float>(8, 1.f))}});
  img.resize(img.size() - 3);
  std::string p = d.path() + "/model.safetensors";
  { std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(img.data()), static_cast<std::streamsize>(img.size())); }
  std::unique_ptr<SafetensorsModel> m;
  std::string err;
  EXPECT_FALSE(SafetensorsModel::open(d.path(), &m, &err));
  EXPECT_NE(err.find(p), std::string::npos) << err;
  EXPECT_NE(err.find("\"x\""), std::string::npos) << err;
  EXPECT_FALSE(SafetensorsModel::open(d.path() + "/nothing", &m, &err));
  EXPECT_NE(err.find("model.safetensors"), std::string::npos) << err;
}

TEST(QwenSafetensors, ShardedIndexAndRequire) {
  TempDir d;
  std::string err;
  ASSERT_TRUE(writeSafetensors(d.path() + "/s1.safetensors", {{"a", StDtype::kF32, {2, 3}, f32Bytes({1, 2, 3, 4, 5, 6})}}, &err));
  ASSERT_TRUE(writeSafetensors(d.path() + "/s2.safetensors", {{"b", StDtype::kBF16, {2}, u16Bytes({floatToBf16(7), floatToBf16(-8)})}}, &err));
  auto writeIndex = [&](const std::string& body) { std::ofstream(d.path() + "/model.safetensors.index.json") << body; };
  writeIndex(R"({"metadata":{},"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}})");
  std::unique_ptr<SafetensorsModel> m;
  ASSERT_TRUE(SafetensorsModel::open(d.path(), &m, &err)) << err;
  EXPECT_EQ(m->numTensors(), 2u);
  const TensorView* v = nullptr;
  ASSERT_TRUE(m->require("b", {2}, &v, &err)) << err;
  std::vector<float> got;
  v->toFloat(&got);
  EXPECT_EQ(got, (std::vector<float>{7, -8}));
  EXPECT_FALSE(m->require("a", {3, 2}, &v, &err));
  EXPECT_NE(err.find("\"a\""), std::string::npos) << err;
  EXPECT_NE(err.find("s1.safetensors"), std::string::npos) << err;
  EXPECT_NE(err.find("[2, 3]"), std::string::npos) << err;
  EXPECT_FALSE(m->require("c", {1}, &v, &err));
  EXPECT_NE(err.find("missing tensor \"c\""), std::string::npos) << err;

  writeIndex(R"({"weight_map":{"a":"s1.safetensors","zz":"s2.safetensors"}})");
  EXPECT_FALSE(SafetensorsModel::open(d.path(), &m, &err));
  EXPECT_NE(err.find("\"zz\""), std::string::npos) << err;
  EXPECT_NE(err.find("s2.safetensors"), std::string::npos) << err;
  writeIndex(R"({"weight_map":{"a":"missing.safetensors"}})");
  EXPECT_FALSE(SafetensorsModel::open(d.path(), &m, &err));
  EXPECT_NE(err.find("missing.safetensors"), std::string::npos) << err;
  writeIndex(R"({"weight_map":{"a":"../s1.safetensors"}})");
  EXPECT_FALSE(SafetensorsModel::open(d.path(), &m, &err));
  writeIndex(R"({"nothing":1})");
  EXPECT_FALSE(SafetensorsModel::open(d.path(), &m, &err));
  EXPECT_NE(err.find("weight_map"), std::string::npos) << err;
}

TEST(QwenSafetensors, LoadsAModelByHuggingFaceNamesAndReportsMissingTensors) {
  ModelConfig c;
  std::string err;
  ASSERT_TRUE(presetConfig("tiny", &c, &err));
  HostWeights w;
  makeSyntheticHostWeights(c, 7, true, &w);
  std::vector<TensorToWrite> ts;
  for (const TensorSpec& s : modelTensorSpecs(c)) {
    const std::vector<float>& v = w.at(s.name);
    std::vector<uint16_t> b(v.size());
    for (size_t i = 0; i < v.size(); ++i) b[i] = floatToBf16(v[i]);
    ts.push_back({s.name, StDtype::kBF16, s.shape, u16Bytes(b)});
  }
  TempDir d;
  ASSERT_TRUE(writeSafetensors(d.path() + "/model.safetensors", ts, &err)) << err;
  std::unique_ptr<SafetensorsModel> m;
  ASSERT_TRUE(SafetensorsModel::open(d.path(), &m, &err)) << err;
  HostWeights back;
  ASSERT_TRUE(loadHostWeights(c, *m, &back, &err)) << err;
  ASSERT_EQ(back.t.size(), w.t.size());
  for (auto& kv : w.t) EXPECT_EQ(back.at(kv.first), kv.second) << kv.first;  // bitwise: bf16 round trip is exact

  ts.erase(ts.begin() + 5);  // drop one layer tensor
  const std::string dropped = modelTensorSpecs(c)[5].name;
  ASSERT_TRUE(writeSafetensors(d.path() + "/model.safetensors", ts, &err)) << err;
  ASSERT_TRUE(SafetensorsModel::open(d.path(), &m, &err)) << err;
  EXPECT_FALSE(loadHostWeights(c, *m, &back, &err));
  EXPECT_NE(err.find(dropped), std::string::npos) << err;
}

TEST(QwenSafetensors, SyntheticWeightsAreDeterministicAndSeeded) {
  ModelConfig c;
  std::string err;
  ASSERT_TRUE(presetConfig("tiny", &c, &err));
  HostWeights a, b, s;
  makeSyntheticHostWeights(c, 1, false, &a);
  makeSyntheticHostWeights(c, 1, false, &b);
  makeSyntheticHostWeights(c, 2, false, &s);
  EXPECT_EQ(a.t, b.t);
  EXPECT_NE(a.at("mtp.fc.weight"), s.at("mtp.fc.weight"));
  const std::vector<float>& n = a.at("model.norm.weight");
  for (float x : n) EXPECT_TRUE(x >= 0.875f && x < 1.125f) << x;
  EXPECT_EQ(a.t.count("lm_head.weight"), 1u);
  ModelConfig tied = c;
  tied.tieWordEmbeddings = true;
  HostWeights t;
  makeSyntheticHostWeights(tied, 1, false, &t);
  EXPECT_EQ(t.t.count("lm_head.weight"), 0u);  // tied: lm_head is the embedding
  EXPECT_EQ(t.t.size() + 1, a.t.size());
}

}  // namespace
}  // namespace qwen
