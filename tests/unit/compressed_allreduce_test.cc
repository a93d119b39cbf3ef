// The compressed all-reduce on host ranks (staged_host+fp8 / staged_host+int8;
// docs/compression.md), end to end through Communicator: every element bitwise equal, on every
// rank, to the wire format's definition computed here block by block without the schedule
// (decode(quantize(fp32 rank-order sum of decode(quantize(x_r))))), within the stated error bound
// of the exact sum, the same bits run after run; then the rules around it: opt-in only,
// ineligible calls fall back uncompressed, ranks that disagree or a malformed
// TPCOMM_COMPRESSION fail create on every rank.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "algos/host/host_reduce.h"
#include "algos/compressed/quantize.h"
#include "compressed_check.h"
#include "test_util.h"

namespace tpcomm {
namespace {

constexpr int kB = kQuantBlockElems;

// Rank r's inputs: normal values, one outlier (x100) every 97 elements, a few exact zeros and
// negative zeros; reproducible per (rank, count, dtype).
std::vector<float> randomInput(int r, size_t count, DataType dt, uint32_t salt = 0) {
  std::mt19937 gen(1234u + 77u * r + static_cast<uint32_t>(count) * 3u + static_cast<uint32_t>(dt) + salt);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) {
    float x = normal(gen);
    if (i % 97 == 5) x *= 100.0f;
    if (i % 211 == 7) x = (i & 1) ? -0.0f : 0.0f;
    v[i] = x;
  }
  return v;
}

// The inputs as stored in dtype `dt` and read back (what the ranks really reduce).
std::vector<char> asBuffer(const std::vector<float>& v, DataType dt) {
  std::vector<char> b(v.size() * dataTypeSize(dt));
  for (size_t i = 0; i < v.size(); ++i) storeFromFloat(b.data(), i, dt, v[i]);
  return b;
}

Config compressedConfig(Compression c, const char* algo) {
  Config cfg;
  cfg.compression = c;
  cfg.algo = algo;
  return cfg;
}

struct Case {
  int ranks;
  Compression wire;
  DataType dtype;
};

class CompressedHost : public ::testing::TestWithParam<Case> {};

// Counts: odd, below / at / around the block, not multiples of it, and many 4096-byte chunks.
constexpr size_t kCounts[] = {1, 7, 63, 64, 65, 127, 1000, 4097, 7681, 100003};

TEST_P(CompressedHost, EveryElementIsTheDefinitionOnEveryRankWithinTheBound) {
  const Case c = GetParam();
  const QuantFormat f = quantFormatOf(c.wire);
  const std::string name = std::string("staged_host+") + compressionName(c.wire);
  test::ScopedEnv chunk("TPCOMM_STAGED_CHUNK_BYTES", "4096");  // 8 KiB of slots: chunks of 7680 elements
  test::ScopedEnv slots("TPCOMM_STAGED_SLOTS", "2");
  for (size_t count : kCounts) {
    std::vector<std::vector<char>> in(c.ranks);
    for (int r = 0; r < c.ranks; ++r) in[r] = asBuffer(randomInput(r, count, c.dtype), c.dtype);
    const std::vector<char> want = test::compressedReference(in, count, c.dtype, f);
    std::vector<std::vector<char>> outs(c.ranks);
    test::runHostRanks(c.ranks, compressedConfig(c.wire, name.c_str()), [&](int me, Communicator& comm) {
      std::vector<char> out = test::makeBuffer(count, c.dtype);
      ASSERT_EQ(comm.allReduce(in[me].data(), out.data(), count, c.dtype, ReduceOp::kSum, nullptr), Status::kOk)
          << lastErrorMessage();
      EXPECT_EQ(std::string(comm.lastAlgorithm()), name);
      // Run to run: twice more, the second in place.
      std::vector<char> again = test::makeBuffer(count, c.dtype, 0x5A);
      ASSERT_EQ(comm.allReduce(in[me].data(), again.data(), count, c.dtype, ReduceOp::kSum, nullptr), Status::kOk);
      EXPECT_EQ(again, out) << "rank " << me << " count " << count << ": a second call gave other bits";
      std::vector<char> inPlace = in[me];
      ASSERT_EQ(comm.allReduce(inPlace.data(), inPlace.data(), count, c.dtype, ReduceOp::kSum, nullptr), Status::kOk);
      EXPECT_EQ(inPlace, out) << "rank " << me << " count " << count << ": in place gave other bits";
      outs[me] = std::move(out);
    });
    for (int r = 0; r < c.ranks; ++r) {
      size_t wrong = 0, first = 0;
      for (size_t i = 0; i < count; ++i)
        if (test::elementBits(outs[r].data(), i, c.dtype) != test::elementBits(want.data(), i, c.dtype) && !wrong++)
          first = i;
      EXPECT_EQ(wrong, 0u) << "rank " << r << " count " << count << ": first wrong element " << first << " got "
                           << loadAsFloat(outs[r].data(), first, c.dtype) << " want "
                           << loadAsFloat(want.data(), first, c.dtype);
    }
    size_t over = 0;
    for (size_t i = 0; i < count; ++i) {
      double exact = 0;
      for (const auto& b : in) exact += loadAsFloat(b.data(), i, c.dtype);
      const double err = std::fabs(loadAsFloat(outs[0].data(), i, c.dtype) - exact);
      if (!(err <= test::compressedErrorBound(in, count, c.dtype, f, i)) && over++ == 0)
        ADD_FAILURE() << "count " << count << " element " << i << ": error " << err << " over the bound "
                      << test::compressedErrorBound(in, count, c.dtype, f, i);
    }
    EXPECT_EQ(over, 0u) << "count " << count;
  }
}

std::vector<Case> allCases() {
  std::vector<Case> v;
  for (int n : {2, 3, 4})
    for (Compression w : {Compression::kFp8, Compression::kInt8})
      for (DataType dt : {DataType::kF32, DataType::kF16, DataType::kBF16}) v.push_back({n, w, dt});
  return v;
}

INSTANTIATE_TEST_SUITE_P(RanksFormatsDtypes, CompressedHost, ::testing::ValuesIn(allCases()),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return std::to_string(i.param.ranks) + "ranks_" + compressionName(i.param.wire) + "_" +
                                  dataTypeName(i.param.dtype);
                         });

