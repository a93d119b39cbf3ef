// Tests of --dump-logits (logits_dump.h) on the CPU reference: the teacher-forced table equals
// a single target() call's logits whatever the chunk size, a TP=2 table (two ranks filling their
// vocab columns of one table) equals TP=1 within fp32 rounding, each row's argmax is the greedy
// token target() returns, every cell is written, and the file round-trips bit for bit while
// truncated or foreign files are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include "cpu_group.h"
#include "cpu_model.h"
#include "logits_dump.h"

namespace qwen {
namespace {

// The tiny preset with its synthetic weights rounded to bf16 (what a checkpoint holds).
struct Tiny {
  ModelConfig cfg;
  HostWeights w;
  Tiny() : cfg(tinyConfig()) { makeSyntheticHostWeights(cfg, 5, /*roundBf16=*/true, &w); }
  static ModelConfig tinyConfig() {
    ModelConfig c;
    std::string err;
    EXPECT_TRUE(presetConfig("tiny", &c, &err)) << err;
    return c;
  }
};

std::vector<int32_t> ids(int n, int vocab) {
  std::vector<int32_t> p;
  for (int i = 0; p.size() < static_cast<size_t>(n); ++i) p.push_back((i * 389 + 7) % vocab);
  return p;
}

// The table of `p` at `tp` ranks with prefill chunks of `chunk` tokens; poisoned with NaN first so
// a cell nobody wrote fails the comparisons.
LogitsTable dumpAt(const Tiny& m, int tp, int chunk, const std::vector<int32_t>& p) {
  LogitsTable t;
  t.reset(p, m.cfg.vocabSize);
  std::fill(t.logits.begin(), t.logits.end(), NAN);
  std::string err;
  const bool ok = runCpuTpGroup(tp, [&](int rank, tpcomm::Communicator* comm, std::string* e) {
    TpShape s;
    if (!makeTpShape(m.cfg, tp, rank, &s, e)) return false;
    CpuModel model(m.cfg, s, &m.w, comm, 64);
    auto rows = [&](int n, std::vector<float>* o, std::string*) {
      const std::vector<float>& l = model.lastLogits();
      o->assign(l.end() - static_cast<ptrdiff_t>(n) * s.vocab, l.end());
      return true;
    };
    return collectTeacherForcedLogits(model, chunk, s.vocabBegin(), s.vocab, rows, &t, e);
  }, &err);
  EXPECT_TRUE(ok) << err;
  return t;
}

TEST(QwenLogitsDump, ChunksAndTpGiveTheOneCallLogits) {
  Tiny m;
  const std::vector<int32_t> p = ids(21, m.cfg.vocabSize);
  // Reference: one target() call over all 21 positions, TP=1.
  TpShape s;
  std::string err;
  ASSERT_TRUE(makeTpShape(m.cfg, 1, 0, &s, &err)) << err;
  CpuModel ref(m.cfg, s, &m.w, nullptr, 64);
  std::vector<int32_t> next(p.size());
  ASSERT_TRUE(ref.target(p.data(), static_cast<int>(p.size()), 0, next.data(), &err)) << err;
  const std::vector<float>& want = ref.lastLogits();
  for (int tp : {1, 2})
    for (int chunk : {1, 4, 21, 64}) {
      const LogitsTable t = dumpAt(m, tp, chunk, p);
      ASSERT_EQ(t.logits.size(), want.size());
      double maxDiff = 0;
      for (size_t i = 0; i < want.size(); ++i) maxDiff = std::max(maxDiff, std::fabs(double(t.logits[i]) - want[i]));
      // NaN (an unwritten cell) makes maxDiff NaN, and NaN <= bound is false.
      EXPECT_LE(maxDiff, 1e-4) << "tp " << tp << " chunk " << chunk;
      for (size_t r = 0; r < p.size(); ++r) {
        const float* row = t.logits.data() + r * t.vocab;
        EXPECT_EQ(std::max_element(row, row + t.vocab) - row, next[r]) << "tp " << tp << " chunk " << chunk << " row " << r;
      }
    }
}

TEST(QwenLogitsDump, FileRoundTripsAndBadFilesAreRefused) {
  Tiny m;
  const LogitsTable t = dumpAt(m, 1, 8, ids(9, m.cfg.vocabSize));
  const std::string path = ::testing::TempDir() + "/qwen_logits_dump_test.bin";
  std::string err;
  ASSERT_TRUE(writeLogitsFile(path, t, &err)) << err;
  LogitsTable back;
  ASSERT_TRUE(readLogitsFile(path, &back, &err)) << err;
  EXPECT_EQ(back.ids, t.ids);
  EXPECT_EQ(back.vocab, t.vocab);
  ASSERT_EQ(back.logits.size(), t.logits.size());
  EXPECT_EQ(0, std::memcmp(back.logits.data(), t.logits.data(), t.logits.size() * 4));
  {  // truncated: one float short
    std::ifstream in(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size() - 4));
  }
  EXPECT_FALSE(readLogitsFile(path, &back, &err));
  EXPECT_NE(err.find("the header says"), std::string::npos) << err;
  { std::ofstream(path, std::ios::binary | std::ios::trunc) << "NOTLOGITS and more bytes"; }
  EXPECT_FALSE(readLogitsFile(path, &back, &err));
  EXPECT_NE(err.find("QWLOGIT1"), std::string::npos) << err;
  std::remove(path.c_str());
  EXPECT_FALSE(writeLogitsFile("/nonexistent-dir/x.bin", t, &err));
}

TEST(QwenLogitsDump, PromptLongerThanTheCacheIsRefused) {
  Tiny m;
  TpShape s;
  std::string err;
  ASSERT_TRUE(makeTpShape(m.cfg, 1, 0, &s, &err));
  CpuModel model(m.cfg, s, &m.w, nullptr, 8);
  LogitsTable t;
  t.reset(ids(9, m.cfg.vocabSize), m.cfg.vocabSize);
  auto rows = [&](int, std::vector<float>*, std::string*) { return true; };
  EXPECT_FALSE(collectTeacherForcedLogits(model, 4, 0, s.vocab, rows, &t, &err));
  EXPECT_NE(err.find("KV cache"), std::string::npos) << err;
}

}  // namespace
}  // namespace qwen
