// Communicator::allReduceResidualRmsNorm on host ranks (threads of this process) and the host
// arithmetic it shares bit-for-bit with the GPU kernels (algos/fused/fused_rmsnorm.h).
//
// Stated tolerance, against an fp64 reference computed from the same dtype inputs (no rounding
// anywhere), per element i of a row, u = unit roundoff of the dtype (2^-24 f32, 2^-11 f16,
// 2^-8 bf16), u32 = 2^-24:
//   residual: |got - ref| <= 2 * dr_i, dr_i = (n-1) u32 sum_r |in_r,i| + u |x_i| + u (|x_i| + |res_i|)
//             (fp32 accumulation over ranks, x rounded to the dtype, the add rounded)
//   out:      |got - ref| <= 2 * [|w_i| inv dr_i + |ref_i| (inv dr_max + 52 u32 + u)]
// with dr_i the residual bound above, inv the reference 1/rms, 52 u32 the fp32 sum of squares
// (at most 32 fmaf per thread + 9 tree levels) plus sqrt and divisions, u the final rounding;
// the factor 2 is margin. Every output is poisoned first, ranks must agree bitwise, and the
// checker is itself shown to reject a result off by a few ulps of the norm.
#include "algos/fused/fused_rmsnorm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "algos/p2p/twoshot_p2p.h"
#include "transports/cuda_p2p.h"
#include "unit/fused_rmsnorm_check.h"
#include "unit/test_util.h"

