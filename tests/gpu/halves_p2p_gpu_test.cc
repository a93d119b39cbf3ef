// Reduce-scatter and all-gather over CUDA P2P (twoshot_p2p_halves.cu and ll_p2p.cu),
// each algorithm forced in turn (ll_p2p up to TPCOMM_LL_MAX_BYTES, twoshot_p2p above): every rank's
// output bitwise against the host reference (reduce-scatter: rank-order fp32 of the ranks' piece
// `me`, random non-integer values with signed zeros; all-gather: the pieces' bits), for every
// dtype and op, counts from 1 element to several chunks, odd counts (unaligned pieces), eager and
// graph replays with new inputs; a long run alternating reduce-scatter, all-gather and all-reduce
// on one communicator (they share epochs and scratch); a rank that never arrives gives kTimeout
// naming it; 10,000 rotating calls per collective; and, where NCCL and two GPUs are, every case
// against NCCL's own API (HalvesVsNccl). On one GPU the ranks share it (gpu_allreduce_util.h).
#include <gtest/gtest.h>
#ifdef TPCOMM_TEST_NCCL
#include <nccl.h>
#endif

#include <chrono>
#include <cstdlib>
#include <cstring>
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

// One group per forced algorithm (ll_p2p hands messages over its limit to the next by cost).
RankGroup* halvesGroup(const std::string& algo) {
  static std::map<std::string, std::unique_ptr<RankGroup>> groups;
  auto& g = groups[algo];
  if (!g) {
    Config cfg;
    cfg.algo = algo;
    cfg.useNccl = false;
    g = makeRankGroup(cfg, (algo + " halves").c_str());
  }
  return g.get();
}

constexpr size_t kLlMaxBytes = 524288;  // TPCOMM_LL_MAX_BYTES's default

// The algorithm a forced call runs: ll_p2p only up to its limit (bytes of the n-piece buffer).
std::string expectedAlgo(const std::string& algo, size_t count, size_t es, int n) {
  return algo == "ll_p2p" && count * es * static_cast<size_t>(n) > kLlMaxBytes ? "twoshot_p2p" : algo;
}

// Random non-integer values with signed zeros: one in ten +0.0 or -0.0, the rest normal(0, 1)
// times 2^-6 .. 2^6. Drawn by index from a pool of 65536 such values: the largest rows need tens
// of millions of inputs a case, which drawn one by one took seconds a case at 8 ranks.
class RandomValues {
 public:
  explicit RandomValues(uint32_t seed) : rng_(seed), pool_(kPool) {
    std::uniform_int_distribution<int> kind(0, 19), exponent(-6, 6);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& v : pool_) {
      const int k = kind(rng_);
      v = k == 0 ? 0.0f : k == 1 ? -0.0f : normal(rng_) * std::ldexp(1.0f, exponent(rng_));
    }
  }
  float operator()() { return pool_[rng_() % kPool]; }

 private:
  static constexpr uint32_t kPool = 65536;
  std::mt19937 rng_;
  std::vector<float> pool_;
};

struct DeviceBuffers {
  std::vector<void*> send, recv;
  std::vector<int> devices;
  ~DeviceBuffers() {
    for (size_t r = 0; r < send.size(); ++r) {
      cudaSetDevice(devices[r]);
      cudaFree(send[r]);
      cudaFree(recv[r]);
    }
  }
};

// Device allocations of any number per rank, freed on every exit.
struct OwnedBuffers {
  std::vector<std::pair<int, void*>> all;
  void* add(int device, size_t bytes) {
    void* p = nullptr;
    if (cudaSetDevice(device) != cudaSuccess || cudaMalloc(&p, bytes) != cudaSuccess) return nullptr;
    all.emplace_back(device, p);
    return p;
  }
  ~OwnedBuffers() {
    for (auto& [d, p] : all) {
      cudaSetDevice(d);
      cudaFree(p);
    }
  }
};

