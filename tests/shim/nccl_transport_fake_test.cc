// tpcomm's NCCL transport (src/transports/nccl_transport.h) and ring_nccl (src/algos/nccl) over
// the NCCL test double: this program links libfake_nccl.so.2 ahead of libtpcomm.so, so
// libtpcomm's NCCL calls bind to the double (its log proves they arrived) while the real
// libnccl.so.2 it depends on is loaded and unused. Covered:
//   - create: rank 0's unique id spread by tpcomm's bootstrap, one ncclCommInitRank per rank;
//     host ranks refused; a failed ncclGetUniqueId or init reported on every rank;
//   - adopt: an engine's communicator taken as it is, or refused naming the field that differs
//     (rank count, rank, device); a handle the double does not know refused;
//   - all-reduce, reduce-scatter and all-gather through the transport and through ring_nccl:
//     counts per rank as NCCL takes them, DataType/ReduceOp mapped to NCCL's, the caller's
//     stream, results checked element by element; an NCCL failure reported with its text;
//   - teardown: an owned communicator destroyed (or aborted, and then not destroyed), an
//     adopted one never; ncclGroupStart/End forwarded, with calls from one thread for all ranks.
// Label cpu with no CUDA device visible (host buffers; a device number is only a number).
// --gpu (label gpu; exit 77 without a GPU): Communicator::create over the double's
// communicators on a shared GPU 0 (adopt through Config::ncclComm), ring_nccl forced, device
// buffers; lastAlgorithm() and the log show the calls ran on the double.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "algos/common/algo_context.h"
#include "algos/common/algorithm.h"
#include "collectives/registry.h"
#include "fake_nccl.h"
#include "fake_values.h"
#include "gpu/gpu_allreduce_util.h"
#include "topology/topology.h"
#include "tpcomm/bootstrap.h"
#include "tpcomm/communicator.h"
#include "transports/nccl_transport.h"

