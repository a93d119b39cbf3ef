// Faults on the GPU paths (issue 21, items 13, 14, 16, 17), each a case that failed before its
// fix. Two ranks from createGroup: two GPUs, or both on GPU 0 where only one is lent
// (rankDevices(), TPCOMM_ALLOW_SHARED_DEVICE=1): the protocols are the same either way.
//   - a rank held back past the timeout by a spin kernel: its peer times out, and every later
//     call and graph replay on either rank either produces the right value or leaves its output
//     untouched, and reports kTimeout (the poison word);
//   - calls of one communicator alternating between two streams with no user synchronisation;
//   - a kernel launched with PDL behind a long kernel: the wait for that kernel is not counted
//     against the timeout;
//   - +-0 inputs: every algorithm gives +0 (the zero rule) on every rank, bitwise.
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

// Item 13: rank 1 is held 400 ms by a spin kernel, the timeout is 200 ms. Rank 0 times out and
// poisons both ranks; rank 1's late kernel must do nothing. Then 20 eager calls and 20 replays
// of graphs captured before the fault: every output is either untouched (the poison pattern) or
// right, never a wrong value, and both ranks report kTimeout.
TEST_P(GpuFault, LateRankThenCallsAndReplaysNeverWrong) {
  const std::string algo = GetParam();
  const size_t count = 4096;
  const DataType dt = DataType::kF32;
  auto g = makeRanks(algo, 200, count * 4);
  ASSERT_NE(g, nullptr);
  std::vector<std::vector<uint8_t>> inputs;
  for (int r = 0; r < 2; ++r) {
    inputs.push_back(makeHost(dt, count, [&](size_t i) { return intInput(r, i, 3); }));
    upload(*g, r, inputs[r]);
  }
  const auto ref = reference(inputs, dt, ReduceOp::kSum, count);
  // A graph per rank, captured while the communicator is sound.
  std::vector<cudaGraphExec_t> execs(2, nullptr);
  for (int r = 0; r < 2; ++r) {
    cudaSetDevice(g->devices[r]);
    cudaGraph_t graph;
    ASSERT_EQ(cudaStreamBeginCapture(g->streams[r], cudaStreamCaptureModeThreadLocal), cudaSuccess);
    ASSERT_EQ(g->comms[r]->allReduce(g->in[r], g->out[r], count, dt, ReduceOp::kSum, g->streams[r]), Status::kOk);
    ASSERT_EQ(cudaStreamEndCapture(g->streams[r], &graph), cudaSuccess);
    ASSERT_EQ(cudaGraphInstantiate(&execs[r], graph, 0), cudaSuccess);
    cudaGraphDestroy(graph);
  }
  // One sound call first: the replays below must not pass for it.
  poison(*g);
  for (int r = 0; r < 2; ++r) ASSERT_EQ(cudaGraphLaunch(execs[r], g->streams[r]), cudaSuccess);
  for (int r = 0; r < 2; ++r) {
    cudaSetDevice(g->devices[r]);
    ASSERT_EQ(cudaStreamSynchronize(g->streams[r]), cudaSuccess);
    EXPECT_EQ(download(*g, r, g->out[r]), ref) << "rank " << r << ", before the fault";
  }
  // The fault.
  poison(*g);
  cudaSetDevice(g->devices[1]);
  spinKernel<<<1, 32, 0, g->streams[1]>>>(400ull * 1000 * 1000, 0);
  for (int r = 0; r < 2; ++r)
    ASSERT_EQ(g->comms[r]->allReduce(g->in[r], g->out[r], count, dt, ReduceOp::kSum, g->streams[r]), Status::kOk);
  for (int r = 0; r < 2; ++r) {
    cudaSetDevice(g->devices[r]);
    ASSERT_EQ(cudaStreamSynchronize(g->streams[r]), cudaSuccess);
  }
  const std::vector<uint8_t> untouched(g->bytes, 0xff);
  auto rightOrUntouched = [&](const char* when) {
    for (int r = 0; r < 2; ++r) {
      std::vector<uint8_t> out = download(*g, r, g->out[r]);
      EXPECT_TRUE(out == ref || out == untouched) << "rank " << r << " " << when << ": a wrong value (first "
                                                  << firstMismatch(out, ref, 4) << ")";
    }
  };
  rightOrUntouched("in the faulty call");
  EXPECT_EQ(g->comms[0]->checkError(), Status::kTimeout);
  EXPECT_NE(std::string(tpcomm::lastErrorMessage()).find("rank 1"), std::string::npos) << tpcomm::lastErrorMessage();
  EXPECT_EQ(g->comms[1]->checkError(), Status::kTimeout) << "the late rank must learn of the timeout too";
  // Later eager calls are refused; replays run but do nothing.
  for (int i = 0; i < 20; ++i) {
    poison(*g);
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(g->comms[r]->allReduce(g->in[r], g->out[r], count, dt, ReduceOp::kSum, g->streams[r]),
                Status::kTimeout);
      ASSERT_EQ(cudaGraphLaunch(execs[r], g->streams[r]), cudaSuccess);
    }
    for (int r = 0; r < 2; ++r) {
      cudaSetDevice(g->devices[r]);
      ASSERT_EQ(cudaStreamSynchronize(g->streams[r]), cudaSuccess) << "a replay did not end";
    }
    rightOrUntouched("in a later replay");
  }
  for (auto e : execs) cudaGraphExecDestroy(e);
}

