// GPU all-reduce through host memory (staged_host) over every local GPU, driven by one process
// (Communicator::createGroup). Table: algorithm x dtype x op x size x in/out of place. Inputs are
// integers whose exact sums are known, outputs are poisoned (0xFF bytes: NaN) before each run,
// every element of every rank is compared bitwise with the host reference, and all ranks must
// hold identical bits. Plus the bounded-wait guarantee: when one rank skips a call, the others'
// kernels give up after the communicator's timeout (Config::timeoutMs, else TPCOMM_TIMEOUT_MS)
// and checkError() reports kTimeout.
// To test another algorithm with the same table, add its name to kAlgorithms (the call is
// forced through Config::algo; a run that falls back to another algorithm fails the test).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "algos/staged_host/staged_host_ce.h"
#include "gpu_allreduce_util.h"
#include "unit/test_util.h"

namespace tpcomm {
namespace {

// "staged_host/ce": staged_host with TPCOMM_STAGED_COPY_ENGINES=1 (the copy engines move the
// bytes; staged_host_ce.cu), the same table and bound.
const char* const kAlgorithms[] = {"staged_host", "staged_host/ce"};
// The forced algorithm of a parameter, and its environment for the test's length.
const char* algoOf(const char* param) { return std::strncmp(param, "staged_host", 11) == 0 ? "staged_host" : param; }
const char* copyEnginesOf(const char* param) { return std::strstr(param, "/ce") ? "1" : "0"; }
const DataType kDtypes[] = {DataType::kF32, DataType::kF16, DataType::kBF16};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin};
const size_t kSizes[] = {1, 7, 1023, 4096, (1u << 20) + 3, 16u << 20};  // elements
// TPCOMM_TEST_SIZES=quick: 4M + 1 elements instead of 16M (still many staging chunks).
std::vector<size_t> sizes() {
  return tpcomm_test::testSizes({std::begin(kSizes), std::end(kSizes)}, {1, 7, 1023, 4096, (1u << 20) + 3, (4u << 20) + 1});
}

int deviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

// One process driving every local GPU: a communicator, a stream and two buffers per rank.
class GpuGroup {
 public:
  void create(const Config& cfg, size_t maxBytes) {
    // Blocking streams: the kernels start after the set-up copies made on the legacy stream.
    std::unique_ptr<tpcomm_test::RankGroup> g = tpcomm_test::makeRankGroup(cfg, "staged_host", true);
    ASSERT_NE(g, nullptr);
    ranks = std::move(g);
    const int n = ranks->n();
    send.resize(n);
    recv.resize(n);
    for (int r = 0; r < n; ++r) {
      CUDA_OK(cudaSetDevice(ranks->devices[r]));
      CUDA_OK(cudaMalloc(&send[r], maxBytes));
      CUDA_OK(cudaMalloc(&recv[r], maxBytes));
      CUDA_OK(cudaMemset(send[r], 0, maxBytes));
      CUDA_OK(cudaMemset(recv[r], 0, maxBytes));
      CUDA_OK(cudaDeviceSynchronize());
    }
  }
  ~GpuGroup() {
    if (!ranks) return;
    for (auto& c : ranks->comms)
      if (c) c->destroy();
    for (size_t r = 0; r < send.size(); ++r) {
      cudaSetDevice(ranks->devices[r]);
      if (send[r]) cudaFree(send[r]);
      if (recv[r]) cudaFree(recv[r]);
    }
  }
  int size() const { return ranks ? ranks->n() : 0; }

  std::unique_ptr<tpcomm_test::RankGroup> ranks;  // rank r's GPU, communicator and stream
  std::vector<void*> send, recv;
};

// The parameter's algorithm forced, no NCCL, and the communicator's bound (what its kernels use);
// set-up waits get Config::setupTimeoutMs, a generous bound of their own.
Config boundedConfig(const char* param, int boundMs) {
  Config cfg;
  cfg.algo = algoOf(param);
  cfg.useNccl = false;
  cfg.timeoutMs = boundMs;
  cfg.setupTimeoutMs = 60000;
  return cfg;
}

class StagedHostGpu : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (tpcomm_test::rankDevices().size() < 2) GTEST_SKIP() << "needs 2 ranks, found " << deviceCount() << " GPUs";
  }
};