// NaN or Inf anywhere in a rank's block makes that whole block of the result NaN (the block's
// scale is NaN); the other blocks are untouched by it. Zeros of either sign give +0.
TEST(CompressedHostRules, NonFiniteBlocksReadBackNaNAndZerosArePositive) {
  const size_t count = 4 * kB + 9;
  for (Compression wire : {Compression::kFp8, Compression::kInt8}) {
    const std::string name = std::string("staged_host+") + compressionName(wire);
    std::vector<std::vector<float>> in(2, std::vector<float>(count, 1.0f));
    for (size_t i = 0; i < count; ++i) in[0][i] = in[1][i] = (i % 2) ? -0.0f : 0.0f;  // block 0: zeros only
    for (size_t i = kB; i < count; ++i) in[0][i] = in[1][i] = 0.5f;
    in[1][kB + 3] = std::nanf("");                             // block 1: NaN on rank 1
    in[0][2 * kB + 60] = std::numeric_limits<float>::infinity();  // block 2: +Inf on rank 0
    in[0][3 * kB] = std::numeric_limits<float>::infinity();    // block 3: +Inf and -Inf
    in[1][3 * kB] = -std::numeric_limits<float>::infinity();
    test::runHostRanks(2, compressedConfig(wire, name.c_str()), [&](int me, Communicator& comm) {
      std::vector<float> out(count, 7.0f);
      ASSERT_EQ(comm.allReduce(in[me].data(), out.data(), count, DataType::kF32, ReduceOp::kSum, nullptr), Status::kOk);
      for (size_t i = 0; i < kB; ++i) {
        uint32_t bits;
        std::memcpy(&bits, &out[i], 4);
        EXPECT_EQ(bits, 0u) << "element " << i << " of a zero block is not +0";
      }
      for (size_t i = kB; i < 4 * kB; ++i) EXPECT_TRUE(std::isnan(out[i])) << "element " << i;
      for (size_t i = 4 * kB; i < count; ++i) EXPECT_NEAR(out[i], 1.0f, 1e-6f) << "element " << i;
    });
  }
}

// Compression is opt-in: without it the compressed algorithms are never offered, even forced.
TEST(CompressedHostRules, OffByDefaultEvenWhenForced) {
  test::ScopedEnv env("TPCOMM_COMPRESSION", nullptr);
  test::runHostRanks(2, compressedConfig(Compression::kNone, "staged_host+fp8"), [](int me, Communicator& comm) {
    std::vector<float> in(100), out(100);
    test::fillInput(in.data(), in.size(), DataType::kF32, me);
    ASSERT_EQ(comm.allReduce(in.data(), out.data(), in.size(), DataType::kF32, ReduceOp::kSum, nullptr), Status::kOk);
    EXPECT_STREQ(comm.lastAlgorithm(), "staged_host");
    std::string first;
    EXPECT_EQ(test::countWrong(out.data(), out.size(), DataType::kF32,
                               [](size_t i) { return test::expectedValue(2, i, ReduceOp::kSum); }, &first),
              0u)
        << first;
  });
}