enum class Kind { kReduceScatter, kAllGather };

// One rank's expected output. inputs[r] holds rank r's whole send buffer.
std::vector<uint8_t> expected(Kind kind, const std::vector<std::vector<uint8_t>>& inputs, int me, size_t count,
                              DataType dtype, ReduceOp op) {
  const size_t es = tpcomm::dataTypeSize(dtype);
  if (kind == Kind::kAllGather) {
    std::vector<uint8_t> out;
    for (const auto& in : inputs) out.insert(out.end(), in.begin(), in.end());
    return out;
  }
  std::vector<std::vector<uint8_t>> pieces;
  for (const auto& in : inputs)
    pieces.emplace_back(in.begin() + static_cast<long>(me * count * es),
                        in.begin() + static_cast<long>((me + 1) * count * es));
  return reference(pieces, dtype, op, count);
}

Status issueOne(RankGroup& g, Kind kind, int r, const DeviceBuffers& b, size_t count, DataType dtype, ReduceOp op) {
  return kind == Kind::kReduceScatter ? g.comms[r]->reduceScatter(b.send[r], b.recv[r], count, dtype, op, g.streams[r])
                                      : g.comms[r]->allGather(b.send[r], b.recv[r], count, dtype, g.streams[r]);
}

void runCase(const std::string& algo, Kind kind, DataType dtype, ReduceOp op, size_t count, bool graph) {
  RankGroup* g = halvesGroup(algo);
  ASSERT_NE(g, nullptr);
  const int n = g->n();
  const size_t es = tpcomm::dataTypeSize(dtype);
  const size_t sendCount = kind == Kind::kReduceScatter ? count * n : count;
  const size_t recvCount = kind == Kind::kReduceScatter ? count : count * n;
  DeviceBuffers b;
  b.devices = g->devices;
  for (int r = 0; r < n; ++r) {
    CUDA_OK(cudaSetDevice(g->devices[r]));
    void *s = nullptr, *d = nullptr;
    CUDA_OK(cudaMalloc(&s, sendCount * es));
    CUDA_OK(cudaMalloc(&d, recvCount * es));
    b.send.push_back(s);
    b.recv.push_back(d);
  }
  RandomValues draw(static_cast<uint32_t>(count * 131 + static_cast<int>(dtype) * 7 + static_cast<int>(op)));
  auto fresh = [&](std::vector<std::vector<uint8_t>>* inputs) {
    inputs->clear();
    for (int r = 0; r < n; ++r) inputs->push_back(makeHost(dtype, sendCount, [&](size_t) { return draw(); }));
    for (int r = 0; r < n; ++r) {
      CUDA_OK(cudaSetDevice(g->devices[r]));
      CUDA_OK(cudaMemsetAsync(b.recv[r], 0xff, recvCount * es, g->streams[r]));
      CUDA_OK(cudaMemcpyAsync(b.send[r], (*inputs)[r].data(), sendCount * es, cudaMemcpyHostToDevice, g->streams[r]));
    }
  };
  auto issue = [&] {
    ASSERT_EQ(Communicator::groupStart(), Status::kOk);
    for (int r = 0; r < n; ++r)
      ASSERT_EQ(issueOne(*g, kind, r, b, count, dtype, op), Status::kOk) << tpcomm::lastErrorMessage();
    ASSERT_EQ(Communicator::groupEnd(), Status::kOk);
  };
  auto verify = [&](const std::vector<std::vector<uint8_t>>& inputs) {
    for (int r = 0; r < n; ++r) {
      CUDA_OK(cudaSetDevice(g->devices[r]));
      CUDA_OK(cudaStreamSynchronize(g->streams[r]));
      ASSERT_EQ(g->comms[r]->checkError(), Status::kOk) << tpcomm::lastErrorMessage();
      EXPECT_EQ(std::string(g->comms[r]->lastAlgorithm()), expectedAlgo(algo, count, es, n));
      std::vector<uint8_t> got(recvCount * es);
      CUDA_OK(cudaMemcpy(got.data(), b.recv[r], got.size(), cudaMemcpyDeviceToHost));
      const std::vector<uint8_t> want = expected(kind, inputs, r, count, dtype, op);
      const long long bad = firstMismatch(got, want, es);
      ASSERT_EQ(bad, -1) << "rank " << r << " element " << bad << ": got "
                         << tpcomm::loadAsFloat(got.data(), bad, dtype) << " expected "
                         << tpcomm::loadAsFloat(want.data(), bad, dtype);
    }
  };
  std::vector<std::vector<uint8_t>> inputs;
  if (!graph) {
    fresh(&inputs);
    issue();
    verify(inputs);
    return;
  }
  RankGraphs graphs;
  captureOnEveryRank(*g, issue, &graphs);
  ASSERT_TRUE(graphs.ok());
  for (int replay = 0; replay < 3 && !testing::Test::HasFatalFailure(); ++replay) {
    fresh(&inputs);
    ASSERT_TRUE(launchOnEveryRank(*g, graphs));
    verify(inputs);
  }
}

