// libtpcomm_nccl.so end to end over the NCCL test double (fake_nccl/): an engine-like program
// (this one: it links libfake_nccl.so.2 as an engine links libnccl, and runs under
// LD_PRELOAD=libtpcomm_nccl.so with TPCOMM_NCCL_LIBRARY naming the double) makes the NCCL calls
// of the two engine shapes, and the double's call log shows where each call went:
//   - a call the routing table sends to NCCL reaches the double once per rank, in order, with
//     the engine's own communicator, count, type, op, root, buffers and stream; one routed to
//     tpcomm never reaches it; every result is checked element by element either way;
//   - inits, splits, groups, finalize, destroy and abort are forwarded; the double's failures
//     come back to the engine unchanged.
// PyTorch's shape runs with ranks as threads and (CPU only) as processes, llama.cpp's from one
// thread. Modes (ctest runs each; the routing expectation follows from the environment):
//   no GPU (label cpu; CUDA_VISIBLE_DEVICES=): the shim cannot query the stream's capture
//     state, so it never sets tpcomm up and every call goes to NCCL, exactly as with
//     TPCOMM_SHIM=0; host buffers.
//   --gpu (label gpu; exit 77 without a GPU): ranks share GPU 0 (TPCOMM_ALLOW_SHARED_DEVICE=1),
//     device buffers; with TPCOMM_ALGO=^ring_nccl every call tpcomm can run goes to tpcomm, with
//     TPCOMM_ALGO=ring_nccl none does, but tpcomm is set up all the same (one-rank shape: a
//     private non-blocking split of each engine communicator, torn down with it).
// To cover another call, add a row to kCalls.
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "fake_nccl.h"
#include "fake_processes.h"
#include "fake_values.h"
#include "gpu/gpu_allreduce_util.h"

namespace {

using fake_values::Type;

bool gGpu = false;  // --gpu

bool shimOn() {
  const char* v = std::getenv("TPCOMM_SHIM");
  return !v || std::string(v) != "0";
}
std::string algoEnv() {
  const char* v = std::getenv("TPCOMM_ALGO");
  return v ? v : "";
}

enum class Fn { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kReduce };
const char* ncclName(Fn f) {
  const char* k[] = {"ncclAllReduce", "ncclReduceScatter", "ncclAllGather", "ncclBroadcast", "ncclReduce"};
  return k[static_cast<int>(f)];
}

struct Call {
  const char* name;
  Fn fn;
  ncclDataType_t dtype;
  ncclRedOp_t op;  // all-gather and broadcast: ignored
  size_t count;    // the call's own (reduce-scatter: recvcount, all-gather: sendcount)
  bool inPlace;
};

// clang-format off
const std::vector<Call> kCalls = {
    {"ar f32 sum",             Fn::kAllReduce,     ncclFloat32,  ncclSum,  1000,  false},
    {"ar bf16 max in place",   Fn::kAllReduce,     ncclBfloat16, ncclMax,  4096,  true},
    {"ar f16 min 140K",        Fn::kAllReduce,     ncclFloat16,  ncclMin,  70000, false},
    {"ar f32 one element",     Fn::kAllReduce,     ncclFloat32,  ncclSum,  1,     false},
    {"ar f32 prod",            Fn::kAllReduce,     ncclFloat32,  ncclProd, 1000,  false},  // NCCL only: op
    {"ar bf16 avg",            Fn::kAllReduce,     ncclBfloat16, ncclAvg,  100,   false},  // NCCL only: op
    {"ar i32 sum",             Fn::kAllReduce,     ncclInt32,    ncclSum,  1000,  false},  // NCCL only: type
    {"ar f64 max",             Fn::kAllReduce,     ncclFloat64,  ncclMax,  64,    false},  // NCCL only: type
    {"ar count 0",             Fn::kAllReduce,     ncclFloat32,  ncclSum,  0,     false},  // NCCL only: count
    {"rs f32 sum",             Fn::kReduceScatter, ncclFloat32,  ncclSum,  512,   false},
    {"rs bf16 max in place",   Fn::kReduceScatter, ncclBfloat16, ncclMax,  40000, true},
    {"rs i64 sum",             Fn::kReduceScatter, ncclInt64,    ncclSum,  10,    false},  // NCCL only: type
    {"ag f16",                 Fn::kAllGather,     ncclFloat16,  ncclSum,  3000,  false},
    {"ag f32 in place",        Fn::kAllGather,     ncclFloat32,  ncclSum,  20000, true},
    {"ag u8",                  Fn::kAllGather,     ncclUint8,    ncclSum,  100,   false},  // NCCL only: type
    {"broadcast f32",          Fn::kBroadcast,     ncclFloat32,  ncclSum,  1000,  false},  // not intercepted
    {"reduce f32 sum",         Fn::kReduce,        ncclFloat32,  ncclSum,  1000,  false},  // not intercepted
};
// clang-format on

// Where the routing table sends `c` in this run.
bool toTpcomm(const Call& c) {
  if (!gGpu || !shimOn() || algoEnv() != "^ring_nccl") return false;
  const bool kind = c.fn == Fn::kAllReduce || c.fn == Fn::kReduceScatter || c.fn == Fn::kAllGather;
  const bool type = c.dtype == ncclFloat32 || c.dtype == ncclFloat16 || c.dtype == ncclBfloat16;
  const bool op = c.fn == Fn::kAllGather || c.op == ncclSum || c.op == ncclMax || c.op == ncclMin;
  return kind && type && op && c.count > 0;
}

// This thread's stream for the test's own copies and allocations (--gpu). Nothing here touches
// the legacy stream or synchronizes the device: another rank's kernel may be waiting for this
// thread's next call.
cudaStream_t ioStream() {
  thread_local cudaStream_t s = [] {
    cudaStream_t x = nullptr;
    EXPECT_EQ(cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking), cudaSuccess);
    return x;
  }();
  return s;
}

