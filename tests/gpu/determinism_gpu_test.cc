// The determinism contract on the GPU (docs/determinism.md).
//
// Property: for every algorithm forced with Config::algo, random (non-integer) inputs, sizes from
// 16 B to 64 MB and random element offsets into larger buffers, output element i is bitwise the
// rank-order fp32 reduction of the ranks' elements i (hostReduce), on every rank, eager and as a
// CUDA-graph replay; so every algorithm agrees with every other bit for bit. Whatever actually
// runs (a forced algorithm may hand an unaligned or oversized call to another), the bits may not
// change. Then the fused residual + RMSNorm: row r of a call over R rows has the same bits for
// every R in 1..512, on the same rows of input.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <tuple>

#include "gpu_allreduce_util.h"

namespace tpcomm_test {
namespace {

using tpcomm::Communicator;
using tpcomm::Config;
using tpcomm::Status;

const char* const kDetAlgos[] = {"lamport_p2p", "oneshot_p2p", "twoshot_p2p", "staged_host"};
constexpr DataType kTypes[] = {DataType::kF32, DataType::kF16, DataType::kBF16};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin};

RankGroup* detGroup(const std::string& algo) {
  static std::map<std::string, std::unique_ptr<RankGroup>> groups;
  auto it = groups.find(algo);
  if (it != groups.end()) return it->second.get();
  Config cfg;
  cfg.algo = algo;
  cfg.useNccl = false;  // nothing may fall back to NCCL's order
  cfg.deterministic = true;
  auto g = makeRankGroup(cfg, "deterministic " + algo);
  if (!g) return nullptr;
  return (groups[algo] = std::move(g)).get();
}

// Random values with a spread of magnitudes (so sums round), signed zeros among them.
float randomValue(std::mt19937& rng) {
  std::uniform_int_distribution<int> kind(0, 19);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  switch (kind(rng)) {
    case 0:
      return 0.0f;
    case 1:
      return -0.0f;
    default:
      return normal(rng) * std::ldexp(1.0f, std::uniform_int_distribution<int>(-8, 8)(rng));
  }
}

cudaError_t devAlloc(char** p, size_t bytes) { return cudaMalloc(reinterpret_cast<void**>(p), bytes); }

struct Buffers {
  std::vector<char*> in, out;
  ~Buffers() {
    for (char* p : in) cudaFree(p);
    for (char* p : out) cudaFree(p);
  }
};

void runProperty(const std::string& algo, DataType dtype, ReduceOp op, size_t count, bool graph, uint32_t seed) {
  SCOPED_TRACE(algo + " " + name(dtype) + " " + name(op) + " count=" + std::to_string(count) +
               (graph ? " graph" : " eager") + " seed=" + std::to_string(seed));
  RankGroup* g = detGroup(algo);
  ASSERT_NE(g, nullptr);
  const int n = g->n();
  const size_t es = tpcomm::dataTypeSize(dtype), bytes = count * es;
  std::mt19937 rng(seed);
  std::uniform_int_distribution<size_t> offsetPick(0, 63);
  std::vector<std::vector<uint8_t>> inputs;
  for (int r = 0; r < n; ++r) inputs.push_back(makeHost(dtype, count, [&](size_t) { return randomValue(rng); }));
  const std::vector<uint8_t> ref = reference(inputs, dtype, op, count);

  Buffers buf;
  std::vector<void*> in(n), out(n);
  for (int r = 0; r < n; ++r) {
    CUDA_OK(cudaSetDevice(g->devices[r]));
    char *a = nullptr, *b = nullptr;
    CUDA_OK(devAlloc(&a, bytes + 64 * es));
    CUDA_OK(devAlloc(&b, bytes + 64 * es));
    buf.in.push_back(a);
    buf.out.push_back(b);
    in[r] = a + offsetPick(rng) * es;  // each rank its own offset: mixed alignment across ranks
    out[r] = b + offsetPick(rng) * es;
  }
  auto prepare = [&] {
    for (int r = 0; r < n; ++r) {
      CUDA_OK(cudaSetDevice(g->devices[r]));
      CUDA_OK(cudaMemsetAsync(out[r], 0xff, bytes, g->streams[r]));
      CUDA_OK(cudaMemcpyAsync(in[r], inputs[r].data(), bytes, cudaMemcpyHostToDevice, g->streams[r]));
    }
  };
  auto issue = [&] {
    ASSERT_EQ(Communicator::groupStart(), Status::kOk);
    for (int r = 0; r < n; ++r)
      ASSERT_EQ(g->comms[r]->allReduce(in[r], out[r], count, dtype, op, g->streams[r]), Status::kOk)
          << tpcomm::lastErrorMessage();
    ASSERT_EQ(Communicator::groupEnd(), Status::kOk);
  };
  auto verify = [&] {
    for (int r = 0; r < n; ++r) {
      CUDA_OK(cudaSetDevice(g->devices[r]));
      CUDA_OK(cudaStreamSynchronize(g->streams[r]));
      ASSERT_EQ(g->comms[r]->checkError(), Status::kOk) << tpcomm::lastErrorMessage();
      std::vector<uint8_t> got(bytes);
      CUDA_OK(cudaMemcpy(got.data(), out[r], bytes, cudaMemcpyDeviceToHost));
      const long long bad = firstMismatch(got, ref, es);
      ASSERT_EQ(bad, -1) << "rank " << r << " element " << bad << " (ran " << g->comms[r]->lastAlgorithm() << "): got "
                         << tpcomm::loadAsFloat(got.data(), bad, dtype) << " expected "
                         << tpcomm::loadAsFloat(ref.data(), bad, dtype);
    }
  };
  if (!graph) {
    prepare();
    issue();
    verify();
    return;
  }
  RankGraphs graphs;
  captureOnEveryRank(*g, issue, &graphs);
  ASSERT_TRUE(graphs.ok());
  for (int replay = 0; replay < 2 && !testing::Test::HasFatalFailure(); ++replay) {
    prepare();
    ASSERT_TRUE(launchOnEveryRank(*g, graphs));
    verify();
  }
}

class DeterminismProperty : public testing::TestWithParam<std::tuple<const char*, DataType, ReduceOp, size_t, bool>> {};

TEST_P(DeterminismProperty, BitwiseRankOrderFp32) {
  if (rankDevices().size() < 2) GTEST_SKIP() << "needs 2 ranks";
  auto [algo, dtype, op, bytes, graph] = GetParam();
  const size_t count = std::max<size_t>(1, bytes / tpcomm::dataTypeSize(dtype));
  runProperty(algo, dtype, op, count, graph, static_cast<uint32_t>(bytes * 31 + static_cast<int>(op)));
}

// staged_host on GPU ranks is not graph-capturable: its graph rows are not in the tables.
bool capturable(const char* algo, DataType, ReduceOp, size_t, bool graph) {
  return !(graph && std::string(algo) == "staged_host");
}
const std::vector<const char*> kDetAlgoList(std::begin(kDetAlgos), std::end(kDetAlgos));

// 16 B .. 8 MB for every type and op; odd byte counts round down to whole elements.
INSTANTIATE_TEST_SUITE_P(
    Sizes, DeterminismProperty,
    testing::ValuesIn(product(kDetAlgoList, std::vector<DataType>(std::begin(kTypes), std::end(kTypes)),
                              std::vector<ReduceOp>(std::begin(kOps), std::end(kOps)),
                              testSizes({16, 52, 4096 + 12, 65536 + 36, (1u << 20) + 20, (8u << 20) + 4},
                                        {16, 4096 + 12, (1u << 20) + 20}),
                              std::vector<bool>{false, true}, capturable)));

// 64 MB (TPCOMM_TEST_SIZES=quick: 16 MB, still many chunks of every schedule): bf16 sum, the
// case where a schedule's chunking and pipelining matter most.
INSTANTIATE_TEST_SUITE_P(Large, DeterminismProperty,
                         testing::ValuesIn(product(kDetAlgoList, std::vector<DataType>{DataType::kBF16},
                                                   std::vector<ReduceOp>{ReduceOp::kSum},
                                                   testSizes({64u << 20}, {16u << 20}), std::vector<bool>{false, true},
                                                   capturable)));

// Row r of the fused residual + RMSNorm has the same bits whatever the call's row count: the same
// 512 rows of input, called over R = 1..512 leading rows (doubling, plus odd counts), against the
// 512-row call. Every deterministic algorithm that has a fused path, eager.
TEST(DeterminismFusedRows, RowBitsDoNotDependOnRowCount) {
  if (rankDevices().size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const size_t hidden = 4096, maxRows = 512;
  const DataType dtype = DataType::kBF16;
  const size_t es = tpcomm::dataTypeSize(dtype), rowBytes = hidden * es;
  for (const char* algo : {"lamport_p2p", "oneshot_p2p", "twoshot_p2p", "staged_host"}) {
    SCOPED_TRACE(algo);
    RankGroup* g = detGroup(algo);
    ASSERT_NE(g, nullptr);
    const int n = g->n();
    std::mt19937 rng(5);
    // x differs per rank; the residual is the same on every rank, as in tensor parallelism (the
    // fused kernels' precondition: two-shot takes each row's residual from the row's owner).
    std::vector<std::vector<uint8_t>> in, res;
    const std::vector<uint8_t> residual = makeHost(dtype, maxRows * hidden, [&](size_t) { return randomValue(rng); });
    for (int r = 0; r < n; ++r) {
      in.push_back(makeHost(dtype, maxRows * hidden, [&](size_t) { return randomValue(rng); }));
      res.push_back(residual);
    }
    const std::vector<uint8_t> weight = makeHost(dtype, hidden, [&](size_t) { return 1.0f + 0.1f * randomValue(rng); });
    std::vector<char*> dIn(n), dRes(n), dOut(n), dW(n);
    Buffers keep;
    for (int r = 0; r < n; ++r) {
      CUDA_OK(cudaSetDevice(g->devices[r]));
      CUDA_OK(devAlloc(&dIn[r], maxRows * rowBytes));
      CUDA_OK(devAlloc(&dRes[r], maxRows * rowBytes));
      CUDA_OK(devAlloc(&dOut[r], maxRows * rowBytes));
      CUDA_OK(devAlloc(&dW[r], rowBytes));
      keep.in.insert(keep.in.end(), {dIn[r], dRes[r], dOut[r], dW[r]});
      CUDA_OK(cudaMemcpy(dW[r], weight.data(), rowBytes, cudaMemcpyHostToDevice));
    }
    // rows R: out and residual (rank 0's), as bytes.
    auto run = [&](size_t rows, std::vector<uint8_t>* outBits, std::vector<uint8_t>* resBits) {
      for (int r = 0; r < n; ++r) {
        CUDA_OK(cudaSetDevice(g->devices[r]));
        CUDA_OK(cudaMemcpy(dIn[r], in[r].data(), rows * rowBytes, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(dRes[r], res[r].data(), rows * rowBytes, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemset(dOut[r], 0xff, rows * rowBytes));
        CUDA_OK(cudaDeviceSynchronize());
      }
      ASSERT_EQ(Communicator::groupStart(), Status::kOk);
      for (int r = 0; r < n; ++r)
        ASSERT_EQ(g->comms[r]->allReduceResidualRmsNorm(dIn[r], dRes[r], dW[r], 1e-6f, dOut[r], rows, hidden, dtype,
                                                        g->streams[r]),
                  Status::kOk)
            << tpcomm::lastErrorMessage();
      ASSERT_EQ(Communicator::groupEnd(), Status::kOk);
      for (int r = 0; r < n; ++r) {
        CUDA_OK(cudaSetDevice(g->devices[r]));
        CUDA_OK(cudaStreamSynchronize(g->streams[r]));
        ASSERT_EQ(g->comms[r]->checkError(), Status::kOk) << tpcomm::lastErrorMessage();
      }
      outBits->assign(rows * rowBytes, 0);
      resBits->assign(rows * rowBytes, 0);
      CUDA_OK(cudaSetDevice(g->devices[0]));
      CUDA_OK(cudaMemcpy(outBits->data(), dOut[0], rows * rowBytes, cudaMemcpyDeviceToHost));
      CUDA_OK(cudaMemcpy(resBits->data(), dRes[0], rows * rowBytes, cudaMemcpyDeviceToHost));
    };
    std::vector<uint8_t> allOut, allRes;
    run(maxRows, &allOut, &allRes);
    if (testing::Test::HasFatalFailure()) return;
    for (size_t rows : {1, 2, 3, 7, 16, 64, 65, 128, 255, 256}) {
      std::vector<uint8_t> o, s;
      run(rows, &o, &s);
      if (testing::Test::HasFatalFailure()) return;
      EXPECT_EQ(0, std::memcmp(o.data(), allOut.data(), rows * rowBytes)) << rows << " rows: out differs";
      EXPECT_EQ(0, std::memcmp(s.data(), allRes.data(), rows * rowBytes)) << rows << " rows: residual differs";
    }
  }
}

}  // namespace
}  // namespace tpcomm_test
