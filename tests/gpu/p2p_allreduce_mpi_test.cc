// GPU all-reduce tests across processes (mpirun -np 2: one rank per process and GPU, peer
// buffers shared through CUDA IPC). Same inputs and checks as p2p_allreduce_test.cc; ranks
// compare their outputs through a hash gathered over MPI. Exit code 77 (ctest: Skipped) where a
// rank has no GPU of its own.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <map>

#include "gpu_allreduce_util.h"
#include "tpcomm/mpi_bootstrap.h"

namespace tpcomm_test {
namespace {

using tpcomm::Communicator;
using tpcomm::Config;
using tpcomm::Status;

int gRank = 0, gSize = 1;
std::unique_ptr<tpcomm::Bootstrap> gBootstrap;

uint64_t fnv(const std::vector<uint8_t>& v) {
  uint64_t h = 1469598103934665603ull;
  for (uint8_t b : v) h = (h ^ b) * 1099511628211ull;
  return h;
}

std::map<std::string, std::unique_ptr<Communicator>> gComms;  // destroyed before MPI_Finalize

Communicator* commFor(const std::string& algo) {
  auto& comms = gComms;
  auto it = comms.find(algo);
  if (it != comms.end()) return it->second.get();
  Config cfg;
  cfg.algo = algo == "auto" ? "" : algo;
  std::unique_ptr<Communicator> c;
  if (Communicator::create(*gBootstrap, gRank % gpuCount(), cfg, &c) != Status::kOk) {
    ADD_FAILURE() << tpcomm::lastErrorMessage();
    return nullptr;
  }
  return (comms[algo] = std::move(c)).get();
}

class MpiAllReduce : public testing::TestWithParam<std::tuple<const char*, DataType, ReduceOp, size_t, bool, bool>> {};

TEST_P(MpiAllReduce, BitExactAcrossProcesses) {
  auto [algo, dtype, op, count, inPlace, graph] = GetParam();
  Communicator* comm = commFor(algo);
  ASSERT_NE(comm, nullptr);
  const size_t es = tpcomm::dataTypeSize(dtype), bytes = count * es;
  std::vector<std::vector<uint8_t>> inputs;
  for (int r = 0; r < gSize; ++r) inputs.push_back(makeHost(dtype, count, [&](size_t i) { return intInput(r, i, 3); }));
  const auto ref = reference(inputs, dtype, op, count);
  CUDA_OK(cudaSetDevice(comm->device()));
  cudaStream_t st;
  CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  void *in, *out;
  CUDA_OK(cudaMalloc(&in, bytes));
  out = in;
  if (!inPlace) CUDA_OK(cudaMalloc(&out, bytes));
  cudaGraphExec_t exec = nullptr;
  cudaGraph_t graphObj = nullptr;
  if (graph) {
    CUDA_OK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    ASSERT_EQ(comm->allReduce(in, out, count, dtype, op, st), Status::kOk) << tpcomm::lastErrorMessage();
    CUDA_OK(cudaStreamEndCapture(st, &graphObj));
    CUDA_OK(cudaGraphInstantiate(&exec, graphObj, 0));
  }
  for (int round = 0; round < (graph ? 2 : 1); ++round) {
    // Stream-ordered: a pageable cudaMemcpy may return before the data lands.
    if (!inPlace) CUDA_OK(cudaMemsetAsync(out, 0xff, bytes, st));
    CUDA_OK(cudaMemcpyAsync(in, inputs[gRank].data(), bytes, cudaMemcpyHostToDevice, st));
    if (graph)
      CUDA_OK(cudaGraphLaunch(exec, st));
    else
      ASSERT_EQ(comm->allReduce(in, out, count, dtype, op, st), Status::kOk) << tpcomm::lastErrorMessage();
    CUDA_OK(cudaStreamSynchronize(st));
    ASSERT_EQ(comm->checkError(), Status::kOk) << tpcomm::lastErrorMessage();
    std::vector<uint8_t> host(bytes);
    CUDA_OK(cudaMemcpy(host.data(), out, bytes, cudaMemcpyDeviceToHost));
    long long bad = firstMismatch(host, ref, es);
    EXPECT_EQ(bad, -1) << "rank " << gRank << " element " << bad;
    uint64_t mine = fnv(host);
    std::vector<uint64_t> all(gSize);
    MPI_Allgather(&mine, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
    for (int r = 1; r < gSize; ++r) EXPECT_EQ(all[r], all[0]) << "rank " << r << " output differs from rank 0";
  }
  if (exec) cudaGraphExecDestroy(exec);
  if (graphObj) cudaGraphDestroy(graphObj);
  cudaFree(in);
  if (!inPlace) cudaFree(out);
  cudaStreamDestroy(st);
}

// Every algorithm x dtype x op at an odd count and a count past one 16-byte pack; sum over the
// remaining sizes (the createGroup test covers the full op matrix at every size).
INSTANTIATE_TEST_SUITE_P(Ops, MpiAllReduce,
                         testing::Combine(testing::Values("lamport_p2p", "oneshot_p2p", "twoshot_p2p", "ring_nccl",
                                                          "auto"),
                                          testing::Values(DataType::kF32, DataType::kF16, DataType::kBF16),
                                          testing::Values(ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin),
                                          testing::Values<size_t>(7, 65541), testing::Bool(), testing::Bool()));
INSTANTIATE_TEST_SUITE_P(
    Sizes, MpiAllReduce,
    testing::Combine(testing::Values("lamport_p2p", "oneshot_p2p", "twoshot_p2p", "ring_nccl", "auto"),
                     testing::Values(DataType::kF32, DataType::kBF16), testing::Values(ReduceOp::kSum),
                     testing::Values<size_t>(1, 4096, (1u << 20) + 8, (16u << 20) + 3), testing::Bool(),
                     testing::Bool()));

// Rank 1 skips a collective: rank 0's kernel gives up after the timeout and reports rank 1.
TEST(MpiTimeout, SkippedCollective) {
  Config cfg;
  cfg.algo = "oneshot_p2p";
  cfg.timeoutMs = 500;
  std::unique_ptr<Communicator> comm;
  ASSERT_EQ(Communicator::create(*gBootstrap, gRank % gpuCount(), cfg, &comm), Status::kOk)
      << tpcomm::lastErrorMessage();
  CUDA_OK(cudaSetDevice(comm->device()));
  void* p;
  CUDA_OK(cudaMalloc(&p, 1 << 16));
  cudaStream_t st;
  CUDA_OK(cudaStreamCreate(&st));
  if (gRank == 0) {
    auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(comm->allReduce(p, p, 4096, DataType::kF32, ReduceOp::kSum, st), Status::kOk);
    CUDA_OK(cudaStreamSynchronize(st));
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(comm->checkError(), Status::kTimeout);
    EXPECT_NE(std::string(tpcomm::lastErrorMessage()).find("rank 1"), std::string::npos) << tpcomm::lastErrorMessage();
    EXPECT_LT(secs, 3.0);
  }
  cudaStreamDestroy(st);
  cudaFree(p);
  EXPECT_EQ(comm->destroy(), Status::kOk) << tpcomm::lastErrorMessage();
}

}  // namespace
}  // namespace tpcomm_test

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &tpcomm_test::gRank);
  MPI_Comm_size(MPI_COMM_WORLD, &tpcomm_test::gSize);
  int gpus = tpcomm_test::gpuCount();
  int ok = gpus >= tpcomm_test::gSize && tpcomm_test::gSize >= 2, all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all) {
    if (tpcomm_test::gRank == 0)
      std::printf("SKIP: needs >= 2 ranks and one GPU per rank (ranks %d, GPUs %d)\n", tpcomm_test::gSize, gpus);
    MPI_Finalize();
    return 77;
  }
  tpcomm::makeMpiBootstrap(MPI_COMM_WORLD, &tpcomm_test::gBootstrap);
  testing::InitGoogleTest(&argc, argv);
  if (tpcomm_test::gRank != 0) {  // one rank prints the progress; failures print everywhere
    auto& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int rc = RUN_ALL_TESTS();
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  tpcomm_test::gComms.clear();  // communicators first: they use the bootstrap when destroyed
  tpcomm_test::gBootstrap.reset();
  MPI_Finalize();
  return worst;
}