// A buffer in device memory (--gpu) or host memory.
class Mem {
 public:
  explicit Mem(size_t bytes) {
    if (gGpu)
      EXPECT_EQ(cudaMallocAsync(&p_, bytes + 1, ioStream()), cudaSuccess);
    else
      p_ = std::malloc(bytes + 1);
  }
  ~Mem() {
    if (gGpu)
      cudaFreeAsync(p_, ioStream());
    else
      std::free(p_);
  }
  Mem(const Mem&) = delete;
  Mem& operator=(const Mem&) = delete;
  char* p() const { return static_cast<char*>(p_); }
  void put(const std::vector<char>& v) {
    if (!gGpu) return (void)std::memcpy(p_, v.data(), v.size());
    EXPECT_EQ(cudaMemcpyAsync(p_, v.data(), v.size(), cudaMemcpyHostToDevice, ioStream()), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(ioStream()), cudaSuccess);
  }
  std::vector<char> get(size_t offset, size_t bytes) const {
    std::vector<char> v(bytes);
    if (!gGpu) return std::memcpy(v.data(), p() + offset, bytes), v;
    EXPECT_EQ(cudaMemcpyAsync(v.data(), p() + offset, bytes, cudaMemcpyDeviceToHost, ioStream()), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(ioStream()), cudaSuccess);
    return v;
  }

 private:
  void* p_ = nullptr;
};

// What the double must have logged for one call on one rank.
struct Expect {
  std::string fn;
  size_t count;
  int dtype, op, root;
  const void* send;
  void* recv;
  cudaStream_t stream;
  int inGroup;
};

// One rank's part of one call: buffers (poisoned output, inputs from fake_values), the answer.
struct RankCall {
  const Call& c;
  const Type& t;
  int rank, n, root;
  Mem send, recv;
  std::vector<char> want;
  size_t outOffset = 0;
  const void* sendPtr;
  void* recvPtr;