class HalvesP2p : public testing::TestWithParam<std::tuple<std::string, DataType, ReduceOp, size_t, bool>> {};

TEST_P(HalvesP2p, ReduceScatterBitwise) {
  if (rankDevices().size() < 2) GTEST_SKIP() << "needs 2 ranks";
  auto [algo, dtype, op, count, graph] = GetParam();
  SCOPED_TRACE(algo + " " + name(dtype) + " " + name(op) + " count=" + std::to_string(count) +
               (graph ? " graph" : " eager"));
  runCase(algo, Kind::kReduceScatter, dtype, op, count, graph);
}

// All-gather has no operator: its table holds the sum rows only.
class HalvesP2pGather : public HalvesP2p {};

TEST_P(HalvesP2pGather, AllGatherBitwise) {
  if (rankDevices().size() < 2) GTEST_SKIP() << "needs 2 ranks";
  auto [algo, dtype, op, count, graph] = GetParam();
  SCOPED_TRACE(algo + " " + name(dtype) + " count=" + std::to_string(count) + (graph ? " graph" : " eager"));
  runCase(algo, Kind::kAllGather, dtype, op, count, graph);
}

// 1 element .. several two-shot chunks per piece (the default inbox slot is 4 MB / n), odd
// counts so that pieces after the first start unaligned; for ll_p2p, 65536 / 65537 elements of
// 2 bytes on 2-4 ranks sit at and just past its 512 KB limit (the call then runs twoshot_p2p).
// TPCOMM_TEST_SIZES=quick: one large row of 3M / n + 5 elements instead of 1M and 6M, the same
// chunk geometry at every rank count (1.5 chunks a piece in f16, 3 and a tail in f32) and the same bytes in
// all (the host builds and checks n^2 pieces: at 8 ranks the 6M rows took 10-25 s a case).
// Built when gtest registers the tests, after main() read TPCOMM_TEST_RANKS.
testing::internal::ParamGenerator<HalvesP2p::ParamType> halvesTable(std::vector<ReduceOp> ops) {
  const size_t quickLarge = (size_t{3} << 20) / static_cast<size_t>(testRanks()) + 5;
  return testing::Combine(
      testing::Values(std::string("twoshot_p2p"), std::string("ll_p2p")),
      testing::Values(DataType::kF32, DataType::kF16, DataType::kBF16), testing::ValuesIn(ops),
      testing::ValuesIn(testSizes({1, 2, 3, 7, 8, 1000, 4096 + 3, 65536, 65537, (1u << 20) + 5, 3u << 21},
                                  {1, 2, 3, 7, 8, 1000, 4096 + 3, 65536, 65537, quickLarge})),
      testing::Bool());
}
std::string halvesName(const testing::TestParamInfo<HalvesP2p::ParamType>& i) {
  return std::get<0>(i.param) + "_" + name(std::get<1>(i.param)) + "_" + name(std::get<2>(i.param)) + "_" +
         std::to_string(std::get<3>(i.param)) + (std::get<4>(i.param) ? "_graph" : "_eager");
}
INSTANTIATE_TEST_SUITE_P(All, HalvesP2p, halvesTable({ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}), halvesName);
INSTANTIATE_TEST_SUITE_P(All, HalvesP2pGather, halvesTable({ReduceOp::kSum}), halvesName);