// Max and min are not eligible (a quantized max is not the max): with compression on they run
// uncompressed and exact. A sum on host ranks with compression on but nothing forced runs
// uncompressed too: the cost model says the quantize passes cost more than the bytes they save.
// The environment variable turns it on like Config::compression.
TEST(CompressedHostRules, IneligibleCallsFallBackUncompressed) {
  test::ScopedEnv env("TPCOMM_COMPRESSION", "int8");
  const int n = 3;
  const size_t count = 1001;
  test::runHostRanks(n, Config{}, [&](int me, Communicator& comm) {
    for (DataType dt : {DataType::kF32, DataType::kF16, DataType::kBF16})
      for (ReduceOp op : {ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kSum}) {
        std::vector<char> in = test::makeBuffer(count, dt), out = test::makeBuffer(count, dt);
        test::fillInput(in.data(), count, dt, me);
        ASSERT_EQ(comm.allReduce(in.data(), out.data(), count, dt, op, nullptr), Status::kOk) << lastErrorMessage();
        EXPECT_STREQ(comm.lastAlgorithm(), "staged_host") << dataTypeName(dt) << " " << reduceOpName(op);
        std::string first;
        EXPECT_EQ(test::countWrong(out.data(), count, dt, [&](size_t i) { return test::expectedValue(n, i, op); },
                                   &first),
                  0u)
            << first;
      }
  });
  // Forced, max still falls back (the selector skips staged_host+int8 for it).
  test::runHostRanks(2, compressedConfig(Compression::kInt8, "staged_host+int8"), [&](int me, Communicator& comm) {
    std::vector<float> in(count), out(count);
    test::fillInput(in.data(), count, DataType::kF32, me);
    ASSERT_EQ(comm.allReduce(in.data(), out.data(), count, DataType::kF32, ReduceOp::kMax, nullptr), Status::kOk);
    EXPECT_STREQ(comm.lastAlgorithm(), "staged_host");
  });
}

// The deterministic mode keeps its contract (element i depends only on the ranks' element i):
// compressed algorithms are not offered there, the call runs uncompressed.
TEST(CompressedHostRules, DeterministicModeRunsUncompressed) {
  Config cfg = compressedConfig(Compression::kFp8, "staged_host+fp8");
  cfg.deterministic = true;
  test::runHostRanks(2, cfg, [](int me, Communicator& comm) {
    std::vector<float> in(300), out(300);
    test::fillInput(in.data(), in.size(), DataType::kF32, me);
    ASSERT_EQ(comm.allReduce(in.data(), out.data(), in.size(), DataType::kF32, ReduceOp::kSum, nullptr), Status::kOk);
    EXPECT_STREQ(comm.lastAlgorithm(), "staged_host");
  });
}

// The per-call override (Communicator::allReduce(..., Compression)): one communicator created
// without compression compresses the calls that ask for it (here forced onto staged_host+fp8,
// since the host cost model never picks it) and no others; one created with fp8 runs a call
// that passes kNone uncompressed and exact. Alternating both on one communicator keeps every
// result right. A value that is not a Compression is refused, naming it.
TEST(CompressedHostRules, PerCallOverride) {
  test::ScopedEnv env("TPCOMM_COMPRESSION", nullptr);
  const size_t count = 1000;
  std::vector<std::vector<char>> inputs(2);
  for (int r = 0; r < 2; ++r) {
    inputs[r] = test::makeBuffer(count, DataType::kF32);
    test::fillInput(inputs[r].data(), count, DataType::kF32, r);
  }
  const std::vector<char> want = test::compressedReference(inputs, count, DataType::kF32, QuantFormat::kFp8E4m3);
  for (Compression made : {Compression::kNone, Compression::kFp8}) {
    test::runHostRanks(2, compressedConfig(made, "staged_host+fp8"), [&](int me, Communicator& comm) {
      std::vector<float> in(count), out(count);
      std::memcpy(in.data(), inputs[me].data(), count * sizeof(float));
      for (int round = 0; round < 4; ++round) {
        const Compression c = round % 2 ? Compression::kFp8 : Compression::kNone;
        ASSERT_EQ(comm.allReduce(in.data(), out.data(), count, DataType::kF32, ReduceOp::kSum, nullptr, c), Status::kOk)
            << lastErrorMessage();
        EXPECT_STREQ(comm.lastAlgorithm(), c == Compression::kFp8 ? "staged_host+fp8" : "staged_host");
        if (c == Compression::kNone) {
          std::string first;
          EXPECT_EQ(test::countWrong(out.data(), count, DataType::kF32,
                                     [](size_t i) { return test::expectedValue(2, i, ReduceOp::kSum); }, &first),
                    0u)
              << first;
        } else {
          EXPECT_EQ(std::memcmp(out.data(), want.data(), count * sizeof(float)), 0)
              << "rank " << me << ": not the fp8 wire format's definition";
        }
      }
      EXPECT_EQ(comm.allReduce(in.data(), out.data(), count, DataType::kF32, ReduceOp::kSum, nullptr,
                               static_cast<Compression>(7)),
                Status::kInvalidArgument);
      EXPECT_NE(std::string(lastErrorMessage()).find("compression 7"), std::string::npos) << lastErrorMessage();
      // Named on the call, a compressed max is refused (both ranks refuse alike, before any exchange).
      EXPECT_EQ(comm.allReduce(in.data(), out.data(), count, DataType::kF32, ReduceOp::kMax, nullptr, Compression::kInt8),
                Status::kInvalidArgument);
      EXPECT_NE(std::string(lastErrorMessage()).find("only sums are compressed"), std::string::npos)
          << lastErrorMessage();
      ASSERT_EQ(comm.allReduce(in.data(), out.data(), count, DataType::kF32, ReduceOp::kMax, nullptr, Compression::kNone),
                Status::kOk);
      EXPECT_STREQ(comm.lastAlgorithm(), "staged_host");
    });
  }
}