// Item 14: one communicator per rank, calls alternating between two streams, no user
// synchronisation between them: every result right.
TEST_P(GpuFault, TwoStreamsAreOrdered) {
  const std::string algo = GetParam();
  const size_t count = 8192;
  const DataType dt = DataType::kBF16;
  auto g = makeRanks(algo, 0, count * 2);
  ASSERT_NE(g, nullptr);
  std::vector<cudaStream_t> second(2);
  const int iters = 200;
  std::vector<std::vector<void*>> outs(2);
  std::vector<std::vector<uint8_t>> inputs;
  for (int r = 0; r < 2; ++r) {
    inputs.push_back(makeHost(dt, count, [&](size_t i) { return intInput(r, i, 1); }));
    upload(*g, r, inputs[r]);
    cudaSetDevice(g->devices[r]);
    ASSERT_EQ(cudaStreamCreateWithFlags(&second[r], cudaStreamNonBlocking), cudaSuccess);
    for (int i = 0; i < iters; ++i) {
      void* p;
      ASSERT_EQ(cudaMalloc(&p, g->bytes), cudaSuccess);
      ASSERT_EQ(cudaMemset(p, 0xff, g->bytes), cudaSuccess);
      outs[r].push_back(p);
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  const auto ref = reference(inputs, dt, ReduceOp::kSum, count);
  for (int i = 0; i < iters; ++i)
    for (int r = 0; r < 2; ++r) {
      cudaStream_t s = i % 2 ? second[r] : g->streams[r];
      ASSERT_EQ(g->comms[r]->allReduce(g->in[r], outs[r][i], count, dt, ReduceOp::kSum, s), Status::kOk)
          << tpcomm::lastErrorMessage();
    }
  for (int r = 0; r < 2; ++r) {
    cudaSetDevice(g->devices[r]);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(g->comms[r]->checkError(), Status::kOk) << tpcomm::lastErrorMessage();
    int wrong = 0;
    for (int i = 0; i < iters; ++i) wrong += download(*g, r, outs[r][i]) != ref;
    EXPECT_EQ(wrong, 0) << "rank " << r << ": calls with a wrong result";
    for (void* p : outs[r]) cudaFree(p);
    cudaStreamDestroy(second[r]);
  }
}

// Item 16: a kernel that lets its dependents start at once, then runs 3x the timeout; the
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

// Item 7 on the GPU paths (TPCOMM_CHECK_CALLS=1, set by the tests' main): rank 1 passes half
// the count (then another dtype, then another op): both ranks' kernels see the other's call
// signature, leave before touching data, and both report kInvalidArgument naming the other.
TEST_P(GpuFault, MismatchedCallsAreCaughtOnTheGpu) {
  const std::string algo = GetParam();
  struct Variant {
    const char* what;
    size_t count1;
    DataType dt1;
    ReduceOp op1;
  };
  const Variant variants[] = {{"half the count on rank 1", 2048, DataType::kF32, ReduceOp::kSum},
                              {"f16 on rank 1", 4096, DataType::kF16, ReduceOp::kSum},
                              {"max on rank 1", 4096, DataType::kF32, ReduceOp::kMax}};
  for (const Variant& v : variants) {
    SCOPED_TRACE(v.what);
    auto g = makeRanks(algo, 2000, 4096 * 4);
    ASSERT_NE(g, nullptr);
    poison(*g);
    const std::vector<uint8_t> untouched(g->bytes, 0xff);
    ASSERT_EQ(g->comms[0]->allReduce(g->in[0], g->out[0], 4096, DataType::kF32, ReduceOp::kSum, g->streams[0]),
              Status::kOk);
    ASSERT_EQ(g->comms[1]->allReduce(g->in[1], g->out[1], v.count1, v.dt1, v.op1, g->streams[1]), Status::kOk);
    for (int r = 0; r < 2; ++r) {
      cudaSetDevice(g->devices[r]);
      ASSERT_EQ(cudaStreamSynchronize(g->streams[r]), cudaSuccess);
      EXPECT_EQ(g->comms[r]->checkError(), Status::kInvalidArgument) << "rank " << r << ": " << tpcomm::lastErrorMessage();
      EXPECT_NE(std::string(tpcomm::lastErrorMessage()).find(r == 0 ? "rank 1" : "rank 0"), std::string::npos)
          << tpcomm::lastErrorMessage();
      EXPECT_EQ(download(*g, r, g->out[r]), untouched) << "rank " << r << " wrote its output";
    }
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
      ASSERT_EQ(firstMismatch(got, want, es), -1) << (rs ? "reduce-scatter" : "all-gather") << " call " << call
                                                  << ", rank " << r << ", late rank " << late;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(P2p, HalvesSkew, testing::Values("ll_p2p", "twoshot_p2p"));

// Item 17: +0.0 and -0.0 in every combination across the two ranks, every dtype and op, every
// algorithm: the result is +0.0 everywhere (the zero rule), the same bits on both ranks, and the
// host reference's.
class SignedZeros : public testing::TestWithParam<std::tuple<const char*, DataType, ReduceOp>> {};

TEST_P(SignedZeros, EveryAlgorithmGivesPositiveZero) {
  if (rankDevices().size() < 2) GTEST_SKIP() << "needs 2 ranks, found " << gpuCount() << " GPUs";
  auto [algo, dt, op] = GetParam();
  const size_t count = 4 * 1000 + 3;  // whole packs and a partial one
  auto g = makeRanks(algo, 0, count * tpcomm::dataTypeSize(dt));
  ASSERT_NE(g, nullptr);
  std::vector<std::vector<uint8_t>> inputs;
  for (int r = 0; r < 2; ++r) {
    // Element i: rank 0 has the sign of bit 0 of i, rank 1 of bit 1.
    inputs.push_back(makeHost(dt, count, [&](size_t i) { return ((i >> r) & 1) ? -0.0f : 0.0f; }));
    upload(*g, r, inputs[r]);
  }
  poison(*g);
  for (int r = 0; r < 2; ++r)
    ASSERT_EQ(g->comms[r]->allReduce(g->in[r], g->out[r], count, dt, op, g->streams[r]), Status::kOk);
  const std::vector<uint8_t> zeros(g->bytes, 0);
  EXPECT_EQ(reference(inputs, dt, op, count), zeros) << "the host reference keeps a -0.0";
  for (int r = 0; r < 2; ++r) {
    cudaSetDevice(g->devices[r]);
    ASSERT_EQ(cudaStreamSynchronize(g->streams[r]), cudaSuccess);
    std::vector<uint8_t> out = download(*g, r, g->out[r]);
    EXPECT_EQ(firstMismatch(out, zeros, tpcomm::dataTypeSize(dt)), -1) << "rank " << r << " ran "
                                                                       << g->comms[r]->lastAlgorithm();
  }
}

INSTANTIATE_TEST_SUITE_P(All, SignedZeros,
                         testing::Combine(testing::Values("lamport_p2p", "oneshot_p2p", "twoshot_p2p", "staged_host"),
                                          testing::Values(DataType::kF32, DataType::kF16, DataType::kBF16),
                                          testing::Values(ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin)));

// Item 19: every block of a call must be resident at once (ranks spin on each other). A grid
// that cannot be (TPCOMM_STAGED_BLOCKS 1024 per role, x2 roles, on GPUs that hold about one of
// tpcomm's heaviest blocks per SM) is refused at create on every rank, naming the parameter,
// instead of deadlocking until the timeout at the first call.
TEST(Residency, CreateRefusesAGridThatCannotBeResident) {
  setenv("TPCOMM_STAGED_BLOCKS", "1024", 1);
  tpcomm::reloadParams();
  Config cfg;
  cfg.algo = "staged_host";
  std::vector<std::unique_ptr<Communicator>> comms;
  const Status s = Communicator::createGroup(rankDevices(), cfg, &comms);
  const std::string msg = tpcomm::lastErrorMessage();
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