// Reduce-scatter, all-gather and all-reduce alternate on one communicator, 3000 calls with new
// small-integer inputs each time (exact sums), every result checked: the three share twoshot's
// epochs and inbox parity.
// With ll_p2p forced, the all-reduces run lamport_p2p (ll_p2p runs no all-reduce): the two
// interleave on one communicator without sharing buffers, and ll_p2p's two buffers alternate.
class HalvesP2pStress : public testing::TestWithParam<std::string> {};

TEST_P(HalvesP2pStress, AlternatingWithAllReduce) {
  if (rankDevices().size() < 2) GTEST_SKIP() << "needs 2 ranks";
  RankGroup* g = halvesGroup(GetParam());
  ASSERT_NE(g, nullptr);
  const int n = g->n();
  const size_t count = 4096 + 8;
  const DataType dtype = DataType::kBF16;
  const size_t es = tpcomm::dataTypeSize(dtype);
  DeviceBuffers b;
  b.devices = g->devices;
  for (int r = 0; r < n; ++r) {
    CUDA_OK(cudaSetDevice(g->devices[r]));
    void *s = nullptr, *d = nullptr;
    CUDA_OK(cudaMalloc(&s, count * n * es));
    CUDA_OK(cudaMalloc(&d, count * n * es));
    b.send.push_back(s);
    b.recv.push_back(d);
  }
  size_t wrong = 0;
  for (int call = 0; call < 3000 && !testing::Test::HasFatalFailure(); ++call) {
    const int which = call % 3;  // 0 reduce-scatter, 1 all-gather, 2 all-reduce (count * n)
    const size_t sendCount = which == 1 ? count : count * n;
    const size_t recvCount = which == 0 ? count : count * n;
    std::vector<std::vector<uint8_t>> inputs;
    for (int r = 0; r < n; ++r)
      inputs.push_back(
          makeHost(dtype, sendCount, [&](size_t i) { return intInput(r, i, static_cast<uint64_t>(call)); }));
    for (int r = 0; r < n; ++r) {
      CUDA_OK(cudaSetDevice(g->devices[r]));
      CUDA_OK(cudaMemcpyAsync(b.send[r], inputs[r].data(), sendCount * es, cudaMemcpyHostToDevice, g->streams[r]));
    }
    ASSERT_EQ(Communicator::groupStart(), Status::kOk);
    for (int r = 0; r < n; ++r) {
      Status s =
          which == 0   ? g->comms[r]->reduceScatter(b.send[r], b.recv[r], count, dtype, ReduceOp::kSum, g->streams[r])
          : which == 1 ? g->comms[r]->allGather(b.send[r], b.recv[r], count, dtype, g->streams[r])
                       : g->comms[r]->allReduce(b.send[r], b.recv[r], count * n, dtype, ReduceOp::kSum, g->streams[r]);
      ASSERT_EQ(s, Status::kOk) << tpcomm::lastErrorMessage();
    }
    ASSERT_EQ(Communicator::groupEnd(), Status::kOk);
    for (int r = 0; r < n; ++r) {
      CUDA_OK(cudaSetDevice(g->devices[r]));
      CUDA_OK(cudaStreamSynchronize(g->streams[r]));
      std::vector<uint8_t> got(recvCount * es);
      CUDA_OK(cudaMemcpy(got.data(), b.recv[r], got.size(), cudaMemcpyDeviceToHost));
      const std::vector<uint8_t> want = which == 2 ? reference(inputs, dtype, ReduceOp::kSum, count * n)
                                                   : expected(which == 0 ? Kind::kReduceScatter : Kind::kAllGather,
                                                              inputs, r, count, dtype, ReduceOp::kSum);
      wrong += firstMismatch(got, want, es) != -1;
    }
  }
  for (int r = 0; r < n; ++r) EXPECT_EQ(g->comms[r]->checkError(), Status::kOk) << tpcomm::lastErrorMessage();
  EXPECT_EQ(wrong, 0u) << "results differing from the reference";
}

