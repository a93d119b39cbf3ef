// The fault matrix: every algorithm (each collective it serves, compressed and fused forms
// included) at the run's rank count (TPCOMM_TEST_RANKS, rankDevices()) under the faults a
// deployment meets. Each case first makes one sound call and keeps its output as "right"
// (checked against the exact host reference where the algorithm is exact), then:
//   - LateBeyondBound: one rank (first, middle or last) starts 400 ms late (its call made at once,
//     its kernel queued behind a 400 ms kernel), the bound is 150 ms: every rank reports kTimeout
//     (the late one too), outputs are right or untouched, every rank's message names the late
//     rank and says it made the call but its kernel had not started; then 20 eager calls
//     (refused with kTimeout) and 20 replays of graphs captured before the fault (right or
//     untouched, never a wrong value);
//   - LateWithinBound: the same rank 30 ms late under a 3 s bound: kOk and right;
//   - TwoStreams: 40 calls alternating between two streams with no user synchronisation;
//   - MismatchedCall: the last rank asks for half the count (TPCOMM_CHECK_CALLS=1, the GPU tests'
//     main): every rank reports kInvalidArgument, "a call differed from rank ...", outputs untouched;
//   - AbortWhilePeersSpin: rank 0 never calls, the others spin; aborting every rank ends within
//     the bound (3 s) plus 2 s;
//   - SpecialValues (uncompressed): +-0, NaN and +-Inf spread over the ranks: the host
//     reference's bits (any NaN for NaN), the same on every rank.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/params.h"
#include "gpu_allreduce_util.h"

