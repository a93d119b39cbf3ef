// Tests of the NCCL test double itself (fake_nccl/, label cpu): a double that computed wrong
// answers or logged wrong arguments would make every test built on it prove nothing. Ranks are
// threads (and, in one test, processes); buffers are host memory (ctest runs this with no
// CUDA device visible). Covered: every collective x type x op the double reduces, 1..5 ranks,
// in and out of place, calls spanning many slot-sized steps; groups driving all ranks from one
// thread; splits (colors, keys, NCCL_SPLIT_NOCOLOR, inside a group); calls that differ between
// ranks, abort, timeout, error injection, stale handles; the call log in memory and in the file;
// ranks in separate processes. To cover a new case, add a row to kCollectiveRows.
#include "fake_nccl.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fake_processes.h"
#include "fake_values.h"

namespace {

using fake_values::Type;

// `n` ranks as threads on one fresh unique id; each runs f(rank, comm), then destroys its comm.
void onRanks(int n, const std::function<void(int, ncclComm_t)>& f) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      ncclComm_t comm = nullptr;
      ASSERT_EQ(ncclCommInitRank(&comm, n, id, r), ncclSuccess) << ncclGetLastError(nullptr);
      f(r, comm);
      EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
    });
  for (auto& t : threads) t.join();
}

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_)
      setenv(name_, old_.c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

enum class Coll { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kReduce };
const char* collName(Coll c) {
  const char* k[] = {"allreduce", "reducescatter", "allgather", "broadcast", "reduce"};
  return k[static_cast<int>(c)];
}

struct CollRow {
  Coll coll;
  int ranks;
  size_t count;  // per rank (reduce-scatter: recvcount; all-gather: sendcount)
  bool inPlace;
};

// Runs one row for one type and op; checks every element of every rank.
void runCollective(const CollRow& row, const Type& t, ncclRedOp_t op) {
  SCOPED_TRACE(std::string(collName(row.coll)) + " " + t.name + " " + fake_values::opName(op) + " ranks " +
               std::to_string(row.ranks) + " count " + std::to_string(row.count) + (row.inPlace ? " in place" : ""));
  const int n = row.ranks;
  const int root = n - 1;
  const size_t c = row.count;
  onRanks(n, [&](int r, ncclComm_t comm) {
    auto in = [&](int rank, size_t i) { return fake_values::input(t, op, rank, i); };
    std::vector<char> send, recv, want;
    ncclResult_t res = ncclSuccess;
    switch (row.coll) {
      case Coll::kAllReduce:
      case Coll::kReduce: {
        send = fake_values::buffer(t, c, [&](size_t i) { return in(r, i); });
        recv.assign(c * t.size, 0x5a);
        const bool hasOut = row.coll == Coll::kAllReduce || r == root;
        want = hasOut ? fake_values::buffer(t, c, [&](size_t i) { return fake_values::expected(t, op, n, i); }) : recv;
        void* out = row.inPlace ? send.data() : recv.data();
        res = row.coll == Coll::kAllReduce ? ncclAllReduce(send.data(), out, c, t.nccl, op, comm, nullptr)
                                           : ncclReduce(send.data(), out, c, t.nccl, op, root, comm, nullptr);
        if (row.inPlace) recv = send;
        if (row.inPlace && !hasOut) want = fake_values::buffer(t, c, [&](size_t i) { return in(r, i); });
        break;
      }
      case Coll::kReduceScatter: {
        send = fake_values::buffer(t, c * n, [&](size_t i) { return in(r, i); });
        want = fake_values::buffer(t, c, [&](size_t i) { return fake_values::expected(t, op, n, r * c + i); });
        recv.assign(c * t.size, 0x5a);
        void* out = row.inPlace ? send.data() + r * c * t.size : recv.data();
        res = ncclReduceScatter(send.data(), out, c, t.nccl, op, comm, nullptr);
        if (row.inPlace) recv.assign(send.begin() + r * c * t.size, send.begin() + (r + 1) * c * t.size);
        break;
      }
      case Coll::kAllGather: {
        recv.assign(c * n * t.size, 0x5a);
        std::vector<char> mine = fake_values::buffer(t, c, [&](size_t i) { return in(r, i); });
        std::memcpy(recv.data() + r * c * t.size, mine.data(), mine.size());
        send = row.inPlace ? std::vector<char>() : mine;
        const void* src = row.inPlace ? recv.data() + r * c * t.size : send.data();
        want = fake_values::buffer(t, c * n, [&](size_t i) { return in(static_cast<int>(i / c), i % c); });
        res = ncclAllGather(src, recv.data(), c, t.nccl, comm, nullptr);
        break;
      }
      case Coll::kBroadcast: {
        send = fake_values::buffer(t, c, [&](size_t i) { return in(r, i); });
        recv.assign(c * t.size, 0x5a);
        want = fake_values::buffer(t, c, [&](size_t i) { return in(root, i); });
        res = row.inPlace ? ncclBroadcast(send.data(), send.data(), c, t.nccl, root, comm, nullptr)
                          : ncclBroadcast(send.data(), recv.data(), c, t.nccl, root, comm, nullptr);
        if (row.inPlace) recv = send;
        break;
      }
    }
    ASSERT_EQ(res, ncclSuccess) << ncclGetLastError(comm);
    long bad = fake_values::firstDifference(t, recv, want);
    EXPECT_EQ(bad, -1) << "rank " << r << ": first wrong element " << bad;
  });
}

// Small slots (2 KiB), so that the larger counts take many steps.
const std::vector<CollRow>& collectiveRows() {
  static const std::vector<CollRow> kCollectiveRows = {
      {Coll::kAllReduce, 1, 5, false},      {Coll::kAllReduce, 2, 1, false},     {Coll::kAllReduce, 3, 1000, false},
      {Coll::kAllReduce, 4, 777, true},     {Coll::kAllReduce, 5, 33, false},    {Coll::kAllReduce, 2, 0, false},
      {Coll::kReduceScatter, 1, 9, false},  {Coll::kReduceScatter, 3, 1, false}, {Coll::kReduceScatter, 3, 301, false},
      {Coll::kReduceScatter, 4, 129, true}, {Coll::kAllGather, 2, 1, false},     {Coll::kAllGather, 3, 700, false},
      {Coll::kAllGather, 4, 65, true},      {Coll::kBroadcast, 3, 600, false},   {Coll::kBroadcast, 2, 17, true},
      {Coll::kReduce, 3, 500, false},       {Coll::kReduce, 4, 3, true},
  };
  return kCollectiveRows;
}

TEST(FakeNccl, IsTheDouble) {
  EXPECT_EQ(fakeNcclIsFake(), 1);
  EXPECT_EQ(fakeNcclHostOnly(), 1) << "these tests use host buffers: run with CUDA_VISIBLE_DEVICES= (ctest does)";
  int v = 0;
  ASSERT_EQ(ncclGetVersion(&v), ncclSuccess);
  EXPECT_EQ(v, NCCL_VERSION_CODE);
  EXPECT_NE(std::string(ncclGetErrorString(ncclInvalidUsage)).find("invalid usage"), std::string::npos);
}

TEST(FakeNccl, CollectivesEveryTypeAndOp) {
  ScopedEnv slot("FAKE_NCCL_SLOT_BYTES", "2048");
  const ncclRedOp_t ops[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
  for (const CollRow& row : collectiveRows())
    for (const Type& t : fake_values::reducibleTypes()) {
      const bool reduces =
          row.coll == Coll::kAllReduce || row.coll == Coll::kReduceScatter || row.coll == Coll::kReduce;
      for (ncclRedOp_t op : ops) {
        if (!reduces && op != ncclSum) break;
        runCollective(row, t, op);
        if (HasFatalFailure()) return;
      }
    }
}

TEST(FakeNccl, GroupDrivesEveryRankFromOneThread) {
  const int n = 3;
  std::vector<ncclComm_t> comms(n);
  const int devs[n] = {0, 0, 0};
  ASSERT_EQ(ncclCommInitAll(comms.data(), n, devs), ncclSuccess);
  const Type& t = fake_values::typeOf(ncclFloat32);
  const size_t count = 100;
  std::vector<std::vector<char>> a(n), b(n);
  for (int r = 0; r < n; ++r) {
    a[r] = fake_values::buffer(t, count, [&](size_t i) { return fake_values::input(t, ncclSum, r, i); });
    b[r] = fake_values::buffer(t, count, [&](size_t i) { return fake_values::input(t, ncclMax, r, i + 1); });
  }
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);  // nested: only the outermost end runs the calls
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(ncclAllReduce(a[r].data(), a[r].data(), count, ncclFloat32, ncclSum, comms[r], nullptr), ncclSuccess);
    ASSERT_EQ(ncclAllReduce(b[r].data(), b[r].data(), count, ncclFloat32, ncclMax, comms[r], nullptr), ncclSuccess);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(
      fake_values::firstDifference(
          t, a[0],
          fake_values::buffer(
              t, count, [](size_t i) { return fake_values::input(fake_values::typeOf(ncclFloat32), ncclSum, 0, i); })),
      -1)
      << "the inner ncclGroupEnd ran the group";
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  auto wantA = fake_values::buffer(t, count, [&](size_t i) { return fake_values::expected(t, ncclSum, n, i); });
  std::vector<char> wantB(count * t.size);
  for (size_t i = 0; i < count; ++i) {
    double m = fake_values::input(t, ncclMax, 0, i + 1);
    for (int r = 1; r < n; ++r) m = std::max(m, fake_values::input(t, ncclMax, r, i + 1));
    fake_values::encode(t, wantB.data(), i, m);
  }
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(fake_values::firstDifference(t, a[r], wantA), -1) << "rank " << r;
    EXPECT_EQ(fake_values::firstDifference(t, b[r], wantB), -1) << "rank " << r;
    int dev = -1, rank = -1, size = 0;
    EXPECT_EQ(ncclCommCuDevice(comms[r], &dev), ncclSuccess);
    EXPECT_EQ(ncclCommUserRank(comms[r], &rank), ncclSuccess);
    EXPECT_EQ(ncclCommCount(comms[r], &size), ncclSuccess);
    EXPECT_EQ(dev, 0);
    EXPECT_EQ(rank, r);
    EXPECT_EQ(size, n);
  }
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);  // unbalanced
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