// 10,000 back-to-back reduce-scatters, then 10,000 all-gathers, on one communicator, inputs
// rotating over 8 buffers of different contents and every call's output kept in its own slot of
// one slab, checked after the last call: a stale flag, epoch, buffer parity or ll_p2p flag value
// (the flag of a call 2 earlier in the same buffer) shows as a wrong element. No host sync
// between calls, so the ranks run as far ahead of each other as the protocol lets them.
TEST_P(HalvesP2pStress, TenThousandRotating) {
  if (rankDevices().size() < 2) GTEST_SKIP() << "needs 2 ranks";
  RankGroup* g = halvesGroup(GetParam());
  ASSERT_NE(g, nullptr);
  const int n = g->n();
  const size_t count = 2048;  // per rank: a 4 KB piece of bf16
  const int iters = quickRun() ? 1000 : 10000, rotate = 8;
  const DataType dtype = DataType::kBF16;
  const size_t es = tpcomm::dataTypeSize(dtype);
  for (Kind kind : {Kind::kReduceScatter, Kind::kAllGather}) {
    const bool rs = kind == Kind::kReduceScatter;
    SCOPED_TRACE(rs ? "reduce-scatter" : "all-gather");
    const size_t sendCount = rs ? count * n : count, recvBytes = (rs ? count : count * n) * es;
    OwnedBuffers mem;
    std::vector<std::vector<void*>> ins(n, std::vector<void*>(rotate));
    std::vector<void*> slab(n);
    std::vector<std::vector<std::vector<uint8_t>>> want(rotate);  // [k][rank]
    for (int k = 0; k < rotate; ++k) {
      std::vector<std::vector<uint8_t>> inputs;
      for (int r = 0; r < n; ++r)
        inputs.push_back(makeHost(dtype, sendCount, [&](size_t i) { return intInput(r, i, 100 + k); }));
      for (int r = 0; r < n; ++r) {
        want[k].push_back(expected(kind, inputs, r, count, dtype, ReduceOp::kSum));
        ins[r][k] = mem.add(g->devices[r], sendCount * es);
        ASSERT_NE(ins[r][k], nullptr) << "cudaMalloc";
        CUDA_OK(cudaMemcpy(ins[r][k], inputs[r].data(), sendCount * es, cudaMemcpyHostToDevice));
      }
    }
    for (int r = 0; r < n; ++r) {
      slab[r] = mem.add(g->devices[r], recvBytes * iters);
      ASSERT_NE(slab[r], nullptr) << "cudaMalloc";
      CUDA_OK(cudaMemset(slab[r], 0xff, recvBytes * iters));
    }
    // The set-up copies and memsets done before the first call. cudaMemset returns before it
    // ends and runs on the legacy stream, which the ranks' non-blocking streams do not wait for:
    // a stream sync here let a slab's 0xff fill land over a first call's output.
    for (int r = 0; r < n; ++r) {
      CUDA_OK(cudaSetDevice(g->devices[r]));
      CUDA_OK(cudaDeviceSynchronize());
    }
    for (int it = 0; it < iters; ++it) {
      ASSERT_EQ(Communicator::groupStart(), Status::kOk);
      for (int r = 0; r < n; ++r) {
        void* in = ins[r][it % rotate];
        void* out = static_cast<char*>(slab[r]) + static_cast<size_t>(it) * recvBytes;
        const Status st = rs ? g->comms[r]->reduceScatter(in, out, count, dtype, ReduceOp::kSum, g->streams[r])
                             : g->comms[r]->allGather(in, out, count, dtype, g->streams[r]);
        ASSERT_EQ(st, Status::kOk) << tpcomm::lastErrorMessage();
      }
      ASSERT_EQ(Communicator::groupEnd(), Status::kOk);
    }
    size_t wrong = 0;
    for (int r = 0; r < n; ++r) {
      std::vector<uint8_t> out;
      drainAndReadBack(*g, r, slab[r], recvBytes * iters, &out);
      ASSERT_FALSE(HasFatalFailure());
      EXPECT_EQ(std::string(g->comms[r]->lastAlgorithm()), GetParam()) << "rank " << r;
      for (int it = 0; it < iters; ++it)
        if (std::memcmp(out.data() + static_cast<size_t>(it) * recvBytes, want[it % rotate][r].data(), recvBytes) != 0)
          ++wrong;
    }
    EXPECT_EQ(wrong, 0u) << "calls with a wrong element";
  }
}