  RankCall(const Call& call, int r, int nranks)
      : c(call),
        t(fake_values::typeOf(call.dtype)),
        rank(r),
        n(nranks),
        root(nranks - 1),
        send(call.count * t.size * (call.fn == Fn::kReduceScatter ? nranks : 1)),
        recv(call.count * t.size * (call.fn == Fn::kAllGather ? nranks : 1)) {
    const size_t cnt = c.count, es = t.size;
    auto in = [&](int q, size_t i) { return fake_values::input(t, c.op, q, i); };
    auto all = [&](size_t i) { return fake_values::expected(t, c.op, n, i); };
    recv.put(std::vector<char>(cnt * es * (c.fn == Fn::kAllGather ? n : 1), 0x5a));
    sendPtr = send.p();
    recvPtr = recv.p();
    switch (c.fn) {
      case Fn::kAllReduce:
        send.put(fake_values::buffer(t, cnt, [&](size_t i) { return in(rank, i); }));
        want = fake_values::buffer(t, cnt, all);
        if (c.inPlace) recvPtr = send.p();
        break;
      case Fn::kReduceScatter:
        send.put(fake_values::buffer(t, cnt * n, [&](size_t i) { return in(rank, i); }));
        want = fake_values::buffer(t, cnt, [&](size_t i) { return all(rank * cnt + i); });
        if (c.inPlace) recvPtr = send.p() + rank * cnt * es, outOffset = rank * cnt * es;
        break;
      case Fn::kAllGather: {
        auto mine = fake_values::buffer(t, cnt, [&](size_t i) { return in(rank, i); });
        send.put(mine);
        want = fake_values::buffer(t, cnt * n, [&](size_t i) { return in(static_cast<int>(i / cnt), i % cnt); });
        if (c.inPlace) {
          std::vector<char> r = recv.get(0, cnt * es * n);
          std::memcpy(r.data() + rank * cnt * es, mine.data(), mine.size());
          recv.put(r);
          sendPtr = recv.p() + rank * cnt * es;
        }
        break;
      }
      case Fn::kBroadcast:
        send.put(fake_values::buffer(t, cnt, [&](size_t i) { return in(rank, i); }));
        want = fake_values::buffer(t, cnt, [&](size_t i) { return in(root, i); });
        break;
      case Fn::kReduce:
        send.put(fake_values::buffer(t, cnt, [&](size_t i) { return in(rank, i); }));
        want = rank == root ? fake_values::buffer(t, cnt, all) : std::vector<char>(cnt * es, 0x5a);
        break;
    }
  }

  ncclResult_t issue(ncclComm_t comm, cudaStream_t s) {
    switch (c.fn) {
      case Fn::kAllReduce:
        return ncclAllReduce(sendPtr, recvPtr, c.count, c.dtype, c.op, comm, s);
      case Fn::kReduceScatter:
        return ncclReduceScatter(sendPtr, recvPtr, c.count, c.dtype, c.op, comm, s);
      case Fn::kAllGather:
        return ncclAllGather(sendPtr, recvPtr, c.count, c.dtype, comm, s);
      case Fn::kBroadcast:
        return ncclBroadcast(sendPtr, recvPtr, c.count, c.dtype, root, comm, s);
      case Fn::kReduce:
        return ncclReduce(sendPtr, recvPtr, c.count, c.dtype, c.op, root, comm, s);
    }
    return ncclInternalError;
  }

  Expect expect(cudaStream_t s, bool inGroup) const {
    const bool reduces = c.fn == Fn::kAllReduce || c.fn == Fn::kReduceScatter || c.fn == Fn::kReduce;
    const bool rooted = c.fn == Fn::kBroadcast || c.fn == Fn::kReduce;
    return {ncclName(c.fn), c.count, c.dtype,        reduces ? static_cast<int>(c.op) : -1, rooted ? root : -1, sendPtr,
            recvPtr,        s,       inGroup ? 1 : 0};
  }

  void verify(cudaStream_t s) const {
    if (gGpu) ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    const Mem& out = c.inPlace && c.fn != Fn::kAllGather ? send : recv;
    std::vector<char> got = out.get(outOffset, want.size());
    EXPECT_EQ(fake_values::firstDifference(t, got, want), -1) << c.name << ": rank " << rank << " of " << n;
  }
};

bool isCollective(const fakeNcclCall& c) {
  for (Fn f : {Fn::kAllReduce, Fn::kReduceScatter, Fn::kAllGather, Fn::kBroadcast, Fn::kReduce})
    if (std::string(c.fn) == ncclName(f)) return true;
  return false;
}