// 5 ranks; color rank % 2, key -rank (so the new order is reversed); rank 4 opts out.
TEST(FakeNccl, SplitByColorAndKey) {
  const int n = 5;
  onRanks(n, [&](int r, ncclComm_t comm) {
    ncclComm_t sub = reinterpret_cast<ncclComm_t>(0x1);
    const int color = r == 4 ? NCCL_SPLIT_NOCOLOR : r % 2;
    ASSERT_EQ(ncclCommSplit(comm, color, -r, &sub, nullptr), ncclSuccess) << ncclGetLastError(comm);
    if (r == 4) {
      EXPECT_EQ(sub, nullptr);
      return;
    }
    ASSERT_NE(sub, nullptr);
    // color 0: ranks {0, 2} -> new ranks {1, 0}; color 1: {1, 3} -> {1, 0}
    int size = 0, rank = -1;
    EXPECT_EQ(ncclCommCount(sub, &size), ncclSuccess);
    EXPECT_EQ(ncclCommUserRank(sub, &rank), ncclSuccess);
    EXPECT_EQ(size, 2);
    EXPECT_EQ(rank, r < 2 ? 1 : 0);
    int32_t v = r + 1, sum = 0;
    ASSERT_EQ(ncclAllReduce(&v, &sum, 1, ncclInt32, ncclSum, sub, nullptr), ncclSuccess);
    EXPECT_EQ(sum, r % 2 == 0 ? 1 + 3 : 2 + 4);
    EXPECT_EQ(ncclCommDestroy(sub), ncclSuccess);
  });
}

