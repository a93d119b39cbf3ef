// The compressed all-reduce on GPU ranks (docs/compression.md): the two-shot over CUDA
// P2P (twoshot_p2p+fp8 / +int8) and the one-shot through pinned host memory (staged_host+fp8 /
// +int8, forced as "staged_host+fp8|staged_host" so a call asking for no compression runs plain
// staged_host on the same slots). Every element, on every rank, bitwise equal to the wire format's
// definition computed on the host block by block (tests/unit/compressed_check.h: the same bits
// as the host ranks' staged_host+fp8), so equal on every rank; within the stated error bound of
// the exact sum; eager and as CUDA-graph replays; the same bits over 200 rotating runs; NaN/Inf
// make their whole 64-element block NaN, zeros of either sign give +0. Chunks of 64 KiB
// (TPCOMM_TWOSHOT_CHUNK_BYTES, TPCOMM_STAGED_CHUNK_BYTES) so mid-size messages cross many chunks,
// both parities and every staging slot. staged_host cannot be captured in a CUDA graph (its
// sequence numbers are taken on the host per call), so its rows are eager only; it adds in-place
// calls interleaved with plain staged_host calls on the same communicator.
#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>

#include "algos/compressed/quantize.h"
#include "algos/staged_host/staged_host_ce.h"
#include "algos/staged_host/staged_pieces.h"
#include "gpu_allreduce_util.h"
#include "unit/compressed_check.h"
#include "unit/test_util.h"

