// GPU all-reduce tests across processes (mpirun -np 2: one rank per process and GPU, peer
// buffers shared through CUDA IPC). Same inputs and checks as p2p_allreduce_test.cc; ranks
// compare their outputs through a hash gathered over MPI. Lamport runs at every element count
// (partial last 16-byte pack included), also with sizes alternating on one communicator. Exit
// code 77 (ctest: Skipped) where a rank has no GPU of its own.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <map>

#include "common/params.h"
#include "gpu_allreduce_util.h"
#include "tpcomm/mpi_bootstrap.h"

namespace tpcomm_test {
namespace {

using tpcomm::Communicator;
using tpcomm::Config;
using tpcomm::Status;

int gRank = 0, gSize = 1;
bool gShared = false;  // ranks share GPUs: no NCCL
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

// Whether a forced `algo` runs (does not fall back) at `bytes`: Lamport at any element count whose
// size padded to 16 bytes fits TPCOMM_LAMPORT_MAX_BYTES. Only Lamport is checked here.
bool expectRuns(const std::string& algo, size_t bytes) {
  return algo == "lamport_p2p" &&
         (bytes + 15) / 16 * 16 <= static_cast<size_t>(tpcomm::paramInt(tpcomm::ParamId::kLamportMaxBytes));
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
  if (expectRuns(algo, bytes)) EXPECT_STREQ(comm->lastAlgorithm(), algo);
  if (exec) cudaGraphExecDestroy(exec);
  if (graphObj) cudaGraphDestroy(graphObj);
  cudaFree(in);
  if (!inPlace) cudaFree(out);
  cudaStreamDestroy(st);
}

using Param = std::tuple<const char*, DataType, ReduceOp, size_t, bool, bool>;

// Every combination that can exist in this run (ring_nccl needs one GPU per rank: where the
// processes share GPUs it is not instantiated). Built when gtest registers the tests, after
// main() knows the rank and GPU counts.
std::vector<Param> matrix(std::vector<const char*> algos, std::vector<DataType> types, std::vector<ReduceOp> ops,
                          std::vector<size_t> counts) {
  std::vector<Param> out;
  for (const char* a : algos)
    for (DataType t : types)
      for (ReduceOp o : ops)
        for (size_t c : counts)
          for (bool inPlace : {false, true})
            for (bool graph : {false, true})
              if (!(gShared && std::string(a) == "ring_nccl")) out.emplace_back(a, t, o, c, inPlace, graph);
  return out;
}
const std::vector<const char*> kAlgos = {"lamport_p2p", "oneshot_p2p", "twoshot_p2p", "ring_nccl", "auto"};

// Every algorithm x dtype x op at an odd count and a count past one 16-byte pack; sum over the
// remaining sizes (the createGroup test covers the full op matrix at every size).
INSTANTIATE_TEST_SUITE_P(Ops, MpiAllReduce,
                         testing::ValuesIn(matrix(kAlgos, {DataType::kF32, DataType::kF16, DataType::kBF16},
                                                  {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}, {7, 65541})));
INSTANTIATE_TEST_SUITE_P(Sizes, MpiAllReduce,
                         testing::ValuesIn(matrix(kAlgos, {DataType::kF32, DataType::kBF16}, {ReduceOp::kSum},
                                                  testSizes({1, 4096, (1u << 20) + 8, (16u << 20) + 3},
                                                            {1, (1u << 20) + 8}))));

// Lamport's partial last pack: every tail length of f32 (4 per pack) and f16/bf16 (8 per pack).
INSTANTIATE_TEST_SUITE_P(LamportTails, MpiAllReduce,
                         testing::Combine(testing::Values("lamport_p2p"),
                                          testing::Values(DataType::kF32, DataType::kF16, DataType::kBF16),
                                          testing::Values(ReduceOp::kSum, ReduceOp::kMax),
                                          testing::Values<size_t>(2, 3, 5, 6, 9, 4097, 262143), testing::Bool(),
                                          testing::Bool()));

// Lamport with sizes alternating back to back (1 element, 8 bytes, 4097 and 4099 elements; as
// p2p_allreduce_test.cc): a clear that misses the padded tail of a pack shows up as a wrong
// element in a later call on the same buffer. Odd calls shift rank 1's buffers by one element.
TEST(MpiLamportTails, AlternatingSizesBackToBack) {
  Communicator* comm = commFor("lamport_p2p");
  ASSERT_NE(comm, nullptr);
  CUDA_OK(cudaSetDevice(comm->device()));
  cudaStream_t st;
  CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  const int iters = 600;
  for (DataType dtype : {DataType::kF32, DataType::kF16, DataType::kBF16}) {
    SCOPED_TRACE(name(dtype));
    const size_t es = tpcomm::dataTypeSize(dtype);
    const size_t counts[] = {1, 8 / es, 4097, 4099};
    const size_t slab = ((4099 + 16) * es + 255) / 256 * 256;
    std::vector<uint8_t> hostIn(slab * iters, 0), expected(slab * iters, 0);
    for (int it = 0; it < iters; ++it) {
      const size_t count = counts[it % 4];
      std::vector<std::vector<uint8_t>> inputs;
      for (int r = 0; r < gSize; ++r)
        inputs.push_back(makeHost(dtype, count, [&](size_t i) { return intInput(r, i, it); }));
      std::memcpy(hostIn.data() + it * slab, inputs[gRank].data(), count * es);
      const auto ref = reference(inputs, dtype, ReduceOp::kSum, count);
      std::memcpy(expected.data() + it * slab, ref.data(), ref.size());
    }
    void *inBase, *outBase;
    CUDA_OK(cudaMalloc(&inBase, slab * iters + 16));
    CUDA_OK(cudaMalloc(&outBase, slab * iters + 16));
    char *in = static_cast<char*>(inBase), *out = static_cast<char*>(outBase);
    CUDA_OK(cudaMemsetAsync(out, 0xff, slab * iters + 16, st));
    auto shift = [&](int it) { return (it % 2 == 1 && gRank == 1) ? es : 0; };
    for (int it = 0; it < iters; ++it)
      CUDA_OK(cudaMemcpyAsync(in + it * slab + shift(it), hostIn.data() + it * slab, counts[it % 4] * es,
                              cudaMemcpyHostToDevice, st));
    for (int it = 0; it < iters; ++it) {
      ASSERT_EQ(comm->allReduce(in + it * slab + shift(it), out + it * slab + shift(it), counts[it % 4], dtype,
                                ReduceOp::kSum, st),
                Status::kOk)
          << tpcomm::lastErrorMessage();
      ASSERT_STREQ(comm->lastAlgorithm(), "lamport_p2p") << "count " << counts[it % 4];
    }
    CUDA_OK(cudaStreamSynchronize(st));
    ASSERT_EQ(comm->checkError(), Status::kOk) << tpcomm::lastErrorMessage();
    std::vector<uint8_t> host(slab * iters + 16);
    CUDA_OK(cudaMemcpy(host.data(), out, host.size(), cudaMemcpyDeviceToHost));
    size_t wrong = 0;
    for (int it = 0; it < iters; ++it) {
      const size_t bytes = counts[it % 4] * es;
      const uint8_t* o = host.data() + it * slab + shift(it);
      bool bad = std::memcmp(o, expected.data() + it * slab, bytes) != 0;
      for (size_t b = bytes; b < bytes + 16 && !bad; ++b) bad = o[b] != 0xff;  // padding not stored
      if (bad && wrong++ == 0) ADD_FAILURE() << "rank " << gRank << " call " << it << " count " << counts[it % 4];
    }
    EXPECT_EQ(wrong, 0u) << "rank " << gRank << ": calls with a wrong element";
    cudaFree(inBase);
    cudaFree(outBase);
  }
  cudaStreamDestroy(st);
}

// Rank 1 skips a collective: rank 0's kernel gives up after the timeout and reports rank 1.
TEST(MpiTimeout, SkippedCollective) {
  Config cfg;
  cfg.algo = "oneshot_p2p";
  cfg.timeoutMs = 500;
  cfg.setupTimeoutMs = 60000;  // create's exchanges wait through CUDA set-up and the probe
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
  // Ranks beyond the GPUs present share them (rank r on GPU r mod gpus, CUDA IPC between the
  // processes as between GPUs): the protocols, not their speed; no NCCL (one GPU per rank).
  int ok = gpus >= 1 && tpcomm_test::gSize >= 2, all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all) {
    if (tpcomm_test::gRank == 0)
      std::printf("SKIP: needs >= 2 ranks and a GPU (ranks %d, GPUs %d)\n", tpcomm_test::gSize, gpus);
    MPI_Finalize();
    return 77;
  }
  if (tpcomm_test::gSize > gpus) {
    const std::string line = tpcomm_test::shareGpus(tpcomm_test::gSize, gpus);
    if (tpcomm_test::gRank == 0) std::printf("tpcomm_gpu_mpi_tests: %s\n", line.c_str());
    tpcomm_test::gShared = true;
  }
  tpcomm::makeMpiBootstrap(MPI_COMM_WORLD, &tpcomm_test::gBootstrap);
  bool listOnly = false;  // --gtest_list_tests: one rank prints the list (N interleaved copies garble it)
  for (int i = 1; i < argc; ++i) listOnly = listOnly || std::string(argv[i]) == "--gtest_list_tests";
  testing::InitGoogleTest(&argc, argv);
  if (listOnly && tpcomm_test::gRank != 0) std::fflush(stdout), std::freopen("/dev/null", "w", stdout);
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