namespace tpcomm_test {
namespace {

using tpcomm::Communicator;
using tpcomm::Compression;
using tpcomm::Config;
using tpcomm::Status;

enum class Coll { kAllReduce, kReduceScatter, kAllGather, kFused };

struct Spec {
  const char* label;  // test name part
  const char* algo;   // Config::algo
  Compression wire;   // Config::compression
  Coll coll;
  bool capturable;   // CUDA graphs (staged_host on GPU ranks is eager only)
  bool copyEngines;  // TPCOMM_STAGED_COPY_ENGINES=1 while the ranks are created
};

const Spec kSpecs[] = {
    {"lamport", "lamport_p2p", Compression::kNone, Coll::kAllReduce, true, false},
    {"oneshot", "oneshot_p2p", Compression::kNone, Coll::kAllReduce, true, false},
    {"twoshot", "twoshot_p2p", Compression::kNone, Coll::kAllReduce, true, false},
    {"twoshot_rs", "twoshot_p2p", Compression::kNone, Coll::kReduceScatter, true, false},
    {"twoshot_ag", "twoshot_p2p", Compression::kNone, Coll::kAllGather, true, false},
    {"ll_rs", "ll_p2p", Compression::kNone, Coll::kReduceScatter, true, false},
    {"ll_ag", "ll_p2p", Compression::kNone, Coll::kAllGather, true, false},
    {"staged", "staged_host", Compression::kNone, Coll::kAllReduce, false, false},
    {"staged_ce", "staged_host", Compression::kNone, Coll::kAllReduce, false, true},
    {"twoshot_int8", "twoshot_p2p+int8", Compression::kInt8, Coll::kAllReduce, true, false},
    {"staged_fp8", "staged_host+fp8|staged_host", Compression::kFp8, Coll::kAllReduce, false, false},
    {"fused_lamport", "lamport_p2p", Compression::kNone, Coll::kFused, true, false},
    {"fused_oneshot", "oneshot_p2p", Compression::kNone, Coll::kFused, true, false},
    {"fused_twoshot", "twoshot_p2p", Compression::kNone, Coll::kFused, true, false},
};

constexpr DataType kDt = DataType::kBF16;
constexpr size_t kEs = 2;
constexpr size_t kHidden = 1024, kRows = 4;  // fused calls: 4 rows of 1024
constexpr size_t kPiece = 4096;              // elements per rank's piece (all-reduce: the whole count)

// Spins for `ns` nanoseconds (a late rank's host work, as its stream sees it).
__global__ void spinKernel(uint64_t ns) {
  uint64_t t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

// N ranks on `spec`, each with input, output, residual and weight buffers; aborted at the end
// (some cases leave their communicators failed on purpose).
struct World {
  const Spec& spec;
  std::unique_ptr<RankGroup> g;
  std::vector<void*> in, out, residual, weight;
  std::vector<std::vector<uint8_t>> inputs, residuals;
  size_t inCount = 0, outCount = 0;
  explicit World(const Spec& s) : spec(s) {}
  int n() const { return g->n(); }
  ~World() {
    if (!g) return;
    for (auto& c : g->comms)
      if (c) c->abort();
    for (size_t r = 0; r < in.size(); ++r) {
      cudaSetDevice(g->devices[r]);
      for (void* p : {in[r], out[r], residual[r], weight[r]}) cudaFree(p);
    }
  }
  // Enqueues rank r's call of the collective on `stream` (count: the per-rank count of the
  // call's kind; 0 takes the world's).
  Status issue(int r, cudaStream_t stream, size_t count = 0) {
    Communicator& c = *g->comms[r];
    switch (spec.coll) {
      case Coll::kAllReduce:
        return c.allReduce(in[r], out[r], count ? count : inCount, kDt, ReduceOp::kSum, stream);
      case Coll::kReduceScatter:
        return c.reduceScatter(in[r], out[r], count ? count : outCount, kDt, ReduceOp::kSum, stream);
      case Coll::kAllGather:
        return c.allGather(in[r], out[r], count ? count : inCount, kDt, stream);
      case Coll::kFused:
        return c.allReduceResidualRmsNorm(in[r], residual[r], weight[r], 1e-6f, out[r], count ? count / kHidden : kRows,
                                          kHidden, kDt, stream);
    }
    return Status::kInternal;
  }
  // Inputs (and the fused call's residual) back to their values, outputs poisoned, drained.
  void reset() {
    for (int r = 0; r < n(); ++r) {
      cudaSetDevice(g->devices[r]);
      ASSERT_EQ(cudaMemcpy(in[r], inputs[r].data(), inputs[r].size(), cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(residual[r], residuals[r].data(), residuals[r].size(), cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaMemset(out[r], 0xff, outCount * kEs), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    }
  }
  std::vector<uint8_t> download(int r, const void* p, size_t bytes) {
    std::vector<uint8_t> h(bytes);
    cudaSetDevice(g->devices[r]);
    EXPECT_EQ(cudaMemcpy(h.data(), p, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
  void syncAll() {
    for (int r = 0; r < n(); ++r) {
      cudaSetDevice(g->devices[r]);
      ASSERT_EQ(cudaStreamSynchronize(g->streams[r]), cudaSuccess) << "rank " << r << "'s stream did not end";
    }
  }
};

// Creates the world for `spec` with `timeoutMs`, inputs of small integers (salt `salt`).
std::unique_ptr<World> makeWorld(const Spec& spec, int timeoutMs, uint64_t salt = 3) {
  if (spec.copyEngines) setenv("TPCOMM_STAGED_COPY_ENGINES", "1", 1);
  tpcomm::reloadParams();
  Config cfg;
  cfg.algo = spec.algo;
  cfg.timeoutMs = timeoutMs;
  cfg.compression = spec.wire;
  auto w = std::make_unique<World>(spec);
  w->g = makeRankGroup(cfg, spec.label);
  if (spec.copyEngines) {
    unsetenv("TPCOMM_STAGED_COPY_ENGINES");
    tpcomm::reloadParams();
  }
  if (!w->g) return nullptr;
  const int n = w->n();
  w->inCount = spec.coll == Coll::kReduceScatter ? kPiece * n : spec.coll == Coll::kFused ? kRows * kHidden : kPiece;
  w->outCount = spec.coll == Coll::kAllGather ? kPiece * n : spec.coll == Coll::kReduceScatter ? kPiece : w->inCount;
  for (int r = 0; r < n; ++r) {
    w->inputs.push_back(makeHost(kDt, w->inCount, [&](size_t i) { return intInput(r, i, salt); }));
    w->residuals.push_back(makeHost(kDt, kRows * kHidden, [&](size_t i) { return intInput(0, i, salt + 1); }));
    const auto weight = makeHost(kDt, kHidden, [&](size_t i) { return 0.5f + static_cast<float>(i % 3); });
    cudaSetDevice(w->g->devices[r]);
    void *a = nullptr, *b = nullptr, *c = nullptr, *d = nullptr;
    const bool ok =
        cudaMalloc(&a, w->inCount * kEs) == cudaSuccess && cudaMalloc(&b, w->outCount * kEs) == cudaSuccess &&
        cudaMalloc(&c, kRows * kHidden * kEs) == cudaSuccess && cudaMalloc(&d, kHidden * kEs) == cudaSuccess &&
        cudaMemcpy(d, weight.data(), weight.size(), cudaMemcpyHostToDevice) == cudaSuccess;
    w->in.push_back(a);
    w->out.push_back(b);
    w->residual.push_back(c);
    w->weight.push_back(d);
    if (!ok) {
      ADD_FAILURE() << "device buffers for rank " << r;
      return nullptr;
    }
  }
  return w;
}

// The right outputs (and fused residuals) of rank r: from one sound call, checked against the
// exact host reference where the collective is exact (plain all-reduce, reduce-scatter,
// all-gather; compressed and fused results are checked by their own suites).
struct Right {
  std::vector<std::vector<uint8_t>> out, residual;
};

void soundCall(World& w, Right* right) {
  w.reset();
  for (int r = 0; r < w.n(); ++r) ASSERT_EQ(w.issue(r, w.g->streams[r]), Status::kOk) << tpcomm::lastErrorMessage();
  w.syncAll();
  for (int r = 0; r < w.n(); ++r) {
    ASSERT_EQ(w.g->comms[r]->checkError(), Status::kOk) << tpcomm::lastErrorMessage();
    right->out.push_back(w.download(r, w.out[r], w.outCount * kEs));
    right->residual.push_back(w.download(r, w.residual[r], kRows * kHidden * kEs));
  }
  if (w.spec.wire != Compression::kNone || w.spec.coll == Coll::kFused) return;
  std::vector<uint8_t> want;
  if (w.spec.coll == Coll::kAllGather) {
    for (const auto& in : w.inputs) want.insert(want.end(), in.begin(), in.end());
  }
  for (int r = 0; r < w.n(); ++r) {
    if (w.spec.coll == Coll::kAllReduce) want = reference(w.inputs, kDt, ReduceOp::kSum, w.inCount);
    if (w.spec.coll == Coll::kReduceScatter) {
      std::vector<std::vector<uint8_t>> pieces;
      for (const auto& in : w.inputs)
        pieces.emplace_back(in.begin() + static_cast<long>(r * kPiece * kEs),
                            in.begin() + static_cast<long>((r + 1) * kPiece * kEs));
      want = reference(pieces, kDt, ReduceOp::kSum, kPiece);
    }
    ASSERT_EQ(firstMismatch(right->out[r], want, kEs), -1) << "rank " << r << ": the sound call is wrong";
  }
}

// Every rank's output (and fused residual) is right or untouched.
void expectRightOrUntouched(World& w, const Right& right, const char* when) {
  const std::vector<uint8_t> untouched(w.outCount * kEs, 0xff);
  for (int r = 0; r < w.n(); ++r) {
    const auto out = w.download(r, w.out[r], w.outCount * kEs);
    EXPECT_TRUE(out == right.out[r] || out == untouched)
        << "rank " << r << " " << when << ": a wrong value at element " << firstMismatch(out, right.out[r], kEs);
    if (w.spec.coll == Coll::kFused) {
      const auto res = w.download(r, w.residual[r], kRows * kHidden * kEs);
      EXPECT_TRUE(res == right.residual[r] || res == w.residuals[r])
          << "rank " << r << " " << when << ": a wrong residual";
    }
  }
}

int lateRank(int position, int n) { return position == 0 ? 0 : position == 1 ? n / 2 : n - 1; }
const char* const kPosition[] = {"first", "middle", "last"};

class FaultMatrix : public testing::TestWithParam<std::tuple<int, int>> {
 protected:
  const Spec& spec() const { return kSpecs[std::get<0>(GetParam())]; }
  int position() const { return std::get<1>(GetParam()); }
};

TEST_P(FaultMatrix, LateBeyondBound) {
  auto w = makeWorld(spec(), 150);
  ASSERT_NE(w, nullptr);
  Right right;
  ASSERT_NO_FATAL_FAILURE(soundCall(*w, &right));
  const int n = w->n(), late = lateRank(position(), n);
  RankGraphs graphs;
  if (spec().capturable) {
    captureOnEveryRank(
        *w->g,
        [&] {
          for (int r = 0; r < n; ++r)
            ASSERT_EQ(w->issue(r, w->g->streams[r]), Status::kOk) << tpcomm::lastErrorMessage();
        },
        &graphs);
    ASSERT_TRUE(graphs.ok());
  }
  w->reset();
  cudaSetDevice(w->g->devices[late]);
  spinKernel<<<1, 32, 0, w->g->streams[late]>>>(400ull * 1000 * 1000);
  for (int r = 0; r < n; ++r) ASSERT_EQ(w->issue(r, w->g->streams[r]), Status::kOk) << tpcomm::lastErrorMessage();
  ASSERT_NO_FATAL_FAILURE(w->syncAll());
  expectRightOrUntouched(*w, right, "in the faulty call");
  // Every rank, the late one included, says why: its host made the call (its call counter was
  // up to date) but its kernel had not started (its arrival word was an earlier call's).
  const std::string why = "rank " + std::to_string(late) + " made the call but its kernel had not started after 150 ms";
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(w->g->comms[r]->checkError(), Status::kTimeout) << "rank " << r << " (late: " << late << ")";
    const std::string msg = tpcomm::lastErrorMessage();
    if (r != late)
      EXPECT_NE(msg.find("waiting for rank " + std::to_string(late)), std::string::npos) << "rank " << r << ": " << msg;
    else
      EXPECT_NE(msg.find("waiting for this rank"), std::string::npos) << "rank " << r << ": " << msg;
    EXPECT_NE(msg.find(why), std::string::npos) << "rank " << r << ": " << msg;
  }
  for (int i = 0; i < 20; ++i) {
    w->reset();
    for (int r = 0; r < n; ++r) EXPECT_EQ(w->issue(r, w->g->streams[r]), Status::kTimeout) << "rank " << r;
    if (spec().capturable) ASSERT_TRUE(launchOnEveryRank(*w->g, graphs));
    ASSERT_NO_FATAL_FAILURE(w->syncAll());
    expectRightOrUntouched(*w, right, spec().capturable ? "after a replay" : "after a refused call");
  }
}

TEST_P(FaultMatrix, LateWithinBound) {
  auto w = makeWorld(spec(), 3000);
  ASSERT_NE(w, nullptr);
  Right right;
  ASSERT_NO_FATAL_FAILURE(soundCall(*w, &right));
  const int n = w->n(), late = lateRank(position(), n);
  for (int round = 0; round < 3; ++round) {
    w->reset();
    cudaSetDevice(w->g->devices[late]);
    spinKernel<<<1, 32, 0, w->g->streams[late]>>>(30ull * 1000 * 1000);
    for (int r = 0; r < n; ++r) ASSERT_EQ(w->issue(r, w->g->streams[r]), Status::kOk) << tpcomm::lastErrorMessage();
    ASSERT_NO_FATAL_FAILURE(w->syncAll());
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(w->g->comms[r]->checkError(), Status::kOk) << "rank " << r << ": " << tpcomm::lastErrorMessage();
      EXPECT_EQ(w->download(r, w->out[r], w->outCount * kEs), right.out[r]) << "rank " << r << " round " << round;
    }
  }
}

// The cases below do not depend on which rank is late: one per algorithm.
class FaultEach : public testing::TestWithParam<int> {
 protected:
  const Spec& spec() const { return kSpecs[GetParam()]; }
};

TEST_P(FaultEach, TwoStreams) {
  auto w = makeWorld(spec(), 0);
  ASSERT_NE(w, nullptr);
  Right right;
  ASSERT_NO_FATAL_FAILURE(soundCall(*w, &right));
  const int n = w->n();
  std::vector<cudaStream_t> second(n);
  for (int r = 0; r < n; ++r) {
    cudaSetDevice(w->g->devices[r]);
    ASSERT_EQ(cudaStreamCreateWithFlags(&second[r], cudaStreamNonBlocking), cudaSuccess);
  }
  w->reset();
  // Fused calls rewrite their residual in place: alternate streams on the plain collectives only.
  const int calls = w->spec.coll == Coll::kFused ? 1 : 40;
  for (int i = 0; i < calls; ++i)
    for (int r = 0; r < n; ++r)
      ASSERT_EQ(w->issue(r, i % 2 ? second[r] : w->g->streams[r]), Status::kOk) << tpcomm::lastErrorMessage();
  for (int r = 0; r < n; ++r) {
    cudaSetDevice(w->g->devices[r]);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(w->g->comms[r]->checkError(), Status::kOk) << tpcomm::lastErrorMessage();
    EXPECT_EQ(w->download(r, w->out[r], w->outCount * kEs), right.out[r]) << "rank " << r;
    cudaStreamDestroy(second[r]);
  }
}

TEST_P(FaultEach, MismatchedCall) {
  auto w = makeWorld(spec(), 2000);
  ASSERT_NE(w, nullptr);
  const int n = w->n();
  w->reset();
  const size_t full = w->spec.coll == Coll::kReduceScatter ? w->outCount : w->inCount;
  std::vector<Status> called(n);
  for (int r = 0; r < n; ++r) called[r] = w->issue(r, w->g->streams[r], r == n - 1 ? full / 2 : full);
  ASSERT_NO_FATAL_FAILURE(w->syncAll());
  const std::vector<uint8_t> untouched(w->outCount * kEs, 0xff);
  for (int r = 0; r < n; ++r) {
    const Status later = w->g->comms[r]->checkError();
    const std::string msg = tpcomm::lastErrorMessage();
    EXPECT_TRUE(called[r] != Status::kOk || later != Status::kOk)
        << "rank " << r << " got no error for a call the last rank made with half the count";
    if (called[r] != Status::kOk) continue;  // refused at the call: nothing ran
    EXPECT_EQ(later, Status::kInvalidArgument) << "rank " << r << ": " << msg;
    EXPECT_NE(msg.find("a call differed from rank"), std::string::npos) << "rank " << r << ": " << msg;
    EXPECT_TRUE(w->download(r, w->out[r], w->outCount * kEs) == untouched)
        << "rank " << r << " wrote its output in a call whose ranks differed";
  }
}

TEST_P(FaultEach, AbortWhilePeersSpin) {
  const int boundMs = 3000;
  auto w = makeWorld(spec(), boundMs);
  ASSERT_NE(w, nullptr);
  const int n = w->n();
  w->reset();
  for (int r = 1; r < n; ++r) ASSERT_EQ(w->issue(r, w->g->streams[r]), Status::kOk) << tpcomm::lastErrorMessage();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the peers are spinning on rank 0
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < n; ++r) EXPECT_EQ(w->g->comms[r]->abort(), Status::kOk) << "rank " << r;
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(ms, boundMs + 2000) << "aborting every rank took " << ms << " ms";
  std::printf("[ abort    ] %s, %d ranks: every rank aborted in %.1f ms\n", spec().label, n, ms);
  for (int r = 0; r < n; ++r) {
    cudaSetDevice(w->g->devices[r]);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
}

INSTANTIATE_TEST_SUITE_P(All, FaultEach, testing::Range(0, static_cast<int>(std::size(kSpecs))),
                         [](const testing::TestParamInfo<int>& i) { return std::string(kSpecs[i.param].label); });

std::vector<std::tuple<int, int>> matrixCases() {
  std::vector<std::tuple<int, int>> v;
  for (int s = 0; s < static_cast<int>(std::size(kSpecs)); ++s)
    for (int p = 0; p < 3; ++p) v.emplace_back(s, p);
  return v;
}

INSTANTIATE_TEST_SUITE_P(All, FaultMatrix, testing::ValuesIn(matrixCases()),
                         [](const testing::TestParamInfo<std::tuple<int, int>>& i) {
                           return std::string(kSpecs[std::get<0>(i.param)].label) + "_late_" +
                                  kPosition[std::get<1>(i.param)];
                         });

// +-0, NaN and +-Inf over the ranks, uncompressed, every dtype and op: element i of rank r is
// kOdd[(i / 7^min(r, 2) + r) % 7], so every combination of three ranks' values occurs.
bool sameValue(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, DataType dt, size_t i) {
  const float x = tpcomm::loadAsFloat(a.data(), i, dt), y = tpcomm::loadAsFloat(b.data(), i, dt);
  if (std::isnan(x) || std::isnan(y)) return std::isnan(x) && std::isnan(y);
  const size_t es = tpcomm::dataTypeSize(dt);
  return std::memcmp(a.data() + i * es, b.data() + i * es, es) == 0;
}

class SpecialValues : public testing::TestWithParam<std::tuple<const char*, DataType, ReduceOp>> {};

TEST_P(SpecialValues, HostReferenceBitsOnEveryRank) {
  auto [algo, dt, op] = GetParam();
  const float kOdd[] = {0.0f, -0.0f, NAN, INFINITY, -INFINITY, 1.0f, -2.0f};
  Config cfg;
  cfg.algo = algo;
  auto g = makeRankGroup(cfg, algo);
  ASSERT_NE(g, nullptr);
  const int n = g->n();
  const size_t count = 7 * 7 * 7 + 9, es = tpcomm::dataTypeSize(dt), bytes = count * es;
  std::vector<std::vector<uint8_t>> inputs;
  std::vector<void*> in(n), out(n);
  for (int r = 0; r < n; ++r) {
    const size_t stride = r == 0 ? 1 : r == 1 ? 7 : 49;
    inputs.push_back(makeHost(dt, count, [&](size_t i) { return kOdd[(i / stride + r) % 7]; }));
    cudaSetDevice(g->devices[r]);
    ASSERT_EQ(cudaMalloc(&in[r], bytes), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&out[r], bytes), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(in[r], inputs[r].data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemset(out[r], 0xff, bytes), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  const auto want = reference(inputs, dt, op, count);
  for (int r = 0; r < n; ++r)
    ASSERT_EQ(g->comms[r]->allReduce(in[r], out[r], count, dt, op, g->streams[r]), Status::kOk)
        << tpcomm::lastErrorMessage();
  std::vector<uint8_t> first;
  for (int r = 0; r < n; ++r) {
    std::vector<uint8_t> got;
    ASSERT_NO_FATAL_FAILURE(drainAndReadBack(*g, r, out[r], bytes, &got));
    for (size_t i = 0; i < count; ++i)
      ASSERT_TRUE(sameValue(got, want, dt, i))
          << "rank " << r << " element " << i << ": got " << tpcomm::loadAsFloat(got.data(), i, dt)
          << ", the host reference " << tpcomm::loadAsFloat(want.data(), i, dt) << " (ran "
          << g->comms[r]->lastAlgorithm() << ")";
    if (r == 0)
      first = got;
    else
      EXPECT_EQ(first, got) << "rank " << r << " differs bitwise from rank 0";
  }
  for (int r = 0; r < n; ++r) {
    cudaSetDevice(g->devices[r]);
    cudaFree(in[r]);
    cudaFree(out[r]);
  }
}

INSTANTIATE_TEST_SUITE_P(All, SpecialValues,
                         testing::Combine(testing::Values("lamport_p2p", "oneshot_p2p", "twoshot_p2p", "staged_host"),
                                          testing::Values(DataType::kF32, DataType::kF16, DataType::kBF16),
                                          testing::Values(ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin)));

}  // namespace
}  // namespace tpcomm_test