// Ranks that pass different per-call compressions for the same call run different algorithms
// on the same staging slots: the call signatures differ, and every rank fails the call with
// kInvalidArgument instead of mixing wire formats.
TEST(CompressedHostRules, PerCallMismatchIsRefusedOnEveryRank) {
  test::ScopedEnv env("TPCOMM_COMPRESSION", nullptr);
  test::runHostRanks(2, compressedConfig(Compression::kNone, "staged_host+fp8"), [&](int me, Communicator& comm) {
    std::vector<float> in(256), out(256);
    test::fillInput(in.data(), in.size(), DataType::kF32, me);
    const Compression c = me == 0 ? Compression::kFp8 : Compression::kNone;
    EXPECT_EQ(comm.allReduce(in.data(), out.data(), in.size(), DataType::kF32, ReduceOp::kSum, nullptr, c),
              Status::kInvalidArgument)
        << "rank " << me;
  });
}

TEST(CompressedHostRules, RanksThatDisagreeAreRefusedOnEveryRank) {
  std::vector<Status> st;
  std::vector<std::string> msg;
  test::createOnThreads(3, [](int r) { return compressedConfig(r == 2 ? Compression::kInt8 : Compression::kFp8, ""); }, &st, &msg);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(st[r], Status::kInvalidArgument) << "rank " << r;
    EXPECT_NE(msg[r].find("compression"), std::string::npos) << msg[r];
    EXPECT_NE(msg[r].find("int8 on rank 2 but fp8 on rank 0"), std::string::npos) << msg[r];
  }
  test::createOnThreads(2, [](int r) { return compressedConfig(r == 0 ? Compression::kNone : Compression::kFp8, ""); }, &st,
             &msg);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(st[r], Status::kInvalidArgument) << "rank " << r << ": " << msg[r];
}

TEST(CompressedHostRules, MalformedEnvironmentValueIsAClearError) {
  test::ScopedEnv env("TPCOMM_COMPRESSION", "zstd");
  EXPECT_NE(paramProblem(ParamId::kCompression).find("expected none, fp8"), std::string::npos);
  std::vector<Status> st;
  std::vector<std::string> msg;
  test::createOnThreads(2, [](int) { return Config{}; }, &st, &msg);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(st[r], Status::kInvalidArgument) << "rank " << r;
    EXPECT_NE(msg[r].find("TPCOMM_COMPRESSION='zstd'"), std::string::npos) << msg[r];
  }
  // Config::compression set: the environment is not consulted.
  test::createOnThreads(2, [](int) { return compressedConfig(Compression::kInt8, ""); }, &st, &msg);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(st[r], Status::kOk) << msg[r];
  Config bad;
  bad.compression = static_cast<Compression>(7);
  test::createOnThreads(2, [&](int) { return bad; }, &st, &msg);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(st[r], Status::kInvalidArgument) << msg[r];
}

TEST(CompressedHostRules, ParseAndNames) {
  Compression c = Compression::kNone;
  EXPECT_TRUE(parseCompression("fp8", &c));
  EXPECT_EQ(c, Compression::kFp8);
  EXPECT_TRUE(parseCompression("fp8_e4m3", &c));
  EXPECT_EQ(c, Compression::kFp8);
  EXPECT_TRUE(parseCompression("int8", &c));
  EXPECT_EQ(c, Compression::kInt8);
  EXPECT_TRUE(parseCompression("none", &c));
  EXPECT_EQ(c, Compression::kNone);
  for (const char* bad : {"", "FP8", "fp16", "int4", " fp8", "none "}) EXPECT_FALSE(parseCompression(bad, &c)) << bad;
  EXPECT_FALSE(parseCompression(nullptr, &c));
  EXPECT_STREQ(compressionName(Compression::kInt8), "int8");
  EXPECT_STREQ(compressionName(static_cast<Compression>(9)), "invalid");
}

}  // namespace
}  // namespace tpcomm