namespace tpcomm {
namespace {

bool gGpu = false;

struct Kind {
  DataType dtype;
  ncclDataType_t nccl;
};
const Kind kTypes[] = {{DataType::kF32, ncclFloat32}, {DataType::kF16, ncclFloat16}, {DataType::kBF16, ncclBfloat16}};
const std::pair<ReduceOp, ncclRedOp_t> kOps[] = {
    {ReduceOp::kSum, ncclSum}, {ReduceOp::kMax, ncclMax}, {ReduceOp::kMin, ncclMin}};

// Runs f(rank, bootstrap) on `n` thread ranks of one tpcomm thread bootstrap.
void onRanks(int n, const std::function<void(int, Bootstrap&)>& f) {
  auto group = ThreadGroup::create(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      std::unique_ptr<Bootstrap> bs;
      ASSERT_EQ(makeThreadBootstrap(group, r, &bs), Status::kOk);
      f(r, *bs);
    });
  for (auto& t : threads) t.join();
}

TransportEnv envFor(int rank, int n, int device, Bootstrap* bs, const Topology& topo) {
  return TransportEnv{rank, n, device, bs, topo, 10000};
}

std::vector<fakeNcclCall> calls(const std::vector<fakeNcclCall>& log, const std::string& fn, ncclComm_t comm) {
  std::vector<fakeNcclCall> out;
  for (const auto& c : log)
    if (fn == c.fn && (!comm || c.comm == comm)) out.push_back(c);
  return out;
}

cudaStream_t madeUpStream(int rank) { return reinterpret_cast<cudaStream_t>(0xabc000 + 0x100 * rank); }

TEST(NcclTransportOverFake, LinksTheDouble) {
  EXPECT_EQ(fakeNcclIsFake(), 1);
  EXPECT_EQ(fakeNcclHostOnly(), 1) << "host buffers: run with CUDA_VISIBLE_DEVICES= (ctest does)";
}

TEST(NcclTransportOverFake, CreateSpreadsRankZerosId) {
  for (int n : {2, 3}) {
    const size_t from = fakeNcclLogCount();
    std::vector<void*> handles(n);
    onRanks(n, [&](int r, Bootstrap& bs) {
      Topology topo;
      std::unique_ptr<NcclTransport> t;
      ASSERT_EQ(NcclTransport::create(envFor(r, n, 0, &bs, topo), &t), Status::kOk) << lastErrorMessage();
      handles[r] = t->handle();
      int count = 0, rank = -1;
      EXPECT_EQ(ncclCommCount(static_cast<ncclComm_t>(t->handle()), &count), ncclSuccess);
      EXPECT_EQ(ncclCommUserRank(static_cast<ncclComm_t>(t->handle()), &rank), ncclSuccess);
      EXPECT_EQ(count, n);
      EXPECT_EQ(rank, r);
      bs.barrier();  // all ranks made theirs before any is destroyed
    });
    auto log = fakeNcclLogSince(from);
    EXPECT_EQ(calls(log, "ncclGetUniqueId", nullptr).size(), 1u) << "only rank 0 makes the id";
    auto inits = calls(log, "ncclCommInitRank", nullptr);
    ASSERT_EQ(inits.size(), static_cast<size_t>(n));
    for (const auto& c : inits) {
      EXPECT_EQ(c.nranks, n);
      EXPECT_EQ(c.world, inits[0].world) << "every rank joined rank 0's communicator";
      EXPECT_EQ(c.comm, handles[c.rank]);
      EXPECT_EQ(c.result, ncclSuccess);
      // The owned communicator went with the transport.
      EXPECT_EQ(calls(log, "ncclCommDestroy", c.comm).size(), 1u);
    }
  }
}

TEST(NcclTransportOverFake, CreateFailuresReachEveryRank) {
  Topology topo;
  std::unique_ptr<NcclTransport> t;
  EXPECT_EQ(NcclTransport::create(TransportEnv{0, 1, -1, nullptr, topo, 1000}, &t), Status::kNotSupported);
  EXPECT_NE(std::string(lastErrorMessage()).find("host ranks"), std::string::npos) << lastErrorMessage();

  fakeNcclInjectError("ncclGetUniqueId", ncclSystemError, 1);
  onRanks(2, [&](int r, Bootstrap& bs) {
    std::unique_ptr<NcclTransport> t2;
    EXPECT_EQ(NcclTransport::create(envFor(r, 2, 0, &bs, topo), &t2), Status::kNotSupported);
    EXPECT_NE(std::string(lastErrorMessage()).find("ncclGetUniqueId failed on rank 0"), std::string::npos)
        << lastErrorMessage();
  });
  fakeNcclInjectError("ncclCommInitRank", ncclInvalidUsage, 2);
  onRanks(2, [&](int r, Bootstrap& bs) {
    std::unique_ptr<NcclTransport> t2;
    EXPECT_EQ(NcclTransport::create(envFor(r, 2, 0, &bs, topo), &t2), Status::kNotSupported);
    EXPECT_NE(std::string(lastErrorMessage()).find("ncclCommInitRank: fake NCCL: invalid usage"), std::string::npos)
        << lastErrorMessage();
  });
}

TEST(NcclTransportOverFake, AdoptChecksEachField) {
  const int n = 2;
  std::vector<ncclComm_t> comms(n);
  const int devs[n] = {3, 3};  // on the host the double takes any device number
  ASSERT_EQ(ncclCommInitAll(comms.data(), n, devs), ncclSuccess);
  Topology topo;
  const size_t from = fakeNcclLogCount();
  struct Row {
    const char* what;
    int rank, nRanks, device;
    ncclComm_t comm;
    const char* says;  // nullptr: adopted
  };
  const Row rows[] = {
      {"fits", 1, 2, 3, comms[1], nullptr},
      {"rank count", 1, 3, 3, comms[1], "its rank count differs"},
      {"rank", 0, 2, 3, comms[1], "its rank differs"},
      {"device", 1, 2, 0, comms[1], "its device differs"},
      {"unknown handle", 0, 2, 3, reinterpret_cast<ncclComm_t>(0x40), "not a usable ncclComm_t"},
      {"host rank", 0, 2, -1, comms[0], "host communicator"},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.what);
    std::unique_ptr<NcclTransport> t;
    Status s = NcclTransport::adopt(envFor(row.rank, row.nRanks, row.device, nullptr, topo), row.comm, &t);
    if (!row.says) {
      ASSERT_EQ(s, Status::kOk) << lastErrorMessage();
      EXPECT_EQ(t->handle(), row.comm);
      t->abort();  // only let go of
      EXPECT_EQ(t->handle(), nullptr);
      t.reset();
      continue;
    }
    EXPECT_EQ(s, Status::kInvalidArgument);
    EXPECT_EQ(t, nullptr);
    EXPECT_NE(std::string(lastErrorMessage()).find(row.says), std::string::npos) << lastErrorMessage();
  }
  {
    std::unique_ptr<NcclTransport> t;
    ASSERT_EQ(NcclTransport::adopt(envFor(0, 2, 3, nullptr, topo), comms[0], &t), Status::kOk);
  }  // destroyed: the engine's communicator stays
  auto log = fakeNcclLogSince(from);
  EXPECT_TRUE(calls(log, "ncclCommAbort", nullptr).empty()) << "an adopted communicator is never aborted";
  EXPECT_TRUE(calls(log, "ncclCommDestroy", nullptr).empty()) << "nor destroyed";
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

// One rank's buffers for one call: inputs from fake_values, the poisoned output, the answer.
struct Buffers {
  std::vector<char> send, recv, want;
  Buffers(CollKind kind, const fake_values::Type& t, ncclRedOp_t op, int rank, int n, size_t count) {
    auto in = [&](int q, size_t i) { return fake_values::input(t, op, q, i); };
    const size_t sendCount = kind == CollKind::kReduceScatter ? count * n : count;
    send = fake_values::buffer(t, sendCount, [&](size_t i) { return in(rank, i); });
    recv.assign(count * t.size * (kind == CollKind::kAllGather ? n : 1), 0x5a);
    if (kind == CollKind::kAllReduce)
      want = fake_values::buffer(t, count, [&](size_t i) { return fake_values::expected(t, op, n, i); });
    if (kind == CollKind::kReduceScatter)
      want = fake_values::buffer(t, count, [&](size_t i) { return fake_values::expected(t, op, n, rank * count + i); });
    if (kind == CollKind::kAllGather)
      want = fake_values::buffer(t, count * n, [&](size_t i) { return in(static_cast<int>(i / count), i % count); });
  }
};

const char* kindName(CollKind k) {
  return k == CollKind::kAllReduce       ? "ncclAllReduce"
         : k == CollKind::kReduceScatter ? "ncclReduceScatter"
                                         : "ncclAllGather";
}

// Every collective x type x op, through the transport (viaRing false) or ring_nccl's run().
void collectives(bool viaRing) {
  const int n = 3;
  const size_t count = 1001;  // per rank; odd on purpose
  const size_t from = fakeNcclLogCount();
  std::vector<void*> handles(n);
  onRanks(n, [&](int r, Bootstrap& bs) {
    Topology topo;
    AlgoContext ctx;
    ctx.rank = r;
    ctx.nRanks = n;
    ctx.device = 0;
    ASSERT_EQ(NcclTransport::create(envFor(r, n, 0, &bs, topo), &ctx.nccl), Status::kOk) << lastErrorMessage();
    handles[r] = ctx.nccl->handle();
    std::unique_ptr<Algorithm> ring = makeAlgorithm("ring_nccl", &ctx);
    ASSERT_NE(ring, nullptr);
    for (CollKind kind : {CollKind::kAllReduce, CollKind::kReduceScatter, CollKind::kAllGather})
      for (const Kind& k : kTypes)
        for (const auto& op : kOps) {
          if (kind == CollKind::kAllGather && op.first != ReduceOp::kSum) continue;
          const fake_values::Type& t = fake_values::typeOf(k.nccl);
          Buffers b(kind, t, op.second, r, n, count);
          Status s;
          if (viaRing) {
            CollArgs a;
            a.kind = kind;
            a.send = b.send.data();
            a.recv = b.recv.data();
            a.count = count;
            a.dtype = k.dtype;
            a.op = op.first;
            a.stream = madeUpStream(r);
            a.nRanks = n;
            s = ring->run(a);
          } else if (kind == CollKind::kAllReduce) {
            s = ctx.nccl->allReduce(b.send.data(), b.recv.data(), count, k.dtype, op.first, madeUpStream(r));
          } else if (kind == CollKind::kReduceScatter) {
            s = ctx.nccl->reduceScatter(b.send.data(), b.recv.data(), count, k.dtype, op.first, madeUpStream(r));
          } else {
            s = ctx.nccl->allGather(b.send.data(), b.recv.data(), count, k.dtype, madeUpStream(r));
          }
          ASSERT_EQ(s, Status::kOk) << lastErrorMessage();
          EXPECT_EQ(fake_values::firstDifference(t, b.recv, b.want), -1)
              << kindName(kind) << " " << t.name << " " << fake_values::opName(op.second) << " rank " << r;
        }
    bs.barrier();
  });
  auto log = fakeNcclLogSince(from);
  for (int r = 0; r < n; ++r) {
    std::vector<fakeNcclCall> mine;
    for (const auto& c : log)
      if (c.comm == handles[r] && std::string(c.fn).find("ncclComm") != 0) mine.push_back(c);
    size_t i = 0;
    for (CollKind kind : {CollKind::kAllReduce, CollKind::kReduceScatter, CollKind::kAllGather})
      for (const Kind& k : kTypes)
        for (const auto& op : kOps) {
          if (kind == CollKind::kAllGather && op.first != ReduceOp::kSum) continue;
          ASSERT_LT(i, mine.size()) << "rank " << r;
          const fakeNcclCall& c = mine[i++];
          SCOPED_TRACE(std::string(kindName(kind)) + " rank " + std::to_string(r));
          EXPECT_STREQ(c.fn, kindName(kind));
          EXPECT_EQ(c.count, count) << "counts per rank, as NCCL takes them";
          EXPECT_EQ(c.dtype, k.nccl);
          EXPECT_EQ(c.op, kind == CollKind::kAllGather ? -1 : static_cast<int>(op.second));
          EXPECT_EQ(c.stream, madeUpStream(r));
          EXPECT_EQ(c.result, ncclSuccess);
        }
    EXPECT_EQ(i, mine.size()) << "rank " << r << ": no other collective reached the double";
  }
}

TEST(NcclTransportOverFake, CollectivesThroughTheTransport) { collectives(false); }
TEST(NcclTransportOverFake, CollectivesThroughRingNccl) { collectives(true); }

TEST(NcclTransportOverFake, RingNcclNeedsGpuRanksAndItsTransport) {
  AlgoContext ctx;
  std::unique_ptr<Algorithm> ring = makeAlgorithm("ring_nccl", &ctx);
  ASSERT_NE(ring, nullptr);
  std::string why;
  Topology host;
  EXPECT_FALSE(ring->supports(host, AlgoQuery{}, &why));
  EXPECT_EQ(why, "NCCL needs GPU ranks");
  std::ifstream f(std::string(TPCOMM_TEST_FIXTURE_DIR) + "/nvlink2.json");
  std::stringstream ss;
  ss << f.rdbuf();
  Topology gpus;
  ASSERT_EQ(Topology::fromJson(ss.str(), &gpus), Status::kOk);
  EXPECT_TRUE(ring->supports(gpus, AlgoQuery{}, &why));
  CollArgs a;
  EXPECT_EQ(ring->run(a), Status::kInternal) << "no NCCL transport: refused, nothing called";
}

TEST(NcclTransportOverFake, FailuresCarryNcclsText) {
  onRanks(2, [&](int r, Bootstrap& bs) {
    Topology topo;
    std::unique_ptr<NcclTransport> t;
    ASSERT_EQ(NcclTransport::create(envFor(r, 2, 0, &bs, topo), &t), Status::kOk);
    if (r == 0) fakeNcclInjectError("ncclReduceScatter", ncclUnhandledCudaError, 2);
    bs.barrier();
    float x[2] = {1, 2}, y = 0;
    EXPECT_EQ(t->reduceScatter(x, &y, 1, DataType::kF32, ReduceOp::kSum, nullptr), Status::kRemoteError);
    EXPECT_NE(std::string(lastErrorMessage()).find("NCCL ncclReduceScatter: fake NCCL: unhandled cuda error"),
              std::string::npos)
        << lastErrorMessage();
    bs.barrier();
  });
}

// abort() on a communicator tpcomm made: ncclCommAbort, and nothing after it.
TEST(NcclTransportOverFake, AbortOwned) {
  const size_t from = fakeNcclLogCount();
  std::vector<void*> handles(2);
  onRanks(2, [&](int r, Bootstrap& bs) {
    Topology topo;
    std::unique_ptr<NcclTransport> t;
    ASSERT_EQ(NcclTransport::create(envFor(r, 2, 0, &bs, topo), &t), Status::kOk);
    handles[r] = t->handle();
    bs.barrier();
    t->abort();
    EXPECT_EQ(t->handle(), nullptr);
  });
  auto log = fakeNcclLogSince(from);
  for (void* h : handles) {
    auto after = calls(log, "ncclCommAbort", static_cast<ncclComm_t>(h));
    ASSERT_EQ(after.size(), 1u);
    EXPECT_EQ(after[0].result, ncclSuccess);
    EXPECT_TRUE(calls(log, "ncclCommDestroy", static_cast<ncclComm_t>(h)).empty());
  }
}

// Communicator::groupStart/End reach NCCL: one thread, every rank's call inside one group.
TEST(NcclTransportOverFake, GroupFromOneThread) {
  const int n = 2;
  std::vector<ncclComm_t> comms(n);
  ASSERT_EQ(ncclCommInitAll(comms.data(), n, nullptr), ncclSuccess);
  Topology topo;
  std::vector<std::unique_ptr<NcclTransport>> ts(n);
  for (int r = 0; r < n; ++r)
    ASSERT_EQ(NcclTransport::adopt(envFor(r, n, r, nullptr, topo), comms[r], &ts[r]), Status::kOk);
  const size_t from = fakeNcclLogCount();
  std::vector<std::vector<float>> v(n, std::vector<float>(10));
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < 10; ++i) v[r][i] = static_cast<float>(r * 10 + i);
  ASSERT_EQ(ncclGroupStartIfAny(), Status::kOk);
  for (int r = 0; r < n; ++r)
    ASSERT_EQ(ts[r]->allReduce(v[r].data(), v[r].data(), 10, DataType::kF32, ReduceOp::kSum, nullptr), Status::kOk);
  ASSERT_EQ(ncclGroupEndIfAny(), Status::kOk);
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < 10; ++i) EXPECT_EQ(v[r][i], static_cast<float>(10 + 2 * i));
  auto log = fakeNcclLogSince(from);
  ASSERT_EQ(log.size(), 4u);
  EXPECT_STREQ(log[0].fn, "ncclGroupStart");
  EXPECT_EQ(log[1].inGroup, 1);
  EXPECT_STREQ(log[3].fn, "ncclGroupEnd");
  ts.clear();
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