namespace tpcomm {
namespace {

using test::makeBuffer;
using test::runHostRanks;
using fused_test::Problem;
using fused_test::unitRoundoff;

struct Shape {
  int nRanks;
  size_t rows, hidden;
};

// Ranks x rows x hidden: odd hiddens (not whole 16-byte units), one row, many rows, the largest row.
const Shape kShapes[] = {{1, 1, 1},    {2, 1, 3},     {2, 2, 128},   {3, 7, 1000}, {4, 3, 5120},
                         {2, 64, 130}, {2, 2, 16384}, {8, 5, 77},    {3, 1, 4097}};
const DataType kDtypes[] = {DataType::kF32, DataType::kF16, DataType::kBF16};

class FusedRmsNormHost : public testing::TestWithParam<std::tuple<Shape, DataType, bool>> {};

TEST_P(FusedRmsNormHost, MatchesFp64ReferenceAndAgreesAcrossRanks) {
  const Shape shape = std::get<0>(GetParam());
  const DataType dt = std::get<1>(GetParam());
  const bool inPlace = std::get<2>(GetParam());
  const Problem pb(shape.nRanks, shape.rows, shape.hidden, dt, 1e-6f);
  const size_t count = shape.rows * shape.hidden;
  std::vector<std::vector<char>> outs(shape.nRanks), residuals(shape.nRanks);
  runHostRanks(shape.nRanks, Config{}, [&](int r, Communicator& comm) {
    std::vector<char> in = pb.inputs[r];
    std::vector<char> out = inPlace ? in : makeBuffer(count, dt, 0xff);  // poison: NaN
    std::vector<char> residual = pb.residual;
    Status s = comm.allReduceResidualRmsNorm(in.data(), residual.data(), pb.weight.data(), pb.eps,
                                             inPlace ? in.data() : out.data(), shape.rows, shape.hidden, dt, nullptr);
    ASSERT_EQ(s, Status::kOk) << "rank " << r << ": " << lastErrorMessage();
    outs[r] = inPlace ? in : out;
    residuals[r] = residual;
    if (!inPlace) EXPECT_EQ(0, std::memcmp(in.data(), pb.inputs[r].data(), in.size())) << "rank " << r << ": in modified";
  });
  if (HasFailure()) return;
  std::string first;
  EXPECT_EQ(pb.countOutOfTolerance(residuals[0].data(), outs[0].data(), &first), 0u) << first;
  for (int r = 1; r < shape.nRanks; ++r) {
    EXPECT_EQ(outs[r], outs[0]) << "rank " << r << " out differs from rank 0";
    EXPECT_EQ(residuals[r], residuals[0]) << "rank " << r << " residual differs from rank 0";
  }
  // The host path is the GPU kernels' arithmetic applied to allReduce's bits.
  std::vector<const void*> srcs;
  for (const auto& in : pb.inputs) srcs.push_back(in.data());
  std::vector<char> x = makeBuffer(count, dt), residual = pb.residual, out = makeBuffer(count, dt);
  hostReduce(x.data(), srcs.data(), shape.nRanks, count, dt, ReduceOp::kSum);
  hostResidualRmsNorm(x.data(), residual.data(), pb.weight.data(), pb.eps, out.data(), shape.rows, shape.hidden, dt);
  EXPECT_EQ(out, outs[0]);
  EXPECT_EQ(residual, residuals[0]);
}

std::string shapeName(const testing::TestParamInfo<FusedRmsNormHost::ParamType>& info) {
  const Shape s = std::get<0>(info.param);
  return std::to_string(s.nRanks) + "ranks_" + std::to_string(s.rows) + "x" + std::to_string(s.hidden) + "_" +
         dataTypeName(std::get<1>(info.param)) + (std::get<2>(info.param) ? "_inplace" : "");
}

INSTANTIATE_TEST_SUITE_P(Shapes, FusedRmsNormHost,
                         testing::Combine(testing::ValuesIn(kShapes), testing::ValuesIn(kDtypes), testing::Bool()),
                         shapeName);

// The checker must be able to fail: a norm just past the stated bound (weight scaled by 1 + 256 u32
// for f32, 1 + 32 u for 16-bit types) and a residual that skipped the add are both rejected.
TEST(FusedRmsNormHostCheck, ToleranceRejectsWrongResults) {
  for (DataType dt : kDtypes) {
    SCOPED_TRACE(dataTypeName(dt));
    const Problem pb(2, 3, 1000, dt, 1e-6f);
    const size_t count = pb.rows * pb.hidden;
    std::vector<const void*> srcs = {pb.inputs[0].data(), pb.inputs[1].data()};
    std::vector<char> x = makeBuffer(count, dt), residual = pb.residual, out = makeBuffer(count, dt);
    hostReduce(x.data(), srcs.data(), 2, count, dt, ReduceOp::kSum);
    hostResidualRmsNorm(x.data(), residual.data(), pb.weight.data(), pb.eps, out.data(), pb.rows, pb.hidden, dt);
    EXPECT_EQ(pb.countOutOfTolerance(residual.data(), out.data(), nullptr), 0u);

    std::vector<char> wrongWeight = pb.weight;
    const double scale = dt == DataType::kF32 ? 1 + 256 * unitRoundoff(dt) : 1 + 32 * unitRoundoff(dt);
    for (size_t i = 0; i < pb.hidden; ++i)
      storeFromFloat(wrongWeight.data(), i, dt, static_cast<float>(loadAsFloat(pb.weight.data(), i, dt) * scale));
    std::vector<char> residual2 = pb.residual, out2 = makeBuffer(count, dt);
    hostResidualRmsNorm(x.data(), residual2.data(), wrongWeight.data(), pb.eps, out2.data(), pb.rows, pb.hidden, dt);
    EXPECT_GT(pb.countOutOfTolerance(residual2.data(), out2.data(), nullptr), 0u) << "a wrong norm passed";
    EXPECT_GT(pb.countOutOfTolerance(pb.residual.data(), out.data(), nullptr), 0u) << "a missing residual add passed";
  }
}

// Exact case: every updated residual is +-2, so mean(r^2) = 4, inv_rms = 1/2 exactly (eps 0) and
// out must be +-weight bit for bit.
TEST(FusedRmsNormHostCheck, ExactIntegerRows) {
  for (DataType dt : kDtypes) {
    SCOPED_TRACE(dataTypeName(dt));
    const size_t rows = 3, hidden = 1001;
    std::vector<char> x = makeBuffer(rows * hidden, dt), residual = makeBuffer(rows * hidden, dt);
    std::vector<char> weight = makeBuffer(hidden, dt), out = makeBuffer(rows * hidden, dt);
    for (size_t i = 0; i < rows * hidden; ++i) {
      const bool neg = (i * 7 + i / hidden) % 3 == 0;
      storeFromFloat(x.data(), i, dt, neg ? -5.0f : 1.0f);
      storeFromFloat(residual.data(), i, dt, neg ? 3.0f : 1.0f);
    }
    for (size_t i = 0; i < hidden; ++i) storeFromFloat(weight.data(), i, dt, static_cast<float>(i % 13) - 6.0f);
    hostResidualRmsNorm(x.data(), residual.data(), weight.data(), 0.0f, out.data(), rows, hidden, dt);
    for (size_t i = 0; i < rows * hidden; ++i) {
      const bool neg = (i * 7 + i / hidden) % 3 == 0;
      ASSERT_EQ(loadAsFloat(residual.data(), i, dt), neg ? -2.0f : 2.0f) << "element " << i;
      const float w = loadAsFloat(weight.data(), i % hidden, dt);
      ASSERT_EQ(loadAsFloat(out.data(), i, dt), neg ? -w : w) << "element " << i;
    }
  }
}

TEST(FusedRmsNormHostCheck, RejectsBadArguments) {
  runHostRanks(1, Config{}, [](int, Communicator& comm) {
    std::vector<float> in(64, 1.0f), res(64, 1.0f), w(32, 1.0f), out(64);
    const DataType f = DataType::kF32;
    auto call = [&](const void* i, void* r, const void* wt, float eps, void* o, size_t rows, size_t hidden, DataType d,
                    cudaStream_t s) { return comm.allReduceResidualRmsNorm(i, r, wt, eps, o, rows, hidden, d, s); };
    EXPECT_EQ(call(nullptr, res.data(), w.data(), 1e-6f, out.data(), 2, 32, f, nullptr), Status::kInvalidArgument);
    EXPECT_EQ(call(in.data(), nullptr, w.data(), 1e-6f, out.data(), 2, 32, f, nullptr), Status::kInvalidArgument);
    EXPECT_EQ(call(in.data(), res.data(), nullptr, 1e-6f, out.data(), 2, 32, f, nullptr), Status::kInvalidArgument);
    EXPECT_EQ(call(in.data(), res.data(), w.data(), 1e-6f, nullptr, 2, 32, f, nullptr), Status::kInvalidArgument);
    EXPECT_EQ(call(in.data(), res.data(), w.data(), 1e-6f, out.data(), 0, 32, f, nullptr), Status::kInvalidArgument);
    EXPECT_EQ(call(in.data(), res.data(), w.data(), 1e-6f, out.data(), 2, 0, f, nullptr), Status::kInvalidArgument);
    EXPECT_EQ(call(in.data(), res.data(), w.data(), 1e-6f, out.data(), 1, kMaxRmsNormHidden + 1, f, nullptr),
              Status::kInvalidArgument);
    EXPECT_NE(std::string(lastErrorMessage()).find("hidden"), std::string::npos) << lastErrorMessage();
    EXPECT_EQ(call(in.data(), res.data(), w.data(), NAN, out.data(), 2, 32, f, nullptr), Status::kInvalidArgument);
    EXPECT_EQ(call(in.data(), res.data(), w.data(), -1.0f, out.data(), 2, 32, f, nullptr), Status::kInvalidArgument);
    EXPECT_EQ(call(in.data(), res.data(), w.data(), 1e-6f, out.data(), 2, 32, static_cast<DataType>(7), nullptr),
              Status::kInvalidArgument);
    EXPECT_EQ(call(in.data(), in.data(), w.data(), 1e-6f, out.data(), 2, 32, f, nullptr), Status::kInvalidArgument);
    EXPECT_EQ(call(in.data(), res.data(), w.data(), 1e-6f, res.data(), 2, 32, f, nullptr), Status::kInvalidArgument);
    EXPECT_EQ(call(in.data(), res.data(), w.data(), 1e-6f, out.data(), SIZE_MAX / 2, 32, f, nullptr),
              Status::kInvalidArgument);
    EXPECT_EQ(call(in.data(), res.data(), w.data(), 1e-6f, out.data(), 2, 32, f, reinterpret_cast<cudaStream_t>(8)),
              Status::kInvalidArgument);
    // Still usable after the rejected calls.
    EXPECT_EQ(call(in.data(), res.data(), w.data(), 1e-6f, out.data(), 2, 32, f, nullptr), Status::kOk)
        << lastErrorMessage();
    EXPECT_EQ(res[0], 2.0f);
  });
}

// Two-shot geometry: shares fit the inbox slice, the chunk's rows (x2) fit the gather area, and a
// row larger than a slice is declined rather than overrun.
TEST(FusedRmsNormHostCheck, TwoshotGeometryFitsTheScratch) {
  for (int n : {2, 3, 4, 8}) {
    for (size_t chunk : {size_t(64) << 10, size_t(32) << 20}) {
      P2pPlan plan;
      ASSERT_EQ(planP2pBuffer(n, {twoshotScratch(n, 128, chunk)}, &plan), Status::kOk);
      const P2pRegion& L = plan.regions[0];
      for (size_t rowBytes : {size_t(256), size_t(2000), size_t(10240), size_t(65536)}) {
        for (size_t rows : {size_t(1), size_t(7), size_t(512), size_t(100000)}) {
          SCOPED_TRACE("n " + std::to_string(n) + " chunk " + std::to_string(chunk) + " rowBytes " +
                       std::to_string(rowBytes) + " rows " + std::to_string(rows));
          size_t perChunk = 0, perRank = 0;
          if (!fusedTwoshotGeometry(L, n, rows, rowBytes, &perChunk, &perRank)) {
            EXPECT_TRUE(2 * rowBytes > L.sharedBytes || rowBytes > L.slotBytes);
            continue;
          }
          EXPECT_GE(perChunk, 1u);
          EXPECT_LE(perChunk, rows);
          EXPECT_LE(perRank * rowBytes, L.slotBytes);
          EXPECT_LE(2 * perChunk * rowBytes, L.sharedBytes);
          EXPECT_LE(perChunk, perRank * n);
          EXPECT_GE(perRank, 1u);
        }
      }
    }
  }
}

}  // namespace
}  // namespace tpcomm
