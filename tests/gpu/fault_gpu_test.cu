// Faults on the GPU paths that need two ranks only (the matrix over every algorithm and rank
// count is fault_matrix_gpu_test.cu), each a case that failed before its fix:
//   - a kernel launched with PDL behind a long kernel: the wait for that kernel is not counted
//     against the timeout;
//   - reduce-scatter and all-gather with a rank 3 ms late, 40 calls;
//   - a grid that cannot be resident is refused at create.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/params.h"
#include "gpu_allreduce_util.h"

namespace tpcomm_test {
namespace {

using tpcomm::Communicator;
using tpcomm::Config;
using tpcomm::Status;

// Spins for `ns` nanoseconds. With `releaseDependents` it lets the next kernel of its stream
// (launched with programmatic dependent launch) start at once and wait in griddepcontrol.wait.
__global__ void spinKernel(uint64_t ns, int releaseDependents) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (releaseDependents) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  uint64_t t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

// Two ranks forced onto `algo`, with in/out buffers of `bytes` each. Aborted at the end: some
// tests leave their communicators failed on purpose.
struct Ranks : RankGroup {
  std::vector<void*> in, out;
  size_t bytes = 0;
  ~Ranks() {
    for (auto& c : comms)
      if (c) c->abort();
    for (size_t r = 0; r < in.size(); ++r) {
      cudaSetDevice(devices[r]);
      cudaFree(in[r]);
      cudaFree(out[r]);
    }
  }
};

std::unique_ptr<Ranks> makeRanks(const std::string& algo, int timeoutMs, size_t bytes) {
  Config cfg;
  cfg.algo = algo == "auto" ? "" : algo;
  cfg.timeoutMs = timeoutMs;
  cfg.setupTimeoutMs = 60000;  // create's exchanges wait through CUDA set-up and the probe
  std::vector<int> devices = rankDevices();
  devices.resize(2);
  std::unique_ptr<RankGroup> base = makeRankGroup(cfg, algo, false, devices);
  if (!base) return nullptr;
  auto g = std::make_unique<Ranks>();
  g->devices = base->devices;
  g->comms = std::move(base->comms);
  g->streams = std::move(base->streams);
  base->streams.clear();  // now g's to destroy
  g->bytes = bytes;
  for (int r = 0; r < 2; ++r) {
    cudaSetDevice(g->devices[r]);
    void *a, *b;
    if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess) {
      ADD_FAILURE() << "cudaMalloc failed";
      return nullptr;
    }
    g->in.push_back(a);
    g->out.push_back(b);
  }
  return g;
}

void upload(Ranks& g, int r, const std::vector<uint8_t>& host) {
  cudaSetDevice(g.devices[r]);
  ASSERT_EQ(cudaMemcpy(g.in[r], host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
}

std::vector<uint8_t> download(Ranks& g, int r, void* p) {
  std::vector<uint8_t> h(g.bytes);
  cudaSetDevice(g.devices[r]);
  EXPECT_EQ(cudaMemcpy(h.data(), p, g.bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

void poison(Ranks& g) {
  for (int r = 0; r < 2; ++r) {
    cudaSetDevice(g.devices[r]);
    ASSERT_EQ(cudaMemset(g.out[r], 0xff, g.bytes), cudaSuccess);
  }
  for (int r = 0; r < 2; ++r) {
    cudaSetDevice(g.devices[r]);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
}

class GpuFault : public testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (rankDevices().size() < 2) GTEST_SKIP() << "needs 2 ranks, found " << gpuCount() << " GPUs";
  }
};

// A kernel that lets its dependents start at once, then runs 3x the timeout; the
// all-reduce behind it (PDL) waits in griddepcontrol.wait the whole time. Its clock must start
// after that wait: no timeout, right result.
TEST_P(GpuFault, PdlWaitIsNotCountedAgainstTheTimeout) {
  const std::string algo = GetParam();
  const size_t count = 2048;
  const DataType dt = DataType::kF32;
  auto g = makeRanks(algo, 150, count * 4);
  ASSERT_NE(g, nullptr);
  std::vector<std::vector<uint8_t>> inputs;
  for (int r = 0; r < 2; ++r) {
    inputs.push_back(makeHost(dt, count, [&](size_t i) { return intInput(r, i, 4); }));
    upload(*g, r, inputs[r]);
  }
  poison(*g);
  // Rank 0's all-reduce starts at once (PDL) and waits 450 ms for its spin kernel; rank 1's
  // starts after a plain 550 ms spin. Counted from griddepcontrol.wait, rank 0 then waits ~100
  // ms for rank 1, inside the 150 ms timeout; counted from the launch it would wait 550 ms.
  for (int r = 0; r < 2; ++r) {
    cudaSetDevice(g->devices[r]);
    spinKernel<<<1, 32, 0, g->streams[r]>>>(r == 0 ? 450ull * 1000 * 1000 : 550ull * 1000 * 1000, r == 0 ? 1 : 0);
    ASSERT_EQ(g->comms[r]->allReduce(g->in[r], g->out[r], count, dt, ReduceOp::kSum, g->streams[r]), Status::kOk);
  }
  for (int r = 0; r < 2; ++r) {
    cudaSetDevice(g->devices[r]);
    ASSERT_EQ(cudaStreamSynchronize(g->streams[r]), cudaSuccess);
    EXPECT_EQ(g->comms[r]->checkError(), Status::kOk) << tpcomm::lastErrorMessage();
    EXPECT_EQ(download(*g, r, g->out[r]), reference(inputs, dt, ReduceOp::kSum, count)) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(P2p, GpuFault, testing::Values("lamport_p2p", "oneshot_p2p", "twoshot_p2p"));

// Reduce-scatter and all-gather under skew: each call, one rank (alternating) starts 3 ms late
// behind a spin kernel, so the other's pushes land and its polls spin long before the late rank
// has pushed anything (ll_p2p: the flags in the lines; twoshot_p2p: its barrier). 40 calls
// alternating the two collectives with new exact inputs each: every output right on both ranks.
class HalvesSkew : public testing::TestWithParam<const char*> {};

TEST_P(HalvesSkew, LateRankStillGivesTheRightPieces) {
  if (rankDevices().size() < 2) GTEST_SKIP() << "needs 2 ranks, found " << gpuCount() << " GPUs";
  const std::string algo = GetParam();
  const size_t count = 1000 + 3;  // per piece: odd, so rank 1's piece starts unaligned
  const DataType dt = DataType::kBF16;
  const size_t es = tpcomm::dataTypeSize(dt);
  auto g = makeRanks(algo, 2000, count * 2 * es);
  ASSERT_NE(g, nullptr);
  for (int call = 0; call < 40 && !HasFatalFailure(); ++call) {
    const bool rs = call % 2 == 0;
    std::vector<std::vector<uint8_t>> inputs;
    for (int r = 0; r < 2; ++r) {
      inputs.push_back(makeHost(dt, rs ? 2 * count : count, [&](size_t i) { return intInput(r, i, call); }));
      upload(*g, r, inputs[r]);
    }
    poison(*g);
    const int late = (call / 2) % 2;
    cudaSetDevice(g->devices[late]);
    spinKernel<<<1, 32, 0, g->streams[late]>>>(3ull * 1000 * 1000, 0);
    for (int r = 0; r < 2; ++r) {
      cudaSetDevice(g->devices[r]);
      const Status s = rs ? g->comms[r]->reduceScatter(g->in[r], g->out[r], count, dt, ReduceOp::kSum, g->streams[r])
                          : g->comms[r]->allGather(g->in[r], g->out[r], count, dt, g->streams[r]);
      ASSERT_EQ(s, Status::kOk) << tpcomm::lastErrorMessage();
    }
    for (int r = 0; r < 2; ++r) {
      cudaSetDevice(g->devices[r]);
      ASSERT_EQ(cudaStreamSynchronize(g->streams[r]), cudaSuccess);
      ASSERT_EQ(g->comms[r]->checkError(), Status::kOk) << tpcomm::lastErrorMessage();
      EXPECT_STREQ(g->comms[r]->lastAlgorithm(), algo.c_str());
      std::vector<uint8_t> want;
      if (rs) {
        std::vector<std::vector<uint8_t>> pieces;
        for (const auto& in : inputs)
          pieces.emplace_back(in.begin() + static_cast<long>(r * count * es),
                              in.begin() + static_cast<long>((r + 1) * count * es));
        want = reference(pieces, dt, ReduceOp::kSum, count);
      } else {
        for (const auto& in : inputs) want.insert(want.end(), in.begin(), in.end());
      }
      std::vector<uint8_t> got = download(*g, r, g->out[r]);
      got.resize(want.size());
      ASSERT_EQ(firstMismatch(got, want, es), -1)
          << (rs ? "reduce-scatter" : "all-gather") << " call " << call << ", rank " << r << ", late rank " << late;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(P2p, HalvesSkew, testing::Values("ll_p2p", "twoshot_p2p"));

// Every block of a call must be resident at once (ranks spin on each other). A grid
// that cannot be (TPCOMM_STAGED_BLOCKS 1024 per role, x2 roles, on GPUs that hold about one of
// tpcomm's heaviest blocks per SM) is refused at create on every rank, naming the parameter,
// instead of deadlocking until the timeout at the first call.
TEST(Residency, CreateRefusesAGridThatCannotBeResident) {
  const char* before = std::getenv("TPCOMM_STAGED_BLOCKS");  // the run's setting (shared GPUs)
  const std::string saved = before ? before : "";
  setenv("TPCOMM_STAGED_BLOCKS", "1024", 1);
  tpcomm::reloadParams();
  Config cfg;
  cfg.algo = "staged_host";
  std::vector<std::unique_ptr<Communicator>> comms;
  const Status s = Communicator::createGroup(rankDevices(), cfg, &comms);
  const std::string msg = tpcomm::lastErrorMessage();
  if (before)
    setenv("TPCOMM_STAGED_BLOCKS", saved.c_str(), 1);
  else
    unsetenv("TPCOMM_STAGED_BLOCKS");
  tpcomm::reloadParams();
  EXPECT_EQ(s, Status::kInvalidArgument) << msg;
  EXPECT_NE(msg.find("TPCOMM_STAGED_BLOCKS"), std::string::npos) << msg;
  EXPECT_NE(msg.find("resident"), std::string::npos) << msg;
  for (auto& c : comms)
    if (c) c->abort();
}

}  // namespace
}  // namespace tpcomm_test