// --gpu: Communicator::create adopting the double's communicators, ranks sharing GPU 0,
// ring_nccl forced; device buffers; the calls must reach the double with per-rank counts.
TEST(NcclTransportOverFakeGpu, CommunicatorRunsRingNcclOnAnAdoptedComm) {
  if (!gGpu) GTEST_SKIP() << "--gpu";
  const int n = 2;
  const size_t count = 4099;
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  const size_t from = fakeNcclLogCount();
  std::vector<ncclComm_t> comms(n);
  onRanks(n, [&](int r, Bootstrap& bs) {
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_EQ(ncclCommInitRank(&comms[r], n, id, r), ncclSuccess);
    Config cfg;
    cfg.algo = "ring_nccl";
    cfg.ncclComm = comms[r];
    std::unique_ptr<Communicator> tp;
    ASSERT_EQ(Communicator::create(bs, 0, cfg, &tp), Status::kOk) << lastErrorMessage();
    cudaStream_t s;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    for (CollKind kind : {CollKind::kAllReduce, CollKind::kReduceScatter, CollKind::kAllGather}) {
      const fake_values::Type& t = fake_values::typeOf(ncclBfloat16);
      Buffers b(kind, t, ncclSum, r, n, count);
      void *dsend = nullptr, *drecv = nullptr;
      ASSERT_EQ(cudaMallocAsync(&dsend, b.send.size(), s), cudaSuccess);
      ASSERT_EQ(cudaMallocAsync(&drecv, b.recv.size(), s), cudaSuccess);
      ASSERT_EQ(cudaMemcpyAsync(dsend, b.send.data(), b.send.size(), cudaMemcpyHostToDevice, s), cudaSuccess);
      ASSERT_EQ(cudaMemcpyAsync(drecv, b.recv.data(), b.recv.size(), cudaMemcpyHostToDevice, s), cudaSuccess);
      Status st = kind == CollKind::kAllReduce ? tp->allReduce(dsend, drecv, count, DataType::kBF16, ReduceOp::kSum, s)
                  : kind == CollKind::kReduceScatter
                      ? tp->reduceScatter(dsend, drecv, count, DataType::kBF16, ReduceOp::kSum, s)
                      : tp->allGather(dsend, drecv, count, DataType::kBF16, s);
      ASSERT_EQ(st, Status::kOk) << lastErrorMessage();
      EXPECT_STREQ(tp->lastAlgorithm(), "ring_nccl");
      ASSERT_EQ(cudaMemcpyAsync(b.recv.data(), drecv, b.recv.size(), cudaMemcpyDeviceToHost, s), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      EXPECT_EQ(fake_values::firstDifference(t, b.recv, b.want), -1) << kindName(kind) << " rank " << r;
      cudaFreeAsync(dsend, s);
      cudaFreeAsync(drecv, s);
    }
    EXPECT_EQ(tp->destroy(), Status::kOk);
    cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
  });
  auto log = fakeNcclLogSince(from);
  for (int r = 0; r < n; ++r) {
    for (const char* fn : {"ncclAllReduce", "ncclReduceScatter", "ncclAllGather"}) {
      auto c = calls(log, fn, comms[r]);
      ASSERT_EQ(c.size(), 1u) << fn << " rank " << r;
      EXPECT_EQ(c[0].count, count);
      EXPECT_EQ(c[0].dtype, ncclBfloat16);
      EXPECT_EQ(c[0].result, ncclSuccess);
    }
    EXPECT_TRUE(calls(log, "ncclCommDestroy", comms[r]).empty()) << "tpcomm never destroys an engine's comm";
    EXPECT_EQ(ncclCommDestroy(comms[r]), ncclSuccess);
  }
}

// A communicator whose rank does not fit: create fails on every rank, naming it where it is wrong.
TEST(NcclTransportOverFakeGpu, CreateRefusesAMismatchedComm) {
  if (!gGpu) GTEST_SKIP() << "--gpu";
  const int n = 2;
  std::vector<ncclComm_t> comms(n);
  const std::vector<int> devs(n, 0);
  ASSERT_EQ(ncclCommInitAll(comms.data(), n, devs.data()), ncclSuccess);
  onRanks(n, [&](int r, Bootstrap& bs) {
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    Config cfg;
    cfg.ncclComm = comms[1 - r];  // swapped
    std::unique_ptr<Communicator> tp;
    EXPECT_EQ(Communicator::create(bs, 0, cfg, &tp), Status::kInvalidArgument);
    EXPECT_NE(std::string(lastErrorMessage()).find("its rank differs"), std::string::npos) << lastErrorMessage();
  });
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

}  // namespace
}  // namespace tpcomm

// --gpu: the GPU variant (exit 77 without a CUDA device). Otherwise no device may be visible.
int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--gpu") tpcomm::gGpu = true;
  ::testing::InitGoogleTest(&argc, argv);
  if (tpcomm::gGpu) {
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      std::printf("tpcomm_nccl_transport_fake: SKIPPED: no CUDA device\n");
      return 77;
    }
    std::printf("tpcomm_nccl_transport_fake --gpu: %s\n", tpcomm_test::shareGpus(2, 1).c_str());
    ::testing::GTEST_FLAG(filter) = "*Gpu*";
  } else {
    ::testing::GTEST_FLAG(filter) = "-*Gpu*";
  }
  return RUN_ALL_TESTS();
}