// Inside a group the new handles exist at once but complete at the outermost ncclGroupEnd.
TEST(FakeNccl, SplitInsideAGroup) {
  const int n = 4;
  std::vector<ncclComm_t> comms(n), subs(n, nullptr);
  ASSERT_EQ(ncclCommInitAll(comms.data(), n, nullptr), ncclSuccess);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; ++r) ASSERT_EQ(ncclCommSplit(comms[r], r / 2, r, &subs[r], &cfg), ncclSuccess);
  ncclResult_t state = ncclSuccess;
  ASSERT_NE(subs[0], nullptr);
  EXPECT_EQ(ncclCommGetAsyncError(subs[0], &state), ncclSuccess);
  EXPECT_EQ(state, ncclInProgress);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < n; ++r) {
    int rank = -1, size = 0;
    EXPECT_EQ(ncclCommGetAsyncError(subs[r], &state), ncclSuccess);
    EXPECT_EQ(state, ncclSuccess);
    EXPECT_EQ(ncclCommUserRank(subs[r], &rank), ncclSuccess);
    EXPECT_EQ(ncclCommCount(subs[r], &size), ncclSuccess);
    EXPECT_EQ(rank, r % 2);
    EXPECT_EQ(size, 2);
  }
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(ncclCommDestroy(subs[r]), ncclSuccess);
    EXPECT_EQ(ncclCommDestroy(comms[r]), ncclSuccess);
  }
}