INSTANTIATE_TEST_SUITE_P(Algos, HalvesP2pStress, testing::Values(std::string("twoshot_p2p"), std::string("ll_p2p")));

// Rank 1 never calls: rank 0's reduce-scatter (then all-gather, on a fresh group) gives up after
// the timeout with kTimeout naming rank 1, and the stream drains.
class HalvesP2pTimeout : public testing::TestWithParam<std::string> {};

TEST_P(HalvesP2pTimeout, MissingPeerReportsTimeout) {
  if (rankDevices().size() < 2) GTEST_SKIP() << "needs 2 ranks";
  for (Kind kind : {Kind::kReduceScatter, Kind::kAllGather}) {
    SCOPED_TRACE(GetParam() + (kind == Kind::kReduceScatter ? " reduceScatter" : " allGather"));
    Config cfg;
    cfg.algo = GetParam();
    cfg.useNccl = false;
    cfg.timeoutMs = 500;
    cfg.setupTimeoutMs = 60000;  // create's exchanges wait through CUDA set-up and the probe
    auto g = makeRankGroup(cfg, "timeout", true);
    ASSERT_NE(g, nullptr);
    CUDA_OK(cudaSetDevice(g->devices[0]));
    void* p = nullptr;
    CUDA_OK(cudaMalloc(&p, 1 << 16));
    CUDA_OK(cudaMemset(p, 0, 1 << 16));
    CUDA_OK(cudaDeviceSynchronize());
    const auto t0 = std::chrono::steady_clock::now();
    Status s = kind == Kind::kReduceScatter
                   ? g->comms[0]->reduceScatter(p, static_cast<char*>(p) + 32768, 1024, DataType::kF32, ReduceOp::kSum,
                                                g->streams[0])
                   : g->comms[0]->allGather(p, static_cast<char*>(p) + 32768, 1024, DataType::kF32, g->streams[0]);
    ASSERT_EQ(s, Status::kOk) << tpcomm::lastErrorMessage();
    CUDA_OK(cudaStreamSynchronize(g->streams[0]));
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(g->comms[0]->checkError(), Status::kTimeout);
    EXPECT_NE(std::string(tpcomm::lastErrorMessage()).find("rank 1"), std::string::npos) << tpcomm::lastErrorMessage();
    EXPECT_GE(secs, 0.4);
    EXPECT_LT(secs, 3.0);
    cudaFree(p);
    for (auto& c : g->comms) c->abort();
  }
}

INSTANTIATE_TEST_SUITE_P(Algos, HalvesP2pTimeout, testing::Values(std::string("twoshot_p2p"), std::string("ll_p2p")));

