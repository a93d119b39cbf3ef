// GPU all-reduce tests, one process driving every local GPU (Communicator::createGroup). Every
// algorithm x dtype x op x size x in/out of place x eager/CUDA-graph replay: integer-valued
// inputs compared bitwise with the host reference (fp32 accumulation in rank order), outputs
// poisoned (all-ones bytes = NaN) before each run, every rank's output bitwise equal. Then
// random inputs against fp64 (tolerances in gpu_allreduce_util.h), 10,000 back-to-back calls with
// rotating buffers, Lamport messages of partial 16-byte packs alternating in size on one
// communicator, and a peer that never arrives (kTimeout, no GPU left spinning).
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <tuple>

#include "common/params.h"
#include "gpu_allreduce_util.h"

namespace tpcomm_test {
namespace {

using tpcomm::Communicator;
using tpcomm::Config;
using tpcomm::Status;

constexpr DataType kTypes[] = {DataType::kF32, DataType::kF16, DataType::kBF16};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin};
const char* const kAlgos[] = {"lamport_p2p", "oneshot_p2p", "twoshot_p2p", "ring_nccl", "auto"};

using Group = RankGroup;

// One communicator group per forced algorithm, created once for the whole program.
Group* groupFor(const std::string& algo, int timeoutMs = 0) {
  static std::map<std::string, std::unique_ptr<Group>> groups;
  std::string key = algo + "/" + std::to_string(timeoutMs);
  auto it = groups.find(key);
  if (it != groups.end()) return it->second.get();
  Config cfg;
  cfg.algo = algo == "auto" ? "" : algo;
  cfg.timeoutMs = timeoutMs;
  cfg.setupTimeoutMs = 60000;  // create's exchanges wait through CUDA set-up and the probe
  auto g = makeRankGroup(cfg, algo);
  if (!g) return nullptr;
  return (groups[key] = std::move(g)).get();
}

// Set-up copies from pageable memory may still be in flight when cudaMemcpy returns: drain them
// before the collectives run on their non-blocking streams.
void drainDevices(const std::vector<int>& devices) {
  for (int d : devices) {
    cudaSetDevice(d);
    cudaDeviceSynchronize();
  }
}

bool needGpus(int n) { return static_cast<int>(rankDevices().size()) >= n; }

// NCCL cannot run two ranks on one GPU: ring_nccl cases skip on a shared-device run.
bool ncclUnavailable(const std::string& algo) { return algo == "ring_nccl" && sharedDevice(); }

struct DeviceBuffers {
  std::vector<void*> in, out;
  size_t bytes = 0;
  ~DeviceBuffers() {
    for (void* p : in) cudaFree(p);
    for (size_t i = 0; i < out.size(); ++i)
      if (i >= in.size() || out[i] != in[i]) cudaFree(out[i]);  // in place: freed above
  }
};

// Whether `algo` is expected to run (not fall back) for this call. Lamport takes any element count;
// its last 16-byte pack is padded, and the padded size must fit TPCOMM_LAMPORT_MAX_BYTES.
bool expectRuns(const std::string& algo, size_t bytes) {
  if (algo == "lamport_p2p")
    return (bytes + 15) / 16 * 16 <= static_cast<size_t>(tpcomm::paramInt(tpcomm::ParamId::kLamportMaxBytes));
  if (algo == "oneshot_p2p") return bytes <= static_cast<size_t>(tpcomm::paramInt(tpcomm::ParamId::kOneshotMaxBytes));
  return algo != "auto";
}

struct Case {
  std::string algo;
  DataType dtype;
  ReduceOp op;
  size_t count;
  bool inPlace;
  bool graph;
};

std::string describe(const Case& c) {
  return c.algo + " " + name(c.dtype) + " " + name(c.op) + " count=" + std::to_string(c.count) +
         (c.inPlace ? " in-place" : " out-of-place") + (c.graph ? " graph" : " eager");
}

// The host side of a case: every rank's inputs and the reference. Made once per (dtype, count,
// ranks) and op for counts up to kCachedCount, since every algorithm, placement and mode of a shape
// compares against the same bits, and making them is most of a large case's time (at 8 ranks and
// 4M elements, ~0.1-0.2 s of the ~0.5 s); larger counts (the Large table) are made per case.
struct HostCase {
  std::vector<std::vector<uint8_t>> inputs;
  std::map<int, std::vector<uint8_t>> refs;  // by op
};
constexpr size_t kCachedCount = 8u << 20;

const HostCase& hostCase(const Case& c, int n, HostCase* uncached) {
  static std::map<std::tuple<int, size_t, int>, HostCase> cache;
  HostCase& h = c.count <= kCachedCount ? cache[{static_cast<int>(c.dtype), c.count, n}] : *uncached;
  if (h.inputs.empty()) {
    const uint64_t salt = c.count % 5;
    for (int r = 0; r < n; ++r)
      h.inputs.push_back(makeHost(c.dtype, c.count, [&](size_t i) { return intInput(r, i, salt); }));
  }
  auto ref = h.refs.find(static_cast<int>(c.op));
  if (ref == h.refs.end())
    h.refs.emplace(static_cast<int>(c.op), reference(h.inputs, c.dtype, c.op, c.count));
  return h;
}

void runCase(const Case& c) {
  SCOPED_TRACE(describe(c));
  Group* g = groupFor(c.algo);
  ASSERT_NE(g, nullptr);
  const int n = g->n();
  const size_t es = tpcomm::dataTypeSize(c.dtype), bytes = c.count * es;
  HostCase uncached;
  const HostCase& host = hostCase(c, n, &uncached);
  const std::vector<std::vector<uint8_t>>& inputs = host.inputs;
  const std::vector<uint8_t>& ref = host.refs.at(static_cast<int>(c.op));

  DeviceBuffers buf;
  for (int r = 0; r < n; ++r) {
    CUDA_OK(cudaSetDevice(g->devices[r]));
    void *in = nullptr, *out = nullptr;
    CUDA_OK(cudaMalloc(&in, bytes));
    buf.in.push_back(in);
    if (!c.inPlace) CUDA_OK(cudaMalloc(&out, bytes));
    buf.out.push_back(c.inPlace ? in : out);
  }
  auto prepare = [&] {
    for (int r = 0; r < n; ++r) {
      CUDA_OK(cudaSetDevice(g->devices[r]));
      // On the collective's stream: a plain cudaMemcpy from pageable memory may return before
      // the data lands, unordered with a non-blocking stream.
      if (!c.inPlace) CUDA_OK(cudaMemsetAsync(buf.out[r], 0xff, bytes, g->streams[r]));
      CUDA_OK(cudaMemcpyAsync(buf.in[r], inputs[r].data(), bytes, cudaMemcpyHostToDevice, g->streams[r]));
    }
  };
  auto issue = [&] {
    ASSERT_EQ(Communicator::groupStart(), Status::kOk);
    for (int r = 0; r < n; ++r)
      ASSERT_EQ(g->comms[r]->allReduce(buf.in[r], buf.out[r], c.count, c.dtype, c.op, g->streams[r]), Status::kOk)
          << tpcomm::lastErrorMessage();
    ASSERT_EQ(Communicator::groupEnd(), Status::kOk);
  };
  auto verify = [&](int round) {
    std::vector<uint8_t> first;
    for (int r = 0; r < n; ++r) {
      CUDA_OK(cudaSetDevice(g->devices[r]));
      CUDA_OK(cudaStreamSynchronize(g->streams[r]));
      ASSERT_EQ(g->comms[r]->checkError(), Status::kOk) << tpcomm::lastErrorMessage();
      std::vector<uint8_t> out(bytes);
      CUDA_OK(cudaMemcpy(out.data(), buf.out[r], bytes, cudaMemcpyDeviceToHost));
      long long bad = firstMismatch(out, ref, es);
      ASSERT_EQ(bad, -1) << "rank " << r << " round " << round << " element " << bad << ": got "
                         << tpcomm::loadAsFloat(out.data(), bad, c.dtype) << " expected "
                         << tpcomm::loadAsFloat(ref.data(), bad, c.dtype);
      if (r == 0)
        first = out;
      else
        ASSERT_EQ(first, out) << "rank " << r << " differs from rank 0";
    }
  };

  if (!c.graph) {
    prepare();
    issue();
    verify(0);
  } else {
    std::vector<cudaGraph_t> graphs(n);
    std::vector<cudaGraphExec_t> execs(n);
    for (int r = 0; r < n; ++r) {
      CUDA_OK(cudaSetDevice(g->devices[r]));
      CUDA_OK(cudaStreamBeginCapture(g->streams[r], cudaStreamCaptureModeRelaxed));
    }
    issue();
    for (int r = 0; r < n; ++r) {
      CUDA_OK(cudaSetDevice(g->devices[r]));
      CUDA_OK(cudaStreamEndCapture(g->streams[r], &graphs[r]));
      CUDA_OK(cudaGraphInstantiate(&execs[r], graphs[r], 0));
    }
    for (int round = 0; round < 3; ++round) {  // replays continue the device-side epochs
      prepare();
      for (int r = 0; r < n; ++r) {
        CUDA_OK(cudaSetDevice(g->devices[r]));
        CUDA_OK(cudaGraphLaunch(execs[r], g->streams[r]));
      }
      verify(round);
      if (testing::Test::HasFatalFailure()) break;
    }
    for (int r = 0; r < n; ++r) {
      cudaGraphExecDestroy(execs[r]);
      cudaGraphDestroy(graphs[r]);
    }
  }
  if (expectRuns(c.algo, bytes)) EXPECT_STREQ(g->comms[0]->lastAlgorithm(), c.algo.c_str());
}

class AllReduceMatrix : public testing::TestWithParam<std::tuple<const char*, DataType, ReduceOp, size_t, bool, bool>> {
};

TEST_P(AllReduceMatrix, BitExact) {
  if (!needGpus(2)) GTEST_SKIP() << "needs 2 ranks, found " << gpuCount() << " GPUs";
  auto [algo, dtype, op, count, inPlace, graph] = GetParam();
  runCase({algo, dtype, op, count, inPlace, graph});
}

using Param = std::tuple<const char*, DataType, ReduceOp, size_t, bool, bool>;

// Every combination of the lists that can exist on this machine (ring_nccl needs one GPU per
// rank: on a shared-GPU run it is not instantiated rather than skipped). Built when gtest
// registers the tests (after main() read TPCOMM_TEST_RANKS).
std::vector<Param> matrix(std::vector<const char*> algos, std::vector<DataType> types, std::vector<ReduceOp> ops,
                          std::vector<size_t> counts, std::vector<bool> inPlace, std::vector<bool> graph) {
  std::vector<Param> out;
  for (const char* a : algos)
    for (DataType t : types)
      for (ReduceOp o : ops)
        for (size_t c : counts)
          for (bool ip : inPlace)
            for (bool g : graph)
              if (!ncclUnavailable(a)) out.emplace_back(a, t, o, c, ip, g);
  return out;
}
const std::vector<DataType> kAllTypes(std::begin(kTypes), std::end(kTypes));
const std::vector<ReduceOp> kAllOps(std::begin(kOps), std::end(kOps));
const std::vector<bool> kBoth = {false, true};

// Sizes: one element, odd counts, 16-byte tails, 4 KB .. 8 MB (TPCOMM_TEST_SIZES=quick: a subset
// with the same kinds of edges, for the runs at 3, 4 and 8 ranks).
INSTANTIATE_TEST_SUITE_P(Small, AllReduceMatrix,
                         testing::ValuesIn(matrix({std::begin(kAlgos), std::end(kAlgos)}, kAllTypes, kAllOps,
                                                  testSizes({1, 7, 8, 33, 1000, 1024, 4099, 65536, 262147,
                                                             (1u << 20) + 8, (4u << 20) + 3},
                                                            {1, 7, 33, 4099, 262147, (4u << 20) + 3}),
                                                  kBoth, kBoth)));

// Lamport's partial last pack: every tail length of f32 (4 per pack) and f16/bf16 (8 per pack),
// tails after several packs and blocks, and counts whose padded size is just under 1 MiB (262143
// f32, 524287 f16/bf16) and 2 MiB, the default TPCOMM_LAMPORT_MAX_BYTES (524287 f32, 1048575
// f16/bf16); a dtype whose count does not fit falls back.
INSTANTIATE_TEST_SUITE_P(LamportTails, AllReduceMatrix,
                         testing::ValuesIn(matrix({"lamport_p2p"}, kAllTypes, kAllOps,
                                                  testSizes({2, 3, 4, 5, 6, 9, 15, 17, 4097, 262143, 524287, 1048575},
                                                            {3, 5, 9, 17, 524287}),
                                                  kBoth, kBoth)));

// Large messages (sum; 64 MB and 256 MB of bf16, 256 MB of f32) on the bandwidth algorithms.
INSTANTIATE_TEST_SUITE_P(
    Large, AllReduceMatrix,
    testing::ValuesIn(matrix({"twoshot_p2p", "ring_nccl", "auto"}, {DataType::kBF16, DataType::kF32}, {ReduceOp::kSum},
                             testSizes({(32u << 20) + 5, 64u << 20}, {(32u << 20) + 5}), kBoth, {false})));

TEST(AllReduceRandom, MatchesFp64WithinTolerance) {
  if (!needGpus(2)) GTEST_SKIP() << "needs 2 ranks, found " << gpuCount() << " GPUs";
  const size_t count = 100003;
  for (const char* algo : kAlgos)
    for (DataType dtype : kTypes) {
      if (ncclUnavailable(algo)) continue;
      SCOPED_TRACE(std::string(algo) + " " + name(dtype));
      Group* g = groupFor(algo);
      ASSERT_NE(g, nullptr);
      const int n = g->n();
      const size_t bytes = count * tpcomm::dataTypeSize(dtype);
      std::mt19937 rng(1234);
      std::uniform_real_distribution<float> dist(-1.f, 1.f);
      std::vector<double> ref(count, 0.0);
      DeviceBuffers buf;
      for (int r = 0; r < n; ++r) {
        auto h = makeHost(dtype, count, [&](size_t) { return dist(rng); });
        for (size_t i = 0; i < count; ++i) ref[i] += tpcomm::loadAsFloat(h.data(), i, dtype);
        CUDA_OK(cudaSetDevice(g->devices[r]));
        void *in, *out;
        CUDA_OK(cudaMalloc(&in, bytes));
        CUDA_OK(cudaMalloc(&out, bytes));
        CUDA_OK(cudaMemcpy(in, h.data(), bytes, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemset(out, 0xff, bytes));
        buf.in.push_back(in);
        buf.out.push_back(out);
      }
      drainDevices(g->devices);
      ASSERT_EQ(Communicator::groupStart(), Status::kOk);
      for (int r = 0; r < n; ++r)
        ASSERT_EQ(g->comms[r]->allReduce(buf.in[r], buf.out[r], count, dtype, ReduceOp::kSum, g->streams[r]),
                  Status::kOk);
      ASSERT_EQ(Communicator::groupEnd(), Status::kOk);
      std::vector<uint8_t> first;
      for (int r = 0; r < n; ++r) {
        CUDA_OK(cudaSetDevice(g->devices[r]));
        CUDA_OK(cudaStreamSynchronize(g->streams[r]));
        std::vector<uint8_t> out(bytes);
        CUDA_OK(cudaMemcpy(out.data(), buf.out[r], bytes, cudaMemcpyDeviceToHost));
        EXPECT_LE(worstRelError(out, ref, dtype), tolerance(dtype));
        if (r == 0)
          first = out;
        else
          EXPECT_EQ(first, out) << "rank " << r << " differs bitwise from rank 0";
      }
    }
}

// Buffers off 16-byte alignment on some ranks only (rank r's pointers are shifted by r
// elements): every rank must still run the same algorithm (a rank-local fallback would leave the
// other rank waiting until the timeout) and get the same bits.
TEST(AllReduceAlignment, MixedAlignmentAcrossRanks) {
  if (!needGpus(2)) GTEST_SKIP() << "needs 2 ranks, found " << gpuCount() << " GPUs";
  const size_t count = 4096;  // 8 KB of bf16: a Lamport-sized message
  const DataType dtype = DataType::kBF16;
  const size_t bytes = count * 2;
  for (const char* algo : {"lamport_p2p", "oneshot_p2p", "twoshot_p2p"}) {
    SCOPED_TRACE(algo);
    Group* g = groupFor(algo);
    ASSERT_NE(g, nullptr);
    const int n = g->n();
    std::vector<std::vector<uint8_t>> inputs;
    for (int r = 0; r < n; ++r) inputs.push_back(makeHost(dtype, count, [&](size_t i) { return intInput(r, i, 2); }));
    const auto ref = reference(inputs, dtype, ReduceOp::kSum, count);
    DeviceBuffers buf;
    std::vector<char*> in(n), out(n);
    for (int r = 0; r < n; ++r) {
      CUDA_OK(cudaSetDevice(g->devices[r]));
      void *a, *b;
      CUDA_OK(cudaMalloc(&a, bytes + 64));
      CUDA_OK(cudaMalloc(&b, bytes + 64));
      buf.in.push_back(a);
      buf.out.push_back(b);
      in[r] = static_cast<char*>(a) + 2 * r;
      out[r] = static_cast<char*>(b) + 2 * r;
      CUDA_OK(cudaMemcpy(in[r], inputs[r].data(), bytes, cudaMemcpyHostToDevice));
      CUDA_OK(cudaMemset(out[r], 0xff, bytes));
    }
    drainDevices(g->devices);
    ASSERT_EQ(Communicator::groupStart(), Status::kOk);
    for (int r = 0; r < n; ++r)
      ASSERT_EQ(g->comms[r]->allReduce(in[r], out[r], count, dtype, ReduceOp::kSum, g->streams[r]), Status::kOk);
    ASSERT_EQ(Communicator::groupEnd(), Status::kOk);
    for (int r = 0; r < n; ++r) {
      CUDA_OK(cudaSetDevice(g->devices[r]));
      CUDA_OK(cudaStreamSynchronize(g->streams[r]));
      ASSERT_EQ(g->comms[r]->checkError(), Status::kOk) << tpcomm::lastErrorMessage();
      EXPECT_STREQ(g->comms[r]->lastAlgorithm(), algo) << "rank " << r;
      std::vector<uint8_t> host(bytes);
      CUDA_OK(cudaMemcpy(host.data(), out[r], bytes, cudaMemcpyDeviceToHost));
      EXPECT_EQ(firstMismatch(host, ref, 2), -1) << "rank " << r;
    }
  }
}

// 10,000 back-to-back small all-reduces, inputs rotating over 8 buffers of different contents and
// every output kept: a stale flag, epoch or buffer shows up as a wrong element.
TEST(AllReduceStress, TenThousandBackToBack) {
  if (!needGpus(2)) GTEST_SKIP() << "needs 2 ranks, found " << gpuCount() << " GPUs";
  const size_t count = 4096;  // 8 KB of bf16: a decode-step all-reduce
  const int iters = quickRun() ? 1000 : 10000, rotate = 8;
  const DataType dtype = DataType::kBF16;
  const size_t bytes = count * 2;
  for (const char* algo : {"lamport_p2p", "oneshot_p2p", "twoshot_p2p"}) {
    SCOPED_TRACE(algo);
    Group* g = groupFor(algo);
    ASSERT_NE(g, nullptr);
    const int n = g->n();
    std::vector<std::vector<uint8_t>> expected(rotate);
    DeviceBuffers buf;  // in: rotate buffers per rank; out: one slab per rank
    std::vector<std::vector<void*>> ins(n);
    for (int k = 0; k < rotate; ++k) {
      std::vector<std::vector<uint8_t>> inputs;
      for (int r = 0; r < n; ++r) inputs.push_back(makeHost(dtype, count, [&](size_t i) { return intInput(r, i, k); }));
      expected[k] = reference(inputs, dtype, ReduceOp::kSum, count);
      for (int r = 0; r < n; ++r) {
        CUDA_OK(cudaSetDevice(g->devices[r]));
        void* p;
        CUDA_OK(cudaMalloc(&p, bytes));
        CUDA_OK(cudaMemcpy(p, inputs[r].data(), bytes, cudaMemcpyHostToDevice));
        ins[r].push_back(p);
        buf.in.push_back(p);
      }
    }
    for (int r = 0; r < n; ++r) {
      CUDA_OK(cudaSetDevice(g->devices[r]));
      void* p;
      CUDA_OK(cudaMalloc(&p, bytes * iters));
      CUDA_OK(cudaMemset(p, 0xff, bytes * iters));
      buf.out.push_back(p);
    }
    drainDevices(g->devices);
    for (int it = 0; it < iters; ++it) {
      ASSERT_EQ(Communicator::groupStart(), Status::kOk);
      for (int r = 0; r < n; ++r)
        ASSERT_EQ(g->comms[r]->allReduce(ins[r][it % rotate], static_cast<char*>(buf.out[r]) + it * bytes, count, dtype,
                                         ReduceOp::kSum, g->streams[r]),
                  Status::kOk);
      ASSERT_EQ(Communicator::groupEnd(), Status::kOk);
    }
    size_t wrong = 0;
    for (int r = 0; r < n; ++r) {
      std::vector<uint8_t> out;
      drainAndReadBack(*g, r, buf.out[r], bytes * iters, &out);
      ASSERT_FALSE(HasFatalFailure());
      for (int it = 0; it < iters; ++it)
        if (std::memcmp(out.data() + it * bytes, expected[it % rotate].data(), bytes) != 0) ++wrong;
    }
    EXPECT_EQ(wrong, 0u) << "calls with a wrong element";
  }
}

// Lamport with sizes alternating back to back on one communicator: 1 element, 8 bytes (half a
// pack), 4097 and 4099 elements (a partial pack after 512 or 1024 whole ones), in a cycle of four
// so every size meets every one of the three buffers. Each call's inputs differ from the last
// ones in that buffer, so a clear that misses the padded tail of a pack (or any word of it)
// leaves old words that a later call takes as arrived: a wrong element. Odd calls shift every
// other rank's buffers by one element (element-by-element path on those ranks, mixed across
// ranks).
TEST(AllReduceLamportTails, AlternatingSizesBackToBack) {
  if (!needGpus(2)) GTEST_SKIP() << "needs 2 ranks, found " << gpuCount() << " GPUs";
  const int iters = 600;
  for (DataType dtype : kTypes) {
    SCOPED_TRACE(name(dtype));
    const size_t es = tpcomm::dataTypeSize(dtype);
    const size_t counts[] = {1, 8 / es, 4097, 4099};
    Group* g = groupFor("lamport_p2p");
    ASSERT_NE(g, nullptr);
    const int n = g->n();
    // One call's input or output: room for the shift and the poison check, 256-byte aligned.
    const size_t slab = ((4099 + 16) * es + 255) / 256 * 256;
    DeviceBuffers buf;
    for (int r = 0; r < n; ++r) {
      CUDA_OK(cudaSetDevice(g->devices[r]));
      void *in, *out;
      CUDA_OK(cudaMalloc(&in, slab * iters));
      CUDA_OK(cudaMalloc(&out, slab * iters));
      CUDA_OK(cudaMemset(out, 0xff, slab * iters));
      buf.in.push_back(in);
      buf.out.push_back(out);
    }
    std::vector<std::vector<uint8_t>> expected(iters);
    std::vector<std::vector<size_t>> shift(iters, std::vector<size_t>(n));
    for (int it = 0; it < iters; ++it) {
      const size_t count = counts[it % 4];
      std::vector<std::vector<uint8_t>> inputs;
      for (int r = 0; r < n; ++r) {
        inputs.push_back(makeHost(dtype, count, [&](size_t i) { return intInput(r, i, it); }));
        shift[it][r] = (it % 2 == 1 && r % 2 == 1) ? es : 0;
        CUDA_OK(cudaSetDevice(g->devices[r]));
        CUDA_OK(cudaMemcpy(static_cast<char*>(buf.in[r]) + it * slab + shift[it][r], inputs[r].data(), count * es,
                           cudaMemcpyHostToDevice));
      }
      expected[it] = reference(inputs, dtype, ReduceOp::kSum, count);
    }
    drainDevices(g->devices);
    for (int it = 0; it < iters; ++it) {
      ASSERT_EQ(Communicator::groupStart(), Status::kOk);
      for (int r = 0; r < n; ++r)
        ASSERT_EQ(g->comms[r]->allReduce(static_cast<char*>(buf.in[r]) + it * slab + shift[it][r],
                                         static_cast<char*>(buf.out[r]) + it * slab + shift[it][r], counts[it % 4],
                                         dtype, ReduceOp::kSum, g->streams[r]),
                  Status::kOk)
            << tpcomm::lastErrorMessage();
      ASSERT_EQ(Communicator::groupEnd(), Status::kOk);
      ASSERT_STREQ(g->comms[0]->lastAlgorithm(), "lamport_p2p") << "count " << counts[it % 4];
    }
    for (int r = 0; r < n; ++r) {
      CUDA_OK(cudaSetDevice(g->devices[r]));
      CUDA_OK(cudaStreamSynchronize(g->streams[r]));
      ASSERT_EQ(g->comms[r]->checkError(), Status::kOk) << tpcomm::lastErrorMessage();
      std::vector<uint8_t> out(slab * iters);
      CUDA_OK(cudaMemcpy(out.data(), buf.out[r], out.size(), cudaMemcpyDeviceToHost));
      size_t wrong = 0;
      for (int it = 0; it < iters; ++it) {
        const size_t bytes = counts[it % 4] * es;
        const uint8_t* o = out.data() + it * slab + shift[it][r];
        bool bad = std::memcmp(o, expected[it].data(), bytes) != 0;
        // Nothing written past the last element (the padding is dropped): the poison stays.
        for (size_t b = bytes; b < bytes + 16 && !bad; ++b) bad = o[b] != 0xff;
        if (bad && wrong++ == 0) ADD_FAILURE() << "rank " << r << " call " << it << " count " << counts[it % 4];
      }
      EXPECT_EQ(wrong, 0u) << "rank " << r << ": calls with a wrong element";
    }
  }
}

// One rank never arrives: the other's kernel gives up after TPCOMM_TIMEOUT_MS, checkError()
// names the missing rank, and nothing is left spinning (the stream drains).
TEST(AllReduceTimeout, MissingPeerReportsTimeout) {
  if (!needGpus(2)) GTEST_SKIP() << "needs 2 ranks, found " << gpuCount() << " GPUs";
  for (const char* algo : {"lamport_p2p", "oneshot_p2p", "twoshot_p2p"}) {
    SCOPED_TRACE(algo);
    std::vector<std::unique_ptr<Communicator>> comms;
    Config cfg;
    cfg.algo = algo;
    cfg.timeoutMs = 500;
    cfg.setupTimeoutMs = 60000;  // create's exchanges wait through CUDA set-up and the probe
    std::vector<int> devices = rankDevices();
    ASSERT_EQ(Communicator::createGroup(devices, cfg, &comms), Status::kOk) << tpcomm::lastErrorMessage();
    CUDA_OK(cudaSetDevice(devices[0]));
    void* p;
    CUDA_OK(cudaMalloc(&p, 1 << 16));
    CUDA_OK(cudaMemset(p, 0, 1 << 16));
    CUDA_OK(cudaDeviceSynchronize());
    cudaStream_t st;
    CUDA_OK(cudaStreamCreate(&st));
    auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(comms[0]->allReduce(p, p, 4096, DataType::kF32, ReduceOp::kSum, st), Status::kOk);
    CUDA_OK(cudaStreamSynchronize(st));
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(comms[0]->checkError(), Status::kTimeout);
    EXPECT_NE(std::string(tpcomm::lastErrorMessage()).find("rank 1"), std::string::npos) << tpcomm::lastErrorMessage();
    EXPECT_GE(secs, 0.4);
    EXPECT_LT(secs, 3.0);
    // The next call reports the same error instead of running.
    EXPECT_EQ(comms[0]->allReduce(p, p, 4096, DataType::kF32, ReduceOp::kSum, st), Status::kTimeout);
    cudaStreamDestroy(st);
    cudaFree(p);
    for (auto& c : comms) c->destroy();
  }
}

}  // namespace
}  // namespace tpcomm_test