namespace tpcomm_test {
namespace {

using tpcomm::Communicator;
using tpcomm::Compression;
using tpcomm::Config;
using tpcomm::Status;

const char* const kP2p = "twoshot_p2p";
const char* const kStaged = "staged_host";
// staged_host with TPCOMM_STAGED_COPY_ENGINES=1 (staged_host_ce.cu): the same algorithm names,
// the same definition bits.
const char* const kStagedCe = "staged_host/ce";

std::string algoBase(const std::string& base) { return base == kStagedCe ? kStaged : base; }
std::string algoOf(const std::string& base, Compression c) {
  return algoBase(base) + "+" + tpcomm::compressionName(c);
}

RankGroup* compressedGroup(const std::string& base, Compression c) {
  static std::map<std::pair<std::string, Compression>, std::unique_ptr<RankGroup>> groups;
  auto it = groups.find({base, c});
  if (it != groups.end()) return it->second.get();
  // One group at a time: ranks sharing a GPU in one process share its 32 hardware queues
  // (CUDA_DEVICE_MAX_CONNECTIONS), and a copy-engine rank has five streams; with every group
  // kept, streams would share queues and a spinning flag kernel could stall another rank's copy.
  groups.clear();
  tpcomm::test::ScopedEnv chunk("TPCOMM_TWOSHOT_CHUNK_BYTES", "65536");  // read at create
  tpcomm::test::ScopedEnv staged("TPCOMM_STAGED_CHUNK_BYTES", "65536");
  tpcomm::test::ScopedEnv check("TPCOMM_CHECK_CALLS", "1");
  tpcomm::test::ScopedEnv copyEngines("TPCOMM_STAGED_COPY_ENGINES", base == kStagedCe ? "1" : "0");
  Config cfg;
  cfg.algo = algoBase(base) == kStaged ? algoOf(base, c) + "|" + kStaged : algoOf(base, c);
  cfg.compression = c;
  cfg.useNccl = false;
  auto g = makeRankGroup(cfg, "compressed " + algoOf(base, c));
  if (!g) return nullptr;
  return (groups[{base, c}] = std::move(g)).get();
}

struct DeviceBuffers {
  std::vector<void*> in, out;
  ~DeviceBuffers() {
    for (void* p : in) cudaFree(p);
    for (void* p : out) cudaFree(p);
  }
};

// One compressed all-reduce on every rank of g, eager or as `replays` graph replays (each with
// fresh inputs from `inputsFor(replay)`), every output compared bitwise with the definition
// (in place: the input buffer is the output).
void runAndCompare(RankGroup* g, const std::string& base, Compression c, DataType dtype, size_t count, bool graph,
                   int replays, const std::function<std::vector<std::vector<uint8_t>>(int)>& inputsFor,
                   bool checkBound, bool inPlace = false) {
  const int n = g->n();
  const size_t es = tpcomm::dataTypeSize(dtype), bytes = count * es;
  DeviceBuffers buf;
  for (int r = 0; r < n; ++r) {
    CUDA_OK(cudaSetDevice(g->devices[r]));
    void *a = nullptr, *b = nullptr;
    CUDA_OK(cudaMalloc(&a, bytes));
    CUDA_OK(cudaMalloc(&b, bytes));
    buf.in.push_back(a);
    buf.out.push_back(b);
  }
  auto issue = [&] {
    ASSERT_EQ(Communicator::groupStart(), Status::kOk);
    for (int r = 0; r < n; ++r)
      ASSERT_EQ(g->comms[r]->allReduce(buf.in[r], inPlace ? buf.in[r] : buf.out[r], count, dtype, ReduceOp::kSum,
                                       g->streams[r]),
                Status::kOk)
          << tpcomm::lastErrorMessage();
    ASSERT_EQ(Communicator::groupEnd(), Status::kOk);
  };
  RankGraphs graphs;
  if (graph) {
    captureOnEveryRank(*g, issue, &graphs);
    ASSERT_TRUE(graphs.ok());
  }
  for (int rep = 0; rep < replays && !testing::Test::HasFatalFailure(); ++rep) {
    const std::vector<std::vector<uint8_t>> inputs = inputsFor(rep);
    const std::vector<uint8_t> want =
        tpcomm::test::compressedReference(inputs, count, dtype, tpcomm::quantFormatOf(c));
    for (int r = 0; r < n; ++r) {
      CUDA_OK(cudaSetDevice(g->devices[r]));
      CUDA_OK(cudaMemsetAsync(buf.out[r], 0xff, bytes, g->streams[r]));  // unused in place: the input is there
      CUDA_OK(cudaMemcpyAsync(buf.in[r], inputs[r].data(), bytes, cudaMemcpyHostToDevice, g->streams[r]));
    }
    if (graph)
      ASSERT_TRUE(launchOnEveryRank(*g, graphs));
    else
      issue();
    for (int r = 0; r < n; ++r) {
      CUDA_OK(cudaSetDevice(g->devices[r]));
      CUDA_OK(cudaStreamSynchronize(g->streams[r]));
      ASSERT_EQ(g->comms[r]->checkError(), Status::kOk) << tpcomm::lastErrorMessage();
      if (!graph) EXPECT_EQ(std::string(g->comms[r]->lastAlgorithm()), algoOf(base, c));
      std::vector<uint8_t> got(bytes);
      CUDA_OK(cudaMemcpy(got.data(), inPlace ? buf.in[r] : buf.out[r], bytes, cudaMemcpyDeviceToHost));
      const long long bad = firstMismatch(got, want, es);
      ASSERT_EQ(bad, -1) << "rank " << r << " run " << rep << " element " << bad << ": got "
                         << tpcomm::loadAsFloat(got.data(), bad, dtype) << " want "
                         << tpcomm::loadAsFloat(want.data(), bad, dtype);
    }
    if (checkBound && rep == 0) {  // equal bits everywhere, so rank 0's output is everyone's
      size_t over = 0;
      for (size_t i = 0; i < count; ++i) {
        double exact = 0;
        for (const auto& in : inputs) exact += tpcomm::loadAsFloat(in.data(), i, dtype);
        const double err = std::fabs(tpcomm::loadAsFloat(want.data(), i, dtype) - exact);
        over += !(err <= tpcomm::test::compressedErrorBound(inputs, count, dtype, tpcomm::quantFormatOf(c), i));
      }
      EXPECT_EQ(over, 0u) << "elements over the stated bound";
    }
  }
}

// Normal values with an outlier (x100) every 97 elements and signed zeros.
std::vector<std::vector<uint8_t>> randomInputs(int n, DataType dtype, size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<uint8_t>> v;
  for (int r = 0; r < n; ++r)
    v.push_back(makeHost(dtype, count, [&](size_t i) {
      const float x = normal(rng);
      return i % 211 == 7 ? ((i & 1) ? -0.0f : 0.0f) : (i % 97 == 5 ? 100.0f * x : x);
    }));
  return v;
}

using Param = std::tuple<std::string, Compression, DataType, size_t, bool>;
class CompressedGpu : public testing::TestWithParam<Param> {};

TEST_P(CompressedGpu, DefinitionBitsOnEveryRankWithinTheBound) {
  if (rankDevices().size() < 2) GTEST_SKIP() << "needs 2 ranks";
  auto [base, c, dtype, count, graph] = GetParam();
  RankGroup* g = compressedGroup(base, c);
  ASSERT_NE(g, nullptr);
  const uint64_t ceBefore = tpcomm::stagedCopyEngineCalls();
  runAndCompare(g, base, c, dtype, count, graph, graph ? 3 : 1,
                [&](int rep) { return randomInputs(g->n(), dtype, count, static_cast<uint32_t>(count * 7 + rep)); },
                true);
  // The copy-engine mode ran where it should: up to kCeMaxChunks of its chunks (the 64 KiB slots
  // of dense codes, split in 4 as TPCOMM_STAGED_CE_SPLIT's default), else the SM kernel.
  const uint64_t ceCalls = tpcomm::stagedCopyEngineCalls() - ceBefore;
  const size_t ceChunk = tpcomm::stagedCeChunkElems(count, tpcomm::dataTypeSize(dtype),
                                                    tpcomm::stagedDenseElems(65536, tpcomm::kQuantBlockElems), 4);
  const bool ceFits = (count + ceChunk - 1) / ceChunk <= tpcomm::kCeMaxChunks;
  if (base != kStagedCe) EXPECT_EQ(ceCalls, 0u);
  else EXPECT_EQ(ceCalls, ceFits ? static_cast<uint64_t>(g->n()) : 0u) << "calls in copy-engine mode";
}

// Odd counts, below / around the 64-element block, and counts spanning many 64 KiB chunks
// (TPCOMM_TEST_SIZES=quick: 2M / n + 17 elements instead of 4M + 17: 8-32 chunks at 8 ranks, the
// host's reference work, n pieces of the count, the same at every rank count). Built when gtest
// registers the tests, after main() read TPCOMM_TEST_RANKS.
testing::internal::ParamGenerator<size_t> counts() {
  const size_t quickLarge = (size_t{2} << 20) / static_cast<size_t>(testRanks()) + 17;
  return testing::ValuesIn(testSizes({1, 63, 65, 1000, 4097, 65536 + 3, 300001, (1u << 22) + 17},
                                     {1, 63, 65, 1000, 4097, 65536 + 3, 300001, quickLarge}));
}
INSTANTIATE_TEST_SUITE_P(Sizes, CompressedGpu,
                         testing::Combine(testing::Values(std::string(kP2p)),
                                          testing::Values(Compression::kFp8, Compression::kInt8),
                                          testing::Values(DataType::kF32, DataType::kF16, DataType::kBF16), counts(),
                                          testing::Bool()));
INSTANTIATE_TEST_SUITE_P(StagedSizes, CompressedGpu,  // eager only: staged_host is not capturable
                         testing::Combine(testing::Values(std::string(kStaged), std::string(kStagedCe)),
                                          testing::Values(Compression::kFp8, Compression::kInt8),
                                          testing::Values(DataType::kF32, DataType::kF16, DataType::kBF16), counts(),
                                          testing::Values(false)));

// 200 calls (TPCOMM_TEST_SIZES=quick: 50) rotating over three input sets: every one the
// definition's bits (run to run).
TEST(CompressedGpuRules, SameBitsOverRotatingRuns) {
  if (rankDevices().size() < 2) GTEST_SKIP() << "needs 2 ranks";
  for (const char* base : {kP2p, kStaged, kStagedCe})
    for (Compression c : {Compression::kFp8, Compression::kInt8}) {
      RankGroup* g = compressedGroup(base, c);
      ASSERT_NE(g, nullptr);
      const size_t count = 100003;
      std::vector<std::vector<std::vector<uint8_t>>> sets;
      for (uint32_t s = 0; s < 3; ++s) sets.push_back(randomInputs(g->n(), DataType::kBF16, count, 99 + s));
      runAndCompare(g, base, c, DataType::kBF16, count, false, quickRun() ? 50 : 200,
                    [&](int rep) { return sets[rep % 3]; }, false);
    }
}

// staged_host+fp8/int8 in place, alternating with plain staged_host calls (a call asking for no
// compression) on the same communicator, so both kernels take turns on the same staging slots,
// flags and sequence numbers: every compressed call gives the definition's bits, every plain one
// the exact sum of integer inputs, and each names the algorithm that ran.
TEST(CompressedGpuRules, StagedInPlaceInterleavedWithPlainCalls) {
  if (rankDevices().size() < 2) GTEST_SKIP() << "needs 2 ranks";
  for (const char* base : {kStaged, kStagedCe})
    for (Compression c : {Compression::kFp8, Compression::kInt8}) {
      SCOPED_TRACE(base);
      RankGroup* g = compressedGroup(base, c);
      ASSERT_NE(g, nullptr);
      const int n = g->n();
      for (size_t count : {size_t{300001}, size_t{4097}, size_t{1} << 20}) {
        runAndCompare(
            g, base, c, DataType::kBF16, count, false, 1,
            [&](int rep) { return randomInputs(n, DataType::kBF16, count, static_cast<uint32_t>(count + rep)); }, false,
            true);
        // A plain call: integer inputs (rank r: element i = (i + r) % 7 - 3), sums exact in f32.
        const size_t bytes = count * sizeof(float);
        DeviceBuffers buf;
        for (int r = 0; r < n; ++r) {
          CUDA_OK(cudaSetDevice(g->devices[r]));
          void* p = nullptr;
          CUDA_OK(cudaMalloc(&p, bytes));
          buf.in.push_back(p);
          const auto in =
              makeHost(DataType::kF32, count, [&](size_t i) { return static_cast<float>((i + r) % 7) - 3.0f; });
          CUDA_OK(cudaMemcpy(p, in.data(), bytes, cudaMemcpyHostToDevice));
        }
        ASSERT_EQ(Communicator::groupStart(), Status::kOk);
        for (int r = 0; r < n; ++r)
          ASSERT_EQ(g->comms[r]->allReduce(buf.in[r], buf.in[r], count, DataType::kF32, ReduceOp::kSum, g->streams[r],
                                           Compression::kNone),
                    Status::kOk)
              << tpcomm::lastErrorMessage();
        ASSERT_EQ(Communicator::groupEnd(), Status::kOk);
        for (int r = 0; r < n; ++r) {
          std::vector<uint8_t> got;
          drainAndReadBack(*g, r, buf.in[r], bytes, &got);
          ASSERT_FALSE(testing::Test::HasFatalFailure());
          EXPECT_EQ(std::string(g->comms[r]->lastAlgorithm()), kStaged);
          for (size_t i = 0; i < count; ++i) {
            float want = 0;
            for (int q = 0; q < n; ++q) want += static_cast<float>((i + q) % 7) - 3.0f;
            ASSERT_EQ(tpcomm::loadAsFloat(got.data(), i, DataType::kF32), want)
                << "plain call, rank " << r << " element " << i;
          }
        }
      }
    }
}

// NaN or +-Inf in any rank's block: that whole 64-element block of the result is NaN (its scale is
// NaN), on every rank; other blocks are unaffected. Blocks of zeros of either sign give +0.
TEST(CompressedGpuRules, NonFiniteBlocksAreNaNZerosArePositive) {
  if (rankDevices().size() < 2) GTEST_SKIP() << "needs 2 ranks";
  constexpr size_t kB = tpcomm::kQuantBlockElems;
  const size_t count = 5 * kB + 9;
  for (const char* base : {kP2p, kStaged, kStagedCe})
  for (Compression c : {Compression::kFp8, Compression::kInt8})
    for (bool graph : {false, true}) {
      if (graph && algoBase(base) == kStaged) continue;  // not capturable
      RankGroup* g = compressedGroup(base, c);
      ASSERT_NE(g, nullptr);
      const int n = g->n();
      auto inputs = [&](int) {
        std::vector<std::vector<uint8_t>> v;
        for (int r = 0; r < n; ++r)
          v.push_back(makeHost(DataType::kF32, count, [&](size_t i) {
            if (i < kB) return (i + r) % 2 ? -0.0f : 0.0f;
            if (r == n - 1 && i == kB + 3) return std::numeric_limits<float>::quiet_NaN();
            if (r == 0 && i == 2 * kB + 60) return std::numeric_limits<float>::infinity();
            if (i == 3 * kB) return r == 0 ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity();
            return 0.25f * static_cast<float>(r + 1);
          }));
        return v;
      };
      // The definition is NaN exactly on blocks 1..3 and +0 on block 0; check that, then the bits.
      const auto in = inputs(0);
      const auto want = tpcomm::test::compressedReference(in, count, DataType::kF32, tpcomm::quantFormatOf(c));
      for (size_t i = 0; i < count; ++i) {
        const float v = tpcomm::loadAsFloat(want.data(), i, DataType::kF32);
        if (i < kB)
          ASSERT_EQ(tpcomm::test::elementBits(want.data(), i, DataType::kF32), 0u) << i;
        else if (i < 4 * kB)
          ASSERT_TRUE(std::isnan(v)) << i;
        else
          ASSERT_TRUE(std::isfinite(v)) << i;
      }
      runAndCompare(g, base, c, DataType::kF32, count, graph, graph ? 2 : 1, inputs, false);
    }
}

}  // namespace
}  // namespace tpcomm_test