// The collectives the double saw on `comm`, against those the routing table sends to it.
void expectLogged(const std::vector<fakeNcclCall>& log, ncclComm_t comm, int rank, int n,
                  const std::vector<Expect>& want) {
  std::vector<fakeNcclCall> got;
  for (const auto& c : log)
    if (c.comm == comm && isCollective(c)) got.push_back(c);
  ASSERT_EQ(got.size(), want.size()) << "rank " << rank << ": collectives that reached the double";
  for (size_t i = 0; i < got.size(); ++i) {
    const fakeNcclCall& g = got[i];
    const Expect& w = want[i];
    SCOPED_TRACE("rank " + std::to_string(rank) + ", call " + std::to_string(i) + " (" + w.fn + ")");
    EXPECT_EQ(g.fn, w.fn);
    EXPECT_EQ(g.rank, rank);
    EXPECT_EQ(g.nranks, n);
    EXPECT_EQ(g.count, w.count);
    EXPECT_EQ(g.dtype, w.dtype);
    EXPECT_EQ(g.op, w.op);
    EXPECT_EQ(g.root, w.root);
    EXPECT_EQ(g.sendbuff, w.send);
    EXPECT_EQ(g.recvbuff, w.recv);
    EXPECT_EQ(g.stream, w.stream);
    EXPECT_EQ(g.inGroup, w.inGroup);
    EXPECT_EQ(g.result, ncclSuccess);
  }
}

// A rank's stream. Without a GPU, a distinct made-up handle: neither the shim nor the double
// dereferences it there, so the log shows whether each call carried the engine's stream.
cudaStream_t makeStream() {
  static std::atomic<uintptr_t> next{0x57000};
  cudaStream_t s = reinterpret_cast<cudaStream_t>(next += 0x100);
  if (gGpu) EXPECT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  return s;
}
void dropStream(cudaStream_t s) {
  if (gGpu) cudaStreamDestroy(s);
}

std::string objectOf(const void* p) {
  Dl_info info;
  if (!p || !dladdr(p, &info) || !info.dli_fname) return "none";
  std::string s = info.dli_fname;
  return s.substr(s.rfind('/') + 1);
}

// The shim's private splits of `engine` comms in `log` (the one-rank set-up).
std::vector<fakeNcclCall> shimSplits(const std::vector<fakeNcclCall>& log, const std::set<ncclComm_t>& engine) {
  std::vector<fakeNcclCall> out;
  for (const auto& c : log)
    if (std::string(c.fn) == "ncclCommSplit" && engine.count(c.parent) && c.blocking == 0) out.push_back(c);
  return out;
}

TEST(ShimOverFake, BindsAsAnEngineSeesIt) {
  EXPECT_EQ(fakeNcclIsFake(), 1);
  EXPECT_EQ(objectOf(reinterpret_cast<void*>(&ncclAllReduce)), "libtpcomm_nccl.so") << "run under LD_PRELOAD";
  EXPECT_EQ(objectOf(reinterpret_cast<void*>(&ncclCommInitRank)), "libtpcomm_nccl.so");
  EXPECT_EQ(objectOf(reinterpret_cast<void*>(&ncclBroadcast)), "libfake_nccl.so.2");
  EXPECT_EQ(objectOf(reinterpret_cast<void*>(&ncclGetUniqueId)), "libfake_nccl.so.2");
  EXPECT_EQ(fakeNcclHostOnly(), gGpu ? 0 : 1);
}

// One rank of PyTorch's shape (a process each in an engine; here a thread or a process): the
// unique id, InitRank (odd ranks through InitRankConfig), every call eager on the rank's own
// stream, then finalize and destroy, or abort. `want` gets the calls the double must see.
void oneRank(int r, int n, const ncclUniqueId& id, bool abortAtEnd, ncclComm_t* comm, std::vector<Expect>* want) {
  if (gGpu) ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t stream = makeStream();
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  ncclResult_t init = r % 2 ? ncclCommInitRankConfig(comm, n, id, r, &cfg) : ncclCommInitRank(comm, n, id, r);
  ASSERT_EQ(init, ncclSuccess);
  for (const Call& c : kCalls) {
    RankCall rc(c, r, n);
    ASSERT_EQ(rc.issue(*comm, stream), ncclSuccess) << c.name;
    rc.verify(stream);
    if (!toTpcomm(c)) want->push_back(rc.expect(stream, false));
  }
  if (abortAtEnd) {
    EXPECT_EQ(ncclCommAbort(*comm), ncclSuccess);
  } else {
    EXPECT_EQ(ncclCommFinalize(*comm), ncclSuccess);
    EXPECT_EQ(ncclCommDestroy(*comm), ncclSuccess);
  }
  dropStream(stream);
}