// FAKE_NCCL_INPROGRESS=n: a non-blocking init answers ncclInProgress, and so do the first n
// polls of ncclCommGetAsyncError; a blocking one is ready at once.
TEST(FakeNccl, NonBlockingInitInProgress) {
  ScopedEnv polls("FAKE_NCCL_INPROGRESS", "2");
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t comm = nullptr;
  EXPECT_EQ(ncclCommInitRankConfig(&comm, 1, id, 0, &cfg), ncclInProgress);
  ASSERT_NE(comm, nullptr);
  ncclResult_t state = ncclSuccess;
  for (ncclResult_t want : {ncclInProgress, ncclInProgress, ncclSuccess, ncclSuccess}) {
    ASSERT_EQ(ncclCommGetAsyncError(comm, &state), ncclSuccess);
    EXPECT_EQ(state, want);
  }
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  EXPECT_EQ(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

TEST(FakeNccl, CallsThatDifferFailOnEveryRank) {
  onRanks(2, [&](int r, ncclComm_t comm) {
    float x[8] = {};
    ncclResult_t res = ncclAllReduce(x, x, r == 0 ? 4 : 5, ncclFloat32, ncclSum, comm, nullptr);
    EXPECT_EQ(res, ncclInvalidUsage);
    EXPECT_NE(std::string(ncclGetLastError(comm)).find("made call"), std::string::npos) << ncclGetLastError(comm);
    ncclResult_t async = ncclSuccess;
    EXPECT_EQ(ncclCommGetAsyncError(comm, &async), ncclSuccess);
    EXPECT_EQ(async, ncclInvalidUsage);
  });
}

TEST(FakeNccl, AbortFailsThePeersAtOnce) {
  ScopedEnv timeout("FAKE_NCCL_TIMEOUT_MS", "30000");
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  std::atomic<bool> joined{false}, aborted{false};
  std::thread peer([&] {
    ncclComm_t comm;
    ASSERT_EQ(ncclCommInitRank(&comm, 2, id, 1), ncclSuccess);
    joined = true;
    while (!aborted) std::this_thread::yield();
    float x = 1;
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, comm, nullptr), ncclRemoteError);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
    EXPECT_NE(std::string(ncclGetLastError(comm)).find("rank 0 aborted"), std::string::npos);
    EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
  });
  ncclComm_t comm;
  ASSERT_EQ(ncclCommInitRank(&comm, 2, id, 0), ncclSuccess);
  while (!joined) std::this_thread::yield();
  EXPECT_EQ(ncclCommAbort(comm), ncclSuccess);
  aborted = true;
  peer.join();
  // The handle is gone: every later use is refused rather than touching freed state.
  EXPECT_EQ(ncclCommDestroy(comm), ncclInvalidArgument);
  EXPECT_EQ(ncclCommAbort(nullptr), ncclSuccess);
  EXPECT_EQ(ncclCommDestroy(nullptr), ncclSuccess);
}