#ifdef TPCOMM_TEST_NCCL
// Against NCCL's own ncclReduceScatter / ncclAllGather on the same GPUs and inputs, bitwise: the
// inputs are small integers (intInput), so every partial sum is exact in any order and NCCL's
// order and tpcomm's give the same bits; counts from 1 element to 1M per rank, bf16, f16, f32.
// NCCL is driven through its own API (ncclCommInitAll), not through tpcomm. NCCL needs one GPU
// per rank: the table exists only where the ranks are one per GPU (on ranks sharing a GPU it is
// left out, not skipped). Multicast stays off (NCCL_NVLS_ENABLE=0 is forced before NCCL
// initialises).

// NCCL communicators over every GPU, made once; null when there are fewer than 2 GPUs or NCCL
// fails (the reason in *why).
struct NcclGroup {
  std::vector<int> devices;
  std::vector<ncclComm_t> comms;
  std::vector<cudaStream_t> streams;
  ~NcclGroup() {
    for (size_t r = 0; r < comms.size(); ++r) {
      cudaSetDevice(devices[r]);
      ncclCommDestroy(comms[r]);
      cudaStreamDestroy(streams[r]);
    }
  }
};

NcclGroup* ncclGroup(std::string* why) {
  static std::unique_ptr<NcclGroup> g;
  static std::string reason;
  if (!g && reason.empty()) {
    const int n = gpuCount();
    if (n < 2) {
      reason = "NCCL needs one GPU per rank; this machine has " + std::to_string(n);
    } else {
      setenv("NCCL_NVLS_ENABLE", "0", 1);  // multicast off, whatever the caller's environment says
      auto made = std::make_unique<NcclGroup>();
      for (int d = 0; d < n; ++d) made->devices.push_back(d);
      made->comms.resize(n);
      const ncclResult_t e = ncclCommInitAll(made->comms.data(), n, made->devices.data());
      if (e != ncclSuccess) {
        made->comms.clear();
        reason = std::string("ncclCommInitAll: ") + ncclGetErrorString(e);
      } else {
        for (int d : made->devices) {
          cudaStream_t s = nullptr;
          cudaSetDevice(d);
          cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
          made->streams.push_back(s);
        }
        g = std::move(made);
      }
    }
  }
  *why = reason;
  return g.get();
}

ncclDataType_t ncclType(DataType d) {
  return d == DataType::kBF16 ? ncclBfloat16 : d == DataType::kF16 ? ncclFloat16 : ncclFloat32;
}

using Param = std::tuple<std::string, Kind, DataType, size_t>;  // algorithm, collective, dtype, count per rank

class HalvesVsNccl : public testing::TestWithParam<Param> {};