// What the double logged for rank `r` of oneRank: the calls routed to NCCL, the lifecycle.
void checkRank(const std::vector<fakeNcclCall>& log, ncclComm_t comm, int r, int n, const std::vector<Expect>& want,
               bool abortAtEnd) {
  expectLogged(log, comm, r, n, want);
  std::vector<std::string> lifecycle;
  for (const auto& c : log)
    if (c.comm == comm && !isCollective(c)) {
      lifecycle.push_back(c.fn);
      EXPECT_EQ(c.result, ncclSuccess) << c.fn;
    }
  std::vector<std::string> expected = {r % 2 ? "ncclCommInitRankConfig" : "ncclCommInitRank"};
  for (const char* fn : abortAtEnd ? std::vector<const char*>{"ncclCommAbort"}
                                   : std::vector<const char*>{"ncclCommFinalize", "ncclCommDestroy"})
    expected.push_back(fn);
  EXPECT_EQ(lifecycle, expected) << "rank " << r;
}

// tpcomm's one-rank set-up: a private non-blocking split of each engine communicator (with a
// GPU and the shim on), gone with it; nothing at all without a GPU.
void checkSetUp(const std::vector<fakeNcclCall>& log, const std::set<ncclComm_t>& engine, bool abortAtEnd) {
  std::vector<fakeNcclCall> splits = shimSplits(log, engine);
  if (!gGpu || !shimOn()) {
    EXPECT_TRUE(splits.empty()) << "the shim set tpcomm up without a GPU";
    for (const auto& c : log)
      EXPECT_TRUE(engine.count(c.comm) || c.comm == nullptr) << c.fn << " on a comm not the engine's";
    return;
  }
  ASSERT_EQ(splits.size(), engine.size()) << "one private split per engine communicator";
  for (const auto& s : splits) {
    EXPECT_EQ(s.result, ncclSuccess);
    std::vector<std::string> after;
    for (const auto& c : log)
      if (c.comm == s.comm && c.seq > s.seq && !isCollective(c)) after.push_back(c.fn);
    EXPECT_EQ(after, std::vector<std::string>{abortAtEnd ? "ncclCommAbort" : "ncclCommDestroy"});
  }
}

void perThreadRanks(int n, bool abortAtEnd) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  const size_t from = fakeNcclLogCount();
  std::vector<ncclComm_t> comms(n, nullptr);
  std::vector<std::vector<Expect>> want(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { oneRank(r, n, id, abortAtEnd, &comms[r], &want[r]); });
  for (auto& t : threads) t.join();
  std::vector<fakeNcclCall> log = fakeNcclLogSince(from);
  for (int r = 0; r < n; ++r) checkRank(log, comms[r], r, n, want[r], abortAtEnd);
  checkSetUp(log, std::set<ncclComm_t>(comms.begin(), comms.end()), abortAtEnd);
}

TEST(ShimOverFake, PerThreadRanksTwo) { perThreadRanks(2, false); }
TEST(ShimOverFake, PerThreadRanksThreeAborted) { perThreadRanks(3, true); }