TEST_P(StagedHostGpu, AllReduceBitExactOnEveryRank) {
  const char* algo = algoOf(GetParam());
  test::ScopedEnv copyEngines("TPCOMM_STAGED_COPY_ENGINES", copyEnginesOf(GetParam()));
  Config cfg;
  cfg.algo = algo;
  cfg.useNccl = false;
  GpuGroup g;
  const size_t maxCount = kSizes[sizeof(kSizes) / sizeof(kSizes[0]) - 1];
  g.create(cfg, maxCount * 4);
  if (HasFatalFailure()) return;
  const int n = g.size();
  std::vector<std::vector<char>> inputs(n), outputs(n);
  std::vector<char> expected;
  const uint64_t ceBefore = stagedCopyEngineCalls();

  for (DataType dt : kDtypes)
    for (size_t count : sizes()) {
      const size_t bytes = count * dataTypeSize(dt);
      for (int r = 0; r < n; ++r) {
        inputs[r] = test::makeBuffer(count, dt);
        test::fillInput(inputs[r].data(), count, dt, r);
        outputs[r].resize(bytes);
      }
      for (ReduceOp op : kOps) {
        expected = test::makeBuffer(count, dt);
        for (size_t i = 0; i < count; ++i)
          storeFromFloat(expected.data(), i, dt, static_cast<float>(test::expectedValue(n, i, op)));
        for (bool inPlace : {false, true}) {
          std::string what = std::string(algo) + " " + dataTypeName(dt) + " " + reduceOpName(op) + " count " +
                             std::to_string(count) + (inPlace ? " in place" : " out of place");
          SCOPED_TRACE(what);
          for (int r = 0; r < n; ++r) {
            CUDA_OK(cudaSetDevice(g.ranks->devices[r]));
            CUDA_OK(cudaMemcpy(g.send[r], inputs[r].data(), bytes, cudaMemcpyHostToDevice));
            if (inPlace)
              CUDA_OK(cudaMemcpy(g.recv[r], inputs[r].data(), bytes, cudaMemcpyHostToDevice));
            else
              CUDA_OK(cudaMemset(g.recv[r], 0xFF, bytes));  // poison: NaN in every dtype
            // Inputs and poison in place before any rank starts.
            CUDA_OK(cudaDeviceSynchronize());
          }
          // Every rank enqueues before any waits: the kernels meet through host memory.
          for (int r = 0; r < n; ++r) {
            const void* src = inPlace ? g.recv[r] : g.send[r];
            ASSERT_EQ(g.ranks->comms[r]->allReduce(src, g.recv[r], count, dt, op, g.ranks->streams[r]), Status::kOk)
                << "rank " << r << ": " << lastErrorMessage();
          }
          for (int r = 0; r < n; ++r) {
            CUDA_OK(cudaSetDevice(g.ranks->devices[r]));
            CUDA_OK(cudaStreamSynchronize(g.ranks->streams[r]));
            ASSERT_EQ(g.ranks->comms[r]->checkError(), Status::kOk) << "rank " << r << ": " << lastErrorMessage();
            EXPECT_STREQ(g.ranks->comms[r]->lastAlgorithm(), algo) << "rank " << r << " fell back";
            CUDA_OK(cudaMemcpy(outputs[r].data(), g.recv[r], bytes, cudaMemcpyDeviceToHost));
          }
          for (int r = 0; r < n; ++r) {
            if (std::memcmp(outputs[r].data(), expected.data(), bytes) != 0) {
              std::string first;
              size_t bad = test::countWrong(
                  outputs[r].data(), count, dt, [&](size_t i) { return test::expectedValue(n, i, op); }, &first);
              ADD_FAILURE() << "rank " << r << ": " << bad << " of " << count << " elements wrong, first " << first;
            }
            EXPECT_EQ(std::memcmp(outputs[r].data(), outputs[0].data(), bytes), 0)
                << "rank " << r << " differs from rank 0";
            if (!inPlace) {  // the send buffer is read-only
              std::vector<char> back(bytes);
              CUDA_OK(cudaSetDevice(g.ranks->devices[r]));
              CUDA_OK(cudaMemcpy(back.data(), g.send[r], bytes, cudaMemcpyDeviceToHost));
              EXPECT_EQ(std::memcmp(back.data(), inputs[r].data(), bytes), 0) << "rank " << r << ": send modified";
            }
          }
          if (HasFailure()) return;  // one failing case says enough; the rest would repeat it
        }
      }
    }
  // Every call of the table ran in the mode the parameter names (64 MB at most: 16 chunks of the
  // mode's default 4 MiB, within kCeMaxChunks; run without TPCOMM_STAGED_CHUNK_BYTES set).
  const uint64_t ceCalls = stagedCopyEngineCalls() - ceBefore;
  if (std::strcmp(copyEnginesOf(GetParam()), "1") == 0)
    EXPECT_EQ(ceCalls, static_cast<uint64_t>(n) * 3 * 6 * 3 * 2) << "calls in copy-engine mode";
  else
    EXPECT_EQ(ceCalls, 0u);
}

