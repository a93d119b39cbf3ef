// GPU tests that need one GPU only, so that a 1-GPU machine checks something: one-rank
// communicators (createGroup({0})) on ring_nccl, staged_host, copy_local and auto. Over one rank every
// collective is the identity (but for the zero rule: a reduction reads -0.0 as +0.0, OneRankZeros;
// the inputs elsewhere have no -0.0), so each output must equal its input bit for bit: out of place the
// output is poisoned first, so the call must write it; in place the identity leaves the buffer
// as it was, so those cases only check that nothing is corrupted. Eager and under CUDA-graph
// replay; the fused residual + RMSNorm call must give the host path's bits. A forced algorithm
// that cannot run a call (staged_host under capture, or for allGather on GPU ranks) falls back
// to the next candidate by cost, copy_local, and lastAlgorithm() says so.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "gpu_allreduce_util.h"
#include "unit/fused_rmsnorm_check.h"

namespace tpcomm_test {
namespace {

using tpcomm::Communicator;
using tpcomm::Config;
using tpcomm::Status;

constexpr DataType kTypes[] = {DataType::kF32, DataType::kF16, DataType::kBF16};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin};
constexpr size_t kCounts[] = {1, 7, 4097, (1u << 20) + 3};

struct OneRank {
  std::unique_ptr<RankGroup> group;
  Communicator* comm = nullptr;
  cudaStream_t stream = nullptr;
};

// One communicator per algorithm on GPU 0, kept for the whole program.
OneRank* oneRank(const std::string& algo) {
  static std::map<std::string, std::unique_ptr<OneRank>> made;
  auto it = made.find(algo);
  if (it != made.end()) return it->second.get();
  Config cfg;
  cfg.algo = algo == "auto" ? "" : algo;
  auto o = std::make_unique<OneRank>();
  o->group = makeRankGroup(cfg, algo, false, {0});
  if (!o->group) return nullptr;
  o->comm = o->group->comms[0].get();
  o->stream = o->group->streams[0];
  return (made[algo] = std::move(o)).get();
}

struct DevBuf {
  void* p = nullptr;
  explicit DevBuf(size_t bytes) {
    if (cudaMalloc(&p, bytes) != cudaSuccess) p = nullptr;
  }
  ~DevBuf() { cudaFree(p); }
};

std::vector<uint8_t> download(const void* d, size_t bytes) {
  std::vector<uint8_t> h(bytes);
  if (cudaMemcpy(h.data(), d, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) h.assign(bytes, 0xEE);
  return h;
}

// Uploads `in` (count elements) to a device buffer, poisons a separate output unless in place,
// runs one all-reduce on o's stream, eagerly or as 3 replays of a captured graph (each replay
// re-uploads and re-poisons first, so the graph must rewrite the output), and reads the output
// back into *out. Failures are fatal gtest failures (check HasFatalFailure() after).
void allReduceOnce(OneRank* o, const std::vector<uint8_t>& in, size_t count, DataType dt, ReduceOp op, bool inPlace,
                   bool graph, std::vector<uint8_t>* out) {
  const size_t bytes = count * tpcomm::dataTypeSize(dt);
  DevBuf send(bytes), recvBuf(bytes);
  ASSERT_TRUE(send.p && recvBuf.p);
  void* recv = inPlace ? send.p : recvBuf.p;
  // On the communicator's stream: a legacy-stream memset would race the non-blocking stream.
  auto prepare = [&] {
    CUDA_OK(cudaMemcpyAsync(send.p, in.data(), bytes, cudaMemcpyHostToDevice, o->stream));
    if (!inPlace) CUDA_OK(cudaMemsetAsync(recvBuf.p, 0xff, bytes, o->stream));
  };
  prepare();
  if (!graph) {
    ASSERT_EQ(o->comm->allReduce(send.p, recv, count, dt, op, o->stream), Status::kOk) << tpcomm::lastErrorMessage();
  } else {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CUDA_OK(cudaStreamBeginCapture(o->stream, cudaStreamCaptureModeRelaxed));
    Status s = o->comm->allReduce(send.p, recv, count, dt, op, o->stream);
    CUDA_OK(cudaStreamEndCapture(o->stream, &g));
    ASSERT_EQ(s, Status::kOk) << tpcomm::lastErrorMessage();
    CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
    for (int rep = 0; rep < 3; ++rep) {
      prepare();
      CUDA_OK(cudaGraphLaunch(ge, o->stream));
    }
    CUDA_OK(cudaStreamSynchronize(o->stream));
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
  }
  CUDA_OK(cudaStreamSynchronize(o->stream));
  ASSERT_EQ(o->comm->checkError(), Status::kOk) << tpcomm::lastErrorMessage();
  *out = download(recv, bytes);
}

class OneRankAllReduce
    : public testing::TestWithParam<std::tuple<const char*, DataType, ReduceOp, size_t, bool, bool>> {};

TEST_P(OneRankAllReduce, OutputIsTheInputBitForBit) {
  const auto [algo, dt, op, count, inPlace, graph] = GetParam();
  OneRank* o = oneRank(algo);
  ASSERT_NE(o, nullptr);
  CUDA_OK(cudaSetDevice(0));
  const size_t es = tpcomm::dataTypeSize(dt);
  const std::vector<uint8_t> in = makeHost(dt, count, [&](size_t i) { return intInput(0, i, count); });
  std::vector<uint8_t> out;
  allReduceOnce(o, in, count, dt, op, inPlace, graph, &out);
  if (HasFatalFailure()) return;
  // auto over one rank: copy_local (a copy is all a one-rank collective is); staged_host under
  // capture falls back to the next by cost, copy_local too (its sequence numbers are host-side).
  const std::string ran = o->comm->lastAlgorithm(), want = std::string(algo);
  if (want == "auto")
    EXPECT_EQ(ran, "copy_local");
  else
    EXPECT_EQ(ran, want == "staged_host" && graph ? "copy_local" : want);
  long long bad = firstMismatch(out, in, es);
  EXPECT_EQ(bad, -1) << "element " << bad << ": got " << tpcomm::loadAsFloat(out.data(), bad, dt) << ", input "
                     << tpcomm::loadAsFloat(in.data(), bad, dt);
}

INSTANTIATE_TEST_SUITE_P(All, OneRankAllReduce,
                         testing::Combine(testing::Values("ring_nccl", "staged_host", "copy_local", "auto"),
                                          testing::ValuesIn(kTypes), testing::ValuesIn(kOps),
                                          testing::ValuesIn(kCounts), testing::Bool(), testing::Bool()));

// reduceScatter and allGather over one rank: the identity too, a copy (copy_local). staged_host on
// GPU ranks is all-reduce only, so with it forced they fall back to copy_local as well.
TEST(OneRank, ReduceScatterAndAllGatherAreTheIdentity) {
  for (const char* algo : {"auto", "staged_host"}) {
    OneRank* o = oneRank(algo);
    ASSERT_NE(o, nullptr);
    CUDA_OK(cudaSetDevice(0));
    const size_t count = 100003, bytes = count * 2;
    const std::vector<uint8_t> in = makeHost(DataType::kBF16, count, [](size_t i) { return intInput(0, i, 3); });
    DevBuf send(bytes), recv(bytes);
    ASSERT_TRUE(send.p && recv.p);
    for (const char* what : {"reduceScatter", "allGather"}) {
      SCOPED_TRACE(std::string(algo) + " " + what);
      CUDA_OK(cudaMemcpyAsync(send.p, in.data(), bytes, cudaMemcpyHostToDevice, o->stream));
      CUDA_OK(cudaMemsetAsync(recv.p, 0xff, bytes, o->stream));
      Status s = std::string(what) == "reduceScatter"
                     ? o->comm->reduceScatter(send.p, recv.p, count, DataType::kBF16, ReduceOp::kSum, o->stream)
                     : o->comm->allGather(send.p, recv.p, count, DataType::kBF16, o->stream);
      ASSERT_EQ(s, Status::kOk) << tpcomm::lastErrorMessage();
      CUDA_OK(cudaStreamSynchronize(o->stream));
      EXPECT_STREQ(o->comm->lastAlgorithm(), "copy_local");
      EXPECT_EQ(firstMismatch(download(recv.p, bytes), in, 2), -1);
    }
  }
}

// The zero rule over one rank (issue 34 item 5; docs/determinism.md): a -0.0 input reads as
// +0.0, in place and out of place, eager and replayed, as on every other size. Expected: the
// host's one-source reduction (x + 0 in fp32, rounded once). ring_nccl makes no such promise.
class OneRankZeros : public testing::TestWithParam<std::tuple<const char*, DataType, ReduceOp, bool, bool>> {};

TEST_P(OneRankZeros, NegativeZeroComesOutPositive) {
  const auto [algo, dt, op, inPlace, graph] = GetParam();
  OneRank* o = oneRank(algo);
  ASSERT_NE(o, nullptr);
  CUDA_OK(cudaSetDevice(0));
  const size_t count = 4099, es = tpcomm::dataTypeSize(dt);
  const std::vector<uint8_t> in = makeHost(dt, count, [](size_t i) {
    return i % 3 == 0 ? -0.0f : i % 3 == 1 ? 0.0f : -2.0f;
  });
  std::vector<uint8_t> want(count * es), out;
  const void* src = in.data();
  tpcomm::hostReduce(want.data(), &src, 1, count, dt, op);
  allReduceOnce(o, in, count, dt, op, inPlace, graph, &out);
  if (HasFatalFailure()) return;
  const long long bad = firstMismatch(out, want, es);
  EXPECT_EQ(bad, -1) << o->comm->lastAlgorithm() << ": element " << bad << " (input "
                     << tpcomm::loadAsFloat(in.data(), bad < 0 ? 0 : bad, dt) << ")";
}

INSTANTIATE_TEST_SUITE_P(All, OneRankZeros,
                         testing::Combine(testing::Values("staged_host", "copy_local", "auto"),
                                          testing::ValuesIn(kTypes), testing::ValuesIn(kOps), testing::Bool(),
                                          testing::Bool()));

class OneRankFused : public testing::TestWithParam<std::tuple<const char*, DataType, size_t, size_t>> {};

// Over one rank the fused call is residual += in, out = rmsnorm(residual) * weight: the host
// path's bits (hostReduce of one input, hostResidualRmsNorm).
TEST_P(OneRankFused, MatchesTheHostPath) {
  const auto [algo, dt, rows, hidden] = GetParam();
  OneRank* o = oneRank(algo);
  ASSERT_NE(o, nullptr);
  CUDA_OK(cudaSetDevice(0));
  const float eps = 1e-6f;
  const tpcomm::fused_test::Problem pb(1, rows, hidden, dt, eps);
  const size_t count = rows * hidden, es = tpcomm::dataTypeSize(dt), bytes = count * es;
  std::vector<char> x = tpcomm::fused_test::poisoned(count, dt), res = pb.residual,
                    out = tpcomm::fused_test::poisoned(count, dt);
  const void* src = pb.inputs[0].data();
  tpcomm::hostReduce(x.data(), &src, 1, count, dt, ReduceOp::kSum);
  tpcomm::hostResidualRmsNorm(x.data(), res.data(), pb.weight.data(), eps, out.data(), rows, hidden, dt);
  DevBuf in(bytes), residual(bytes), weight(hidden * es), dout(bytes);
  ASSERT_TRUE(in.p && residual.p && weight.p && dout.p);
  CUDA_OK(cudaMemcpy(in.p, pb.inputs[0].data(), bytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(residual.p, pb.residual.data(), bytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(weight.p, pb.weight.data(), hidden * es, cudaMemcpyHostToDevice));
  CUDA_OK(cudaDeviceSynchronize());  // pageable set-up copies may still be in flight
  CUDA_OK(cudaMemsetAsync(dout.p, 0xff, bytes, o->stream));
  ASSERT_EQ(o->comm->allReduceResidualRmsNorm(in.p, residual.p, weight.p, eps, dout.p, rows, hidden, dt, o->stream),
            Status::kOk)
      << tpcomm::lastErrorMessage();
  CUDA_OK(cudaStreamSynchronize(o->stream));
  ASSERT_EQ(o->comm->checkError(), Status::kOk) << tpcomm::lastErrorMessage();
  const std::vector<uint8_t> gotOut = download(dout.p, bytes), gotRes = download(residual.p, bytes);
  EXPECT_EQ(firstMismatch(gotOut, std::vector<uint8_t>(out.begin(), out.end()), es), -1) << "out";
  EXPECT_EQ(firstMismatch(gotRes, std::vector<uint8_t>(res.begin(), res.end()), es), -1) << "residual";
  std::string first;
  EXPECT_EQ(pb.countOutOfTolerance(gotRes.data(), gotOut.data(), &first), 0u) << first;
}

INSTANTIATE_TEST_SUITE_P(All, OneRankFused,
                         testing::Combine(testing::Values("ring_nccl", "staged_host", "copy_local", "auto"),
                                          testing::ValuesIn(kTypes), testing::Values<size_t>(1, 7, 64),
                                          testing::Values<size_t>(128, 5120)));

}  // namespace
}  // namespace tpcomm_test
