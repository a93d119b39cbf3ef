// The test-only algorithm (tests/algos/scratch_test_p2p) on GPUs: registered by one line, it gets
// its own region of the cuda_p2p buffer and runs its own kernel there, interleaved on one
// communicator with oneshot_p2p and twoshot_p2p calls (a size rule of TPCOMM_ALGO picks each), so
// a region that overlapped another algorithm's, or flags or epochs it shared, would show as a
// wrong sum or a timeout. Integer inputs, outputs poisoned before each call and compared bitwise
// with the host reference on every rank. The CPU side (layout, registration, fallback on host
// ranks) is tests/unit/p2p_scratch_test.cc.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "algos/scratch_test_p2p/scratch_test_p2p.h"
#include "collectives/registry.h"
#include "gpu_allreduce_util.h"

namespace tpcomm_test {
namespace {

using tpcomm::Config;
using tpcomm::Status;

TEST(ScratchTestAlgorithm, RunsInItsOwnRegionBesideTheRegistrysAlgorithms) {
  tpcomm::ScopedTestAlgorithm registered(&tpcomm::makeScratchTestP2p);
  Config cfg;
  cfg.algo = "0-32K:scratch_test_p2p,32K-256K:oneshot_p2p,256K-inf:twoshot_p2p";
  auto g = makeRankGroup(cfg, "scratch_test_p2p");
  ASSERT_NE(g, nullptr);
  const int n = g->n();
  // Sizes that land on each of the three algorithms, in an order that alternates them.
  struct Call {
    size_t count;
    const char* algo;
  };
  const Call kCalls[] = {{1000, "scratch_test_p2p"}, {20000, "oneshot_p2p"},     {7, "scratch_test_p2p"},
                         {300000, "twoshot_p2p"},    {8000, "scratch_test_p2p"}, {40000, "oneshot_p2p"}};
  for (DataType dtype : {DataType::kF32, DataType::kBF16})
    for (int round = 0; round < 3; ++round)
      for (const Call& c : kCalls) {
        const size_t es = tpcomm::dataTypeSize(dtype), bytes = c.count * es;
        SCOPED_TRACE(std::string(name(dtype)) + " count=" + std::to_string(c.count) + " round " +
                     std::to_string(round));
        std::vector<std::vector<uint8_t>> inputs;
        for (int r = 0; r < n; ++r)
          inputs.push_back(makeHost(dtype, c.count, [&](size_t i) { return intInput(r, i, round + c.count); }));
        const std::vector<uint8_t> ref = reference(inputs, dtype, ReduceOp::kSum, c.count);
        std::vector<void*> in(n), out(n);
        for (int r = 0; r < n; ++r) {
          CUDA_OK(cudaSetDevice(g->devices[r]));
          CUDA_OK(cudaMalloc(&in[r], bytes));
          CUDA_OK(cudaMalloc(&out[r], bytes));
          CUDA_OK(cudaMemsetAsync(out[r], 0xff, bytes, g->streams[r]));
          CUDA_OK(cudaMemcpyAsync(in[r], inputs[r].data(), bytes, cudaMemcpyHostToDevice, g->streams[r]));
        }
        for (int r = 0; r < n; ++r) {
          ASSERT_EQ(g->comms[r]->allReduce(in[r], out[r], c.count, dtype, ReduceOp::kSum, g->streams[r]), Status::kOk)
              << "rank " << r << ": " << tpcomm::lastErrorMessage();
          const std::string ran = g->comms[r]->lastAlgorithm();
          if (ran.size() < 4 || ran.compare(ran.size() - 4, 4, "_p2p") != 0)  // the whole group falls back alike
            GTEST_SKIP() << "no cuda_p2p transport between these GPUs (" << ran << " ran)";
          EXPECT_EQ(ran, c.algo) << "rank " << r;
        }
        for (int r = 0; r < n; ++r) {
          std::vector<uint8_t> got;
          drainAndReadBack(*g, r, out[r], bytes, &got);
          if (HasFatalFailure()) return;
          EXPECT_EQ(firstMismatch(got, ref, es), -1) << "rank " << r;
          cudaFree(in[r]);
          cudaFree(out[r]);
        }
      }
}

}  // namespace
}  // namespace tpcomm_test