TEST_P(StagedHostGpu, SkippedPeerYieldsTimeoutWithinTheBound) {
  test::ScopedEnv copyEngines("TPCOMM_STAGED_COPY_ENGINES", copyEnginesOf(GetParam()));
  constexpr int kBoundMs = 500;
  GpuGroup g;
  const size_t count = 1 << 20;
  g.create(boundedConfig(GetParam(), kBoundMs), count * 4);
  if (HasFatalFailure()) return;
  const int n = g.size();
  // Warm up with every rank (loads the kernels, proves the group works).
  for (int r = 0; r < n; ++r)
    ASSERT_EQ(g.ranks->comms[r]->allReduce(g.send[r], g.recv[r], count, DataType::kF32, ReduceOp::kSum, g.ranks->streams[r]),
              Status::kOk)
        << lastErrorMessage();
  for (int r = 0; r < n; ++r) {
    CUDA_OK(cudaSetDevice(g.ranks->devices[r]));
    CUDA_OK(cudaStreamSynchronize(g.ranks->streams[r]));
    ASSERT_EQ(g.ranks->comms[r]->checkError(), Status::kOk) << lastErrorMessage();
  }
  // The last rank skips the next call.
  auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < n - 1; ++r)
    ASSERT_EQ(g.ranks->comms[r]->allReduce(g.send[r], g.recv[r], count, DataType::kF32, ReduceOp::kSum, g.ranks->streams[r]),
              Status::kOk)
        << lastErrorMessage();
  for (int r = 0; r < n - 1; ++r) {
    CUDA_OK(cudaSetDevice(g.ranks->devices[r]));
    CUDA_OK(cudaStreamSynchronize(g.ranks->streams[r]));  // returns: the kernel's waits are bounded
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(g.ranks->comms[r]->checkError(), Status::kTimeout) << "rank " << r << ": " << lastErrorMessage();
    std::string msg = lastErrorMessage();
    // The skipper's host never made the call: its call counter was one behind this rank's.
    EXPECT_NE(msg.find("waiting for rank " + std::to_string(n - 1) + ": rank " + std::to_string(n - 1) +
                       " never made this call (its host is 1 call behind)"),
              std::string::npos)
        << msg;
    EXPECT_GE(ms, 0.9 * kBoundMs) << "rank " << r << " gave up before the bound";
    EXPECT_LE(ms, 2.0 * kBoundMs) << "rank " << r << " took " << ms << " ms for a " << kBoundMs << " ms bound";
  }
  // A communicator that timed out refuses further calls with the same status.
  EXPECT_EQ(g.ranks->comms[0]->allReduce(g.send[0], g.recv[0], count, DataType::kF32, ReduceOp::kSum, g.ranks->streams[0]),
            Status::kTimeout);
}