// PyTorch's shape as it runs, a process per rank: this program again, once per rank, running
// only DISABLED_ProcessRank (fake_processes.h: the preload and the rest of the environment are
// inherited); each checks its own process's log. CPU only.
TEST(ShimOverFake, RanksAsProcesses) {
  if (gGpu) GTEST_SKIP() << "ranks as processes sharing one GPU are not covered here";
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  std::vector<int> codes = fake_processes::runRanks(
      3, id, {"--gtest_also_run_disabled_tests", "--gtest_filter=ShimOverFake.DISABLED_ProcessRank"});
  for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

TEST(ShimOverFake, DISABLED_ProcessRank) {
  int r = -1, n = 0;
  ncclUniqueId id;
  ASSERT_TRUE(fake_processes::rankFromEnv(&r, &n, &id)) << "run by RanksAsProcesses";
  ncclComm_t comm = nullptr;
  std::vector<Expect> want;
  oneRank(r, n, id, false, &comm, &want);
  std::vector<fakeNcclCall> log = fakeNcclLogSince(0);
  checkRank(log, comm, r, n, want, false);
  checkSetUp(log, {comm}, false);
}

// llama.cpp's shape: ncclCommInitAll, then each call as GroupStart / one call per rank / GroupEnd
// from one thread, in place where the row says so.
TEST(ShimOverFake, OneThreadDrivesAllRanks) {
  const int n = 2;
  std::vector<ncclComm_t> comms(n, nullptr);
  const std::vector<int> devs(n, 0);
  const size_t from = fakeNcclLogCount();
  ASSERT_EQ(ncclCommInitAll(comms.data(), n, devs.data()), ncclSuccess);
  std::vector<cudaStream_t> streams(n);
  for (int r = 0; r < n; ++r) streams[r] = makeStream();
  std::vector<std::vector<Expect>> want(n);
  // The first call tpcomm could run asks for the set-up, which runs right after the outermost
  // ncclGroupEnd: that call itself goes to NCCL in every mode.
  std::vector<Call> rows = kCalls;
  rows.insert(rows.begin(), kCalls[0]);
  for (size_t k = 0; k < rows.size(); ++k) {
    const Call& c = rows[k];
    std::vector<std::unique_ptr<RankCall>> calls;
    for (int r = 0; r < n; ++r) calls.emplace_back(new RankCall(c, r, n));
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < n; ++r) ASSERT_EQ(calls[r]->issue(comms[r], streams[r]), ncclSuccess) << c.name;
    ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << c.name;
    for (int r = 0; r < n; ++r) {
      calls[r]->verify(streams[r]);
      if (k == 0 || !toTpcomm(c)) want[r].push_back(calls[r]->expect(streams[r], true));
    }
  }
  for (int r = 0; r < n; ++r) EXPECT_EQ(ncclCommDestroy(comms[r]), ncclSuccess);
  std::vector<fakeNcclCall> log = fakeNcclLogSince(from);
  int groups = 0;
  for (const auto& c : log) groups += std::string(c.fn) == "ncclGroupEnd" && c.result == ncclSuccess;
  EXPECT_EQ(groups, static_cast<int>(kCalls.size()) + 1) << "every ncclGroupEnd reached the double";
  for (int r = 0; r < n; ++r) {
    expectLogged(log, comms[r], r, n, want[r]);
    int inits = 0, destroys = 0;
    for (const auto& c : log) {
      inits += c.comm == comms[r] && std::string(c.fn) == "ncclCommInitAll" && c.device == 0 && c.rank == r;
      destroys += c.comm == comms[r] && std::string(c.fn) == "ncclCommDestroy";
    }
    EXPECT_EQ(inits, 1);
    EXPECT_EQ(destroys, 1);
    dropStream(streams[r]);
  }
  // A clique is set up in process (createGroup): no private split.
  EXPECT_TRUE(shimSplits(log, std::set<ncclComm_t>(comms.begin(), comms.end())).empty());
}

// The engine's own split: forwarded, and the new communicators route like any other.
TEST(ShimOverFake, EngineSplit) {
  const int n = 4;
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  const size_t from = fakeNcclLogCount();
  std::vector<ncclComm_t> comms(n), subs(n);
  std::vector<std::thread> threads;
  // Every rank's split and stream made before any rank issues: the two halves' communicators
  // are made independently, and with ranks sharing one GPU a half whose all-reduce already spins
  // can hold the other half's set-up in a CUDA call that waits for the device (seen once on one
  // H200: 10 s, then both ranks of a half timed out). A rank that fails its set-up still arrives.
  std::mutex m;
  std::condition_variable cv;
  int ready = 0;
  auto arrive = [&] {
    std::unique_lock<std::mutex> lock(m);
    if (++ready == n) cv.notify_all();
    cv.wait(lock, [&] { return ready >= n; });
  };
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      bool arrived = false;
      struct Leave {  // arrives on an early return (a failed ASSERT) so no peer waits forever
        std::function<void()> f;
        ~Leave() { f(); }
      } leave{[&] {
        if (!arrived) arrive();
      }};
      if (gGpu) ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
      ASSERT_EQ(ncclCommInitRank(&comms[r], n, id, r), ncclSuccess);
      ASSERT_EQ(ncclCommSplit(comms[r], r % 2, r, &subs[r], nullptr), ncclSuccess);
      ASSERT_NE(subs[r], nullptr);
      cudaStream_t s = makeStream();
      arrived = true;
      arrive();
      RankCall rc(kCalls[0], r / 2, 2);
      ASSERT_EQ(rc.issue(subs[r], s), ncclSuccess);
      rc.verify(s);
      dropStream(s);
      EXPECT_EQ(ncclCommDestroy(subs[r]), ncclSuccess);
      EXPECT_EQ(ncclCommDestroy(comms[r]), ncclSuccess);
    });
  for (auto& t : threads) t.join();
  std::vector<fakeNcclCall> log = fakeNcclLogSince(from);
  for (int r = 0; r < n; ++r) {
    int splits = 0, calls = 0;
    for (const auto& c : log) {
      splits += std::string(c.fn) == "ncclCommSplit" && c.parent == comms[r] && c.comm == subs[r] && c.color == r % 2 &&
                c.key == r && c.rank == r / 2 && c.nranks == 2;
      calls += c.comm == subs[r] && std::string(c.fn) == "ncclAllReduce";
    }
    EXPECT_EQ(splits, 1) << "rank " << r;
    EXPECT_EQ(calls, toTpcomm(kCalls[0]) ? 0 : 1) << "rank " << r;
  }
}

