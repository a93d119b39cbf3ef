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
    case 0: return 0.0f;
    case 1: return -0.0f;
    case 2: return std::ldexp(static_cast<float>(rng() % 1000) - 500.0f, -140);  // subnormal in f32
    case 3: return std::ldexp(static_cast<float>(rng() % 2000) - 1000.0f, static_cast<int>(rng() % 40) - 20);
    case 4: return static_cast<float>(static_cast<int>(rng() % 17) - 8);
    default: return std::ldexp(static_cast<float>(rng() % 100) + 1.0f, static_cast<int>(rng() % 10));
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

void propertyRun(bool deterministicMode) {
  const int n = 3;
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
      ASSERT_EQ(comm.allReduce(in[me].data() + offset * es, out.data() + offset * es, count, dt, op, nullptr),
                Status::kOk)
          << lastErrorMessage();
      std::vector<char> want(es);
      for (size_t i = 0; i < count; ++i) {
        storeFromFloat(want.data(), 0, dt, referenceElement(in, offset + i, dt, op));
        ASSERT_EQ(std::memcmp(out.data() + (offset + i) * es, want.data(), es), 0)
            << "rank " << me << " trial " << trial << " dtype " << dataTypeName(dt) << " op " << reduceOpName(op)
            << " count " << count << " offset " << offset << " element " << i;
      }
    }
  });
}

TEST(Determinism, HostRanksMatchTheContractElementByElement) { propertyRun(false); }
TEST(Determinism, SameInTheDeterministicMode) { propertyRun(true); }

}  // namespace
}  // namespace tpcomm
