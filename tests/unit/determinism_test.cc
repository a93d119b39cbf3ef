// The determinism contract on host ranks (docs/determinism.md): element i of a result
// is the fp32 reduction of the ranks' element i in rank order (a -0.0 input read as +0.0),
// rounded once, whatever the message size, the element's offset in the message or the buffer's
// offset in memory. A property test: random sizes, offsets, dtypes, ops and values (zeros of
// both signs, subnormals, large and small magnitudes), each element checked bitwise against a
// scalar reference, with the deterministic mode on (Config::deterministic) and off.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "algos/host/host_reduce.h"
#include "unit/test_util.h"

namespace tpcomm {
namespace {

float interesting(std::mt19937& rng) {
  switch (rng() % 6) {
    case 0:
      return 0.0f;
    case 1:
      return -0.0f;
    case 2:
      return std::ldexp(static_cast<float>(rng() % 1000) - 500.0f, -140);  // subnormal in f32
    case 3:
      return std::ldexp(static_cast<float>(rng() % 2000) - 1000.0f, static_cast<int>(rng() % 40) - 20);
    case 4:
      return static_cast<float>(static_cast<int>(rng() % 17) - 8);
    default:
      return std::ldexp(static_cast<float>(rng() % 100) + 1.0f, static_cast<int>(rng() % 10));
  }
}

// Element i of the reduction, as the contract defines it.
float referenceElement(const std::vector<std::vector<char>>& in, size_t i, DataType dt, ReduceOp op) {
  float acc = loadAsFloat(in[0].data(), i, dt) + 0.0f;
  for (size_t r = 1; r < in.size(); ++r) {
    const float v = loadAsFloat(in[r].data(), i, dt) + 0.0f;
    acc = op == ReduceOp::kSum ? acc + v : op == ReduceOp::kMax ? std::fmax(acc, v) : std::fmin(acc, v);
  }
  return acc;
}

void propertyRun(bool deterministicMode, int n) {
  Config cfg;
  cfg.deterministic = deterministicMode;
  test::runHostRanks(n, cfg, [&](int me, Communicator& comm) {
    std::mt19937 rng(20261201);  // the same stream on every rank: same shapes, same call order
    for (int trial = 0; trial < 60; ++trial) {
      const DataType dt = static_cast<DataType>(rng() % 3);
      const ReduceOp op = static_cast<ReduceOp>(rng() % 3);
      const size_t es = dataTypeSize(dt);
      const size_t count = 1 + rng() % (trial % 10 == 0 ? 300000 : 5000);
      const size_t offset = rng() % 64;  // elements into a larger buffer: unaligned starts too
      std::vector<std::vector<char>> in(n, std::vector<char>((count + offset) * es));
      for (int r = 0; r < n; ++r) {
        std::mt19937 vr(static_cast<unsigned>(trial * 131 + r));
        for (size_t i = 0; i < count; ++i) storeFromFloat(in[r].data(), offset + i, dt, interesting(vr));
      }
      std::vector<char> out((count + offset) * es, 0x5a);
      const bool inPlace = trial % 3 == 1;  // the result written over the input
      if (inPlace) std::memcpy(out.data(), in[me].data(), out.size());
      const char* send = inPlace ? out.data() + offset * es : in[me].data() + offset * es;
      ASSERT_EQ(comm.allReduce(send, out.data() + offset * es, count, dt, op, nullptr), Status::kOk)
          << lastErrorMessage();
      std::vector<char> want(es);
      for (size_t i = 0; i < count; ++i) {
        storeFromFloat(want.data(), 0, dt, referenceElement(in, offset + i, dt, op));
        ASSERT_EQ(std::memcmp(out.data() + (offset + i) * es, want.data(), es), 0)
            << "rank " << me << " trial " << trial << " dtype " << dataTypeName(dt) << " op " << reduceOpName(op)
            << " count " << count << " offset " << offset << (inPlace ? " in place" : "") << " element " << i << " of "
            << n << " ranks";
      }
    }
  });
}

TEST(Determinism, HostRanksMatchTheContractElementByElement) { propertyRun(false, 3); }
TEST(Determinism, SameInTheDeterministicMode) { propertyRun(true, 3); }
// One rank (copy_local) keeps the contract too: a -0.0 input gives +0.0, as on every other size
// (issue 34 item 5: it returned the input's -0.0).
TEST(Determinism, OneRankKeepsTheContractZerosIncluded) {
  propertyRun(false, 1);
  propertyRun(true, 1);
}

// Reduce-scatter is a reduction (+0.0 out of -0.0 on one rank too); all-gather moves bits, so a
// -0.0 stays -0.0 on every size.
TEST(Determinism, OneRankReduceScatterReadsZerosAndAllGatherKeepsBits) {
  test::runHostRanks(1, Config{}, [&](int, Communicator& comm) {
    for (DataType dt : {DataType::kF32, DataType::kF16, DataType::kBF16}) {
      std::vector<char> in(4 * dataTypeSize(dt)), out(in.size(), 0x5a), want(in.size()), zero(in.size());
      const float values[] = {-0.0f, 2.0f, -0.0f, -3.0f};
      for (size_t i = 0; i < 4; ++i) {
        storeFromFloat(in.data(), i, dt, values[i]);
        storeFromFloat(want.data(), i, dt, values[i] + 0.0f);
      }
      ASSERT_EQ(comm.reduceScatter(in.data(), out.data(), 4, dt, ReduceOp::kMax, nullptr), Status::kOk);
      EXPECT_EQ(std::memcmp(out.data(), want.data(), out.size()), 0) << dataTypeName(dt) << " reduceScatter";
      ASSERT_EQ(comm.allGather(in.data(), out.data(), 4, dt, nullptr), Status::kOk);
      EXPECT_EQ(std::memcmp(out.data(), in.data(), out.size()), 0) << dataTypeName(dt) << " allGather";
    }
  });
}

}  // namespace
}  // namespace tpcomm