// The double's failures reach the engine unchanged, for a call routed to NCCL (prod: in every
// mode), an init, a group end and a destroy.
TEST(ShimOverFake, ErrorsComeBackUnchanged) {
  const int n = 2;
  std::vector<ncclComm_t> comms(n);
  const std::vector<int> devs(n, 0);
  ASSERT_EQ(ncclCommInitAll(comms.data(), n, devs.data()), ncclSuccess);
  const Call& prod = kCalls[4];
  ASSERT_EQ(prod.op, ncclProd);
  for (ncclResult_t code : {ncclUnhandledCudaError, ncclSystemError, ncclInternalError, ncclInvalidArgument,
                            ncclInvalidUsage, ncclRemoteError}) {
    fakeNcclInjectError("ncclAllReduce", code, n);
    for (int r = 0; r < n; ++r) {
      RankCall rc(prod, r, n);
      EXPECT_EQ(rc.issue(comms[r], nullptr), code) << ncclGetErrorString(code);
    }
  }
  fakeNcclInjectError("ncclGroupEnd", ncclInternalError, 1);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclInternalError);
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t c = reinterpret_cast<ncclComm_t>(0x1);
  fakeNcclInjectError("ncclCommInitRank", ncclSystemError, 1);
  EXPECT_EQ(ncclCommInitRank(&c, 2, id, 0), ncclSystemError);
  // The double's own argument checks: a communicator it does not know, a null buffer.
  float x = 1;
  EXPECT_EQ(ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, reinterpret_cast<ncclComm_t>(0x10), nullptr),
            ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(&x, nullptr, 1, ncclFloat32, ncclSum, comms[0], nullptr), ncclInvalidArgument);
  fakeNcclInjectError("ncclCommDestroy", ncclUnhandledCudaError, 1);
  EXPECT_EQ(ncclCommDestroy(comms[0]), ncclUnhandledCudaError);
  for (int r = 0; r < n; ++r) EXPECT_EQ(ncclCommDestroy(comms[r]), ncclSuccess) << "rank " << r;
  EXPECT_EQ(ncclCommDestroy(comms[0]), ncclInvalidArgument) << "destroyed twice";
}

}  // namespace

// --gpu: the GPU variant (exit 77 without a CUDA device). Otherwise no device may be visible.
int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--gpu") gGpu = true;
  if (gGpu) {
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      std::printf("tpcomm_shim_fake: SKIPPED: no CUDA device\n");
      return 77;
    }
    const std::string line = tpcomm_test::shareGpus(4, 1);
    std::printf("tpcomm_shim_fake --gpu: %s; TPCOMM_ALGO=%s\n", line.c_str(), algoEnv().c_str());
    if (algoEnv() != "ring_nccl" && algoEnv() != "^ring_nccl") {
      std::printf("tpcomm_shim_fake --gpu: set TPCOMM_ALGO to ring_nccl or ^ring_nccl (the routing it checks)\n");
      return 2;
    }
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