TEST(FakeNccl, APeerThatNeverCallsTimesOut) {
  ScopedEnv timeout("FAKE_NCCL_TIMEOUT_MS", "200");
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t a, b;
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclCommInitRank(&a, 2, id, 0), ncclSuccess);
  ASSERT_EQ(ncclCommInitRank(&b, 2, id, 1), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  float x = 1;
  EXPECT_EQ(ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, a, nullptr), ncclRemoteError);
  EXPECT_NE(std::string(ncclGetLastError(a)).find("did not make the matching call"), std::string::npos);
  EXPECT_EQ(ncclCommDestroy(a), ncclSuccess);
  EXPECT_EQ(ncclCommDestroy(b), ncclSuccess);
}

TEST(FakeNccl, RejectsWhatNcclRejects) {
  ncclComm_t comm = nullptr;
  ncclUniqueId notOurs{};
  EXPECT_EQ(ncclCommInitRank(&comm, 2, notOurs, 0), ncclInvalidArgument);
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  EXPECT_EQ(ncclCommInitRank(&comm, 2, id, 2), ncclInvalidArgument);
  ncclConfig_t junk;
  std::memset(&junk, 0, sizeof(junk));
  EXPECT_EQ(ncclCommInitRankConfig(&comm, 2, id, 0, &junk), ncclInvalidArgument);
  ASSERT_EQ(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
  ncclComm_t again = nullptr;
  ncclUniqueId id2;
  ASSERT_EQ(ncclGetUniqueId(&id2), ncclSuccess);
  ASSERT_EQ(ncclCommInitRank(&again, 2, id2, 0), ncclSuccess);
  ncclComm_t twice = nullptr;
  EXPECT_EQ(ncclCommInitRank(&twice, 2, id2, 0), ncclInvalidArgument) << "rank 0 joined twice";
  EXPECT_EQ(ncclCommInitRank(&twice, 3, id2, 1), ncclInvalidArgument) << "another size";
  float x = 0;
  EXPECT_EQ(ncclAllReduce(&x, nullptr, 1, ncclFloat32, ncclSum, comm, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, nullptr, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(&x, &x, 1, ncclFloat32, static_cast<ncclRedOp_t>(ncclNumOps), comm, nullptr),
            ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(&x, &x, 1, static_cast<ncclDataType_t>(ncclNumTypes), ncclSum, comm, nullptr),
            ncclInvalidArgument);
  EXPECT_EQ(ncclBroadcast(&x, &x, 1, ncclFloat32, 1, comm, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, comm, nullptr), ncclSuccess);  // one rank
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, comm, nullptr), ncclInvalidArgument) << "destroyed";
  EXPECT_EQ(ncclCommAbort(again), ncclSuccess);
}