TEST_P(HalvesVsNccl, BitwiseEqual) {
  std::string why;
  NcclGroup* nccl = ncclGroup(&why);
  if (!nccl) GTEST_SKIP() << why;
  const auto& [algo, kind, dtype, count] = GetParam();
  RankGroup* g = halvesGroup(algo);
  ASSERT_NE(g, nullptr);
  const int n = g->n();
  ASSERT_EQ(n, static_cast<int>(nccl->devices.size()));
  const size_t es = tpcomm::dataTypeSize(dtype);
  const bool rs = kind == Kind::kReduceScatter;
  const size_t sendCount = rs ? count * n : count, recvCount = rs ? count : count * n;
  OwnedBuffers buf;
  std::vector<void*> send(n), ours(n), theirs(n);
  for (int r = 0; r < n; ++r) {
    send[r] = buf.add(g->devices[r], sendCount * es);
    ours[r] = buf.add(g->devices[r], recvCount * es);
    theirs[r] = buf.add(g->devices[r], recvCount * es);
    ASSERT_TRUE(send[r] && ours[r] && theirs[r]) << "cudaMalloc on device " << g->devices[r];
    const auto in = makeHost(dtype, sendCount, [&](size_t i) { return intInput(r, i, count); });
    CUDA_OK(cudaMemcpy(send[r], in.data(), in.size(), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(ours[r], 0xff, recvCount * es));  // NaN patterns: an element not written shows
    CUDA_OK(cudaMemset(theirs[r], 0xff, recvCount * es));
  }
  for (int r = 0; r < n; ++r) {  // the memsets (legacy stream, not ordered before the ranks' streams) done
    CUDA_OK(cudaSetDevice(g->devices[r]));
    CUDA_OK(cudaDeviceSynchronize());
  }
  ASSERT_EQ(Communicator::groupStart(), Status::kOk);
  for (int r = 0; r < n; ++r) {
    const Status s = rs ? g->comms[r]->reduceScatter(send[r], ours[r], count, dtype, ReduceOp::kSum, g->streams[r])
                        : g->comms[r]->allGather(send[r], ours[r], count, dtype, g->streams[r]);
    ASSERT_EQ(s, Status::kOk) << tpcomm::lastErrorMessage();
  }
  ASSERT_EQ(Communicator::groupEnd(), Status::kOk);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; ++r) {
    CUDA_OK(cudaSetDevice(nccl->devices[r]));
    const ncclResult_t e =
        rs ? ncclReduceScatter(send[r], theirs[r], count, ncclType(dtype), ncclSum, nccl->comms[r], nccl->streams[r])
           : ncclAllGather(send[r], theirs[r], count, ncclType(dtype), nccl->comms[r], nccl->streams[r]);
    ASSERT_EQ(e, ncclSuccess) << ncclGetErrorString(e);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < n; ++r) {
    CUDA_OK(cudaSetDevice(g->devices[r]));
    CUDA_OK(cudaStreamSynchronize(g->streams[r]));
    CUDA_OK(cudaStreamSynchronize(nccl->streams[r]));
    ASSERT_EQ(g->comms[r]->checkError(), Status::kOk) << tpcomm::lastErrorMessage();
    EXPECT_EQ(std::string(g->comms[r]->lastAlgorithm()), expectedAlgo(algo, count, es, n)) << "rank " << r;
    std::vector<uint8_t> a(recvCount * es), b(recvCount * es);
    CUDA_OK(cudaMemcpy(a.data(), ours[r], a.size(), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(b.data(), theirs[r], b.size(), cudaMemcpyDeviceToHost));
    EXPECT_EQ(firstMismatch(a, b, es), -1) << "rank " << r << ": first element where tpcomm and NCCL differ";
  }
}

// Every combination where each rank has its own GPU and they are all the GPUs (ncclGroup's
// communicator), else none. Built when gtest registers the tests, after main() read
// TPCOMM_TEST_RANKS.
std::vector<Param> ncclCases() {
  std::vector<Param> out;
  if (gpuCount() < 2 || testRanks() != gpuCount()) return out;
  for (const char* algo : {"ll_p2p", "twoshot_p2p"})
    for (Kind kind : {Kind::kReduceScatter, Kind::kAllGather})
      for (DataType dtype : {DataType::kBF16, DataType::kF16, DataType::kF32})
        for (size_t count : {size_t{1}, size_t{7}, size_t{4099}, size_t{65541}, size_t{1} << 20})
          out.emplace_back(algo, kind, dtype, count);
  return out;
}

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(HalvesVsNccl);  // ranks sharing a GPU: no cases
INSTANTIATE_TEST_SUITE_P(All, HalvesVsNccl, testing::ValuesIn(ncclCases()),
                         [](const testing::TestParamInfo<Param>& i) {
                           return std::get<0>(i.param) +
                                  (std::get<1>(i.param) == Kind::kReduceScatter ? "_rs_" : "_ag_") +
                                  name(std::get<2>(i.param)) + "_" + std::to_string(std::get<3>(i.param));
                         });

#endif  // TPCOMM_TEST_NCCL

}  // namespace
}  // namespace tpcomm_test