// A peer that comes late, past the bound, to a call of more chunks than slots: the punctual rank
// times out and (copy-engine mode) keeps copying into slots the late one will read. No rank may
// then report kOk with wrong bits: each either fails the call or holds the exact sum.
TEST_P(StagedHostGpu, LatePeerNeverGetsOkWithWrongBits) {
  test::ScopedEnv copyEngines("TPCOMM_STAGED_COPY_ENGINES", copyEnginesOf(GetParam()));
  // 1 MiB chunks in both modes (the copy-engine mode's default is 4 MiB), so the call reuses slots.
  test::ScopedEnv chunk("TPCOMM_STAGED_CHUNK_BYTES", "1048576");
  constexpr int kBoundMs = 300;
  GpuGroup g;
  const size_t count = 2u << 20;  // f32: 8 MB, 8 one-MB chunks over 4 slots
  g.create(boundedConfig(GetParam(), kBoundMs), count * 4);
  if (HasFatalFailure()) return;
  const int n = g.size();
  const DataType dt = DataType::kF32;
  std::vector<char> expected = test::makeBuffer(count, dt);
  for (size_t i = 0; i < count; ++i)
    storeFromFloat(expected.data(), i, dt, static_cast<float>(test::expectedValue(n, i, ReduceOp::kSum)));
  for (int r = 0; r < n; ++r) {
    std::vector<char> in = test::makeBuffer(count, dt);
    test::fillInput(in.data(), count, dt, r);
    CUDA_OK(cudaSetDevice(g.ranks->devices[r]));
    CUDA_OK(cudaMemcpy(g.send[r], in.data(), count * 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(g.recv[r], 0xFF, count * 4));
    CUDA_OK(cudaDeviceSynchronize());
  }
  const uint64_t ceBefore = stagedCopyEngineCalls();
  // The punctual ranks' calls are accepted. The late rank's may be refused at once with kTimeout:
  // a peer that timed out before it arrived published the failure in the segment's failure word.
  bool lateRefused = false;
  for (int r = 0; r < n; ++r) {
    if (r == n - 1) std::this_thread::sleep_for(std::chrono::milliseconds(kBoundMs + kBoundMs / 2));
    const Status st = g.ranks->comms[r]->allReduce(g.send[r], g.recv[r], count, dt, ReduceOp::kSum, g.ranks->streams[r]);
    if (r == n - 1 && st == Status::kTimeout) {
      lateRefused = true;
      continue;
    }
    ASSERT_EQ(st, Status::kOk) << "rank " << r << ": " << lastErrorMessage();
  }
  // The call ran in the mode the parameter names (8 one-MB chunks: within kCeMaxChunks), on
  // every rank that was not refused.
  const uint64_t ran = static_cast<uint64_t>(lateRefused ? n - 1 : n);
  EXPECT_EQ(stagedCopyEngineCalls() - ceBefore, std::strcmp(copyEnginesOf(GetParam()), "1") == 0 ? ran : 0u)
      << "calls in copy-engine mode";
  int failed = lateRefused ? 1 : 0;
  for (int r = 0; r < (lateRefused ? n - 1 : n); ++r) {
    CUDA_OK(cudaSetDevice(g.ranks->devices[r]));
    CUDA_OK(cudaStreamSynchronize(g.ranks->streams[r]));
    const Status st = g.ranks->comms[r]->checkError();
    if (st != Status::kOk) {
      EXPECT_EQ(st, Status::kTimeout) << "rank " << r << ": " << lastErrorMessage();
      ++failed;
      continue;
    }
    std::vector<char> out(count * 4);
    CUDA_OK(cudaMemcpy(out.data(), g.recv[r], out.size(), cudaMemcpyDeviceToHost));
    EXPECT_EQ(std::memcmp(out.data(), expected.data(), out.size()), 0) << "rank " << r << " reported kOk with wrong bits";
  }
  EXPECT_GE(failed, 1) << "the punctual rank waited " << kBoundMs + kBoundMs / 2 << " ms with a " << kBoundMs
                       << " ms bound and did not time out";
}

INSTANTIATE_TEST_SUITE_P(Algorithms, StagedHostGpu, ::testing::ValuesIn(kAlgorithms),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (c == '/') c = '_';
                           return name;
                         });

}  // namespace
}  // namespace tpcomm