TEST(FakeNccl, LogsEveryCallWithItsArguments) {
  const size_t from = fakeNcclLogCount();
  char path[] = "/tmp/fake_nccl_log_XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  ScopedEnv file("FAKE_NCCL_LOG", path);
  std::vector<ncclComm_t> comms(2);
  ASSERT_EQ(ncclCommInitAll(comms.data(), 2, nullptr), ncclSuccess);
  std::vector<int32_t> a(6, 1), b(6, 2), out0(3), out1(3);
  cudaStream_t s0 = reinterpret_cast<cudaStream_t>(0x100), s1 = reinterpret_cast<cudaStream_t>(0x200);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclReduceScatter(a.data(), out0.data(), 3, ncclInt32, ncclMax, comms[0], s0), ncclSuccess);
  ASSERT_EQ(ncclReduceScatter(b.data(), out1.data(), 3, ncclInt32, ncclMax, comms[1], s1), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(out0, std::vector<int32_t>(3, 2));
  fakeNcclInjectError("ncclAllGather", ncclUnhandledCudaError, 1);
  EXPECT_EQ(ncclAllGather(a.data(), b.data(), 1, ncclInt32, comms[0], s0), ncclUnhandledCudaError);
  for (ncclComm_t c : comms) ASSERT_EQ(ncclCommDestroy(c), ncclSuccess);

  std::vector<fakeNcclCall> log = fakeNcclLogSince(from);
  std::vector<std::string> fns;
  for (const auto& c : log) fns.push_back(c.fn);
  EXPECT_EQ(fns, (std::vector<std::string>{"ncclCommInitAll", "ncclCommInitAll", "ncclGroupStart", "ncclReduceScatter",
                                           "ncclReduceScatter", "ncclGroupEnd", "ncclAllGather", "ncclCommDestroy",
                                           "ncclCommDestroy"}));
  ASSERT_EQ(log.size(), 9u);
  const fakeNcclCall& rs = log[4];
  EXPECT_EQ(rs.comm, comms[1]);
  EXPECT_EQ(rs.world, log[3].world);
  EXPECT_EQ(rs.world, log[0].world);
  EXPECT_EQ(rs.rank, 1);
  EXPECT_EQ(rs.nranks, 2);
  EXPECT_EQ(rs.count, 3u);
  EXPECT_EQ(rs.dtype, ncclInt32);
  EXPECT_EQ(rs.op, ncclMax);
  EXPECT_EQ(rs.root, -1);
  EXPECT_EQ(rs.sendbuff, b.data());
  EXPECT_EQ(rs.recvbuff, out1.data());
  EXPECT_EQ(rs.stream, s1);
  EXPECT_EQ(rs.inGroup, 1);
  EXPECT_EQ(rs.result, ncclSuccess);
  EXPECT_EQ(log[6].result, ncclUnhandledCudaError);
  EXPECT_EQ(log[6].op, -1) << "all-gather has no op";
  EXPECT_EQ(log[1].comm, comms[1]);
  EXPECT_LT(log[0].seq, log[8].seq);
  // The same calls, one line each, in the file.
  std::ifstream f(path);
  std::string line;
  std::vector<std::string> lines;
  while (std::getline(f, line)) lines.push_back(line);
  unlink(path);
  ASSERT_EQ(lines.size(), 9u);
  EXPECT_NE(lines[4].find("fn=ncclReduceScatter "), std::string::npos) << lines[4];
  EXPECT_NE(lines[4].find(" rank=1 nranks=2 "), std::string::npos) << lines[4];
  EXPECT_NE(lines[4].find(" count=3 dtype=2 op=2 "), std::string::npos) << lines[4];
  EXPECT_NE(lines[6].find(" result=1"), std::string::npos) << lines[6];
}

// Ranks in separate processes (this program re-run once per rank), meeting in shared memory.
TEST(FakeNccl, RanksInSeparateProcesses) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  std::vector<int> codes = fake_processes::runRanks(3, id, {});
  for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

// The child's part: an all-reduce and an all-gather, checked; exit 0 when right.
int childRank(int r, int n, const ncclUniqueId& id) {
  ncclComm_t comm;
  if (ncclCommInitRank(&comm, n, id, r) != ncclSuccess) return 2;
  std::vector<float> v(5000, static_cast<float>(r + 1));
  if (ncclAllReduce(v.data(), v.data(), v.size(), ncclFloat32, ncclSum, comm, nullptr) != ncclSuccess) return 3;
  for (float x : v)
    if (x != n * (n + 1) / 2) return 4;
  int mine = 10 * r;
  std::vector<int> all(n, -1);
  if (ncclAllGather(&mine, all.data(), 1, ncclInt32, comm, nullptr) != ncclSuccess) return 5;
  for (int q = 0; q < n; ++q)
    if (all[q] != 10 * q) return 6;
  return ncclCommDestroy(comm) == ncclSuccess ? 0 : 7;
}

}  // namespace

int main(int argc, char** argv) {
  int rank = -1, nranks = 0;
  ncclUniqueId id;
  if (fake_processes::rankFromEnv(&rank, &nranks, &id)) return childRank(rank, nranks, id);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
