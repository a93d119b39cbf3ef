// Helpers for the GPU all-reduce tests: integer-valued inputs whose exact results are known,
// host references, bit-level comparisons. Shared by the createGroup and mpirun test programs.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "algos/host/host_reduce.h"
#include "tpcomm/tpcomm.h"

namespace tpcomm_test {

using tpcomm::DataType;
using tpcomm::ReduceOp;

#define CUDA_OK(call)                                                      \
  do {                                                                     \
    cudaError_t e_ = (call);                                               \
    ASSERT_EQ(e_, cudaSuccess) << #call << ": " << cudaGetErrorString(e_); \
  } while (0)

inline int gpuCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

// Ranks of the multi-rank tests: TPCOMM_TEST_RANKS=N when set (N >= 2), else every GPU when there
// are two or more, else two. Rank r runs on GPU r mod the GPUs present; where ranks outnumber
// GPUs they share one (gpu_test_main.cc then sets TPCOMM_ALLOW_SHARED_DEVICE=1 and grids that
// let every rank's kernels be resident together). A shared-device run proves the protocols
// (every push, flag and epoch crosses between ranks as it does between GPUs), not their speed,
// and has no NCCL (NCCL needs one GPU per rank).
inline int testRanks() {
  const int gpus = gpuCount();
  if (const char* v = std::getenv("TPCOMM_TEST_RANKS")) {
    const int n = std::atoi(v);
    if (n >= 2 && n <= 16) return n;
  }
  return gpus >= 2 ? gpus : 2;
}
inline std::vector<int> rankDevices() {
  const int gpus = gpuCount();
  std::vector<int> d;
  if (gpus == 0) return d;
  for (int r = 0; r < testRanks(); ++r) d.push_back(r % gpus);
  return d;
}
inline bool sharedDevice() { return gpuCount() > 0 && testRanks() > gpuCount(); }

// TPCOMM_TEST_SIZES=quick: the size tables' `quick` subsets (the same kinds of edges: one
// element, odd counts, pack tails, several blocks and chunks) and 1,000 instead of 10,000
// back-to-back calls in the stress tests, so the suite at 2, 3, 4 and 8 ranks fits one device call.
// The combinations of five value lists that `keep` accepts, as a test table: combinations that
// cannot exist (staged_host inside a graph capture, an all-gather with an operator, NCCL with
// ranks sharing a GPU) are left out of the table rather than skipped when they run.
template <typename A, typename B, typename C, typename D, typename E, typename Keep>
std::vector<std::tuple<A, B, C, D, E>> product(const std::vector<A>& as, const std::vector<B>& bs,
                                               const std::vector<C>& cs, const std::vector<D>& ds,
                                               const std::vector<E>& es, Keep keep) {
  std::vector<std::tuple<A, B, C, D, E>> out;
  for (const A& a : as)
    for (const B& b : bs)
      for (const C& c : cs)
        for (const D& d : ds)
          for (const E& e : es)
            if (keep(a, b, c, d, e)) out.emplace_back(a, b, c, d, e);
  return out;
}

inline bool quickRun() {
  const char* v = std::getenv("TPCOMM_TEST_SIZES");
  return v && std::string(v) == "quick";
}
inline std::vector<size_t> testSizes(std::vector<size_t> full, std::vector<size_t> quick) {
  return quickRun() ? quick : full;
}

// For a run whose `ranks` outnumber the `gpus` (call before the first communicator): lets ranks
// share a GPU (TPCOMM_ALLOW_SHARED_DEVICE=1) and sizes every kernel's grid so that all ranks'
// kernels on one GPU are resident together (one 512-thread block per SM is what every tpcomm
// kernel is guaranteed; create refuses grids that cannot fit). Settings already in the
// environment win. Returns the line to print, or "" when the device cannot be queried.
inline std::string shareGpus(int ranks, int gpus) {
  setenv("TPCOMM_ALLOW_SHARED_DEVICE", "1", 0);
  const int perGpu = (ranks + gpus - 1) / gpus;
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess || sms <= 0) return "";
  const int grid = std::min(64, sms / perGpu), staged = std::min(16, sms / (2 * perGpu));
  setenv("TPCOMM_TWOSHOT_BLOCKS", std::to_string(grid).c_str(), 0);
  setenv("TPCOMM_P2P_BLOCKS", std::to_string(std::min(32, grid)).c_str(), 0);
  setenv("TPCOMM_STAGED_BLOCKS", std::to_string(staged).c_str(), 0);
  return std::to_string(ranks) + " ranks on " + std::to_string(gpus) + " GPU(s), up to " + std::to_string(perGpu) +
         " per GPU (correctness, not speed; no NCCL); TPCOMM_TWOSHOT_BLOCKS=" + std::getenv("TPCOMM_TWOSHOT_BLOCKS") +
         " TPCOMM_P2P_BLOCKS=" + std::getenv("TPCOMM_P2P_BLOCKS") +
         " TPCOMM_STAGED_BLOCKS=" + std::getenv("TPCOMM_STAGED_BLOCKS");
}

// The one set-up of the multi-rank GPU tests: createGroup over `devices` (default rankDevices())
// with `cfg`, and a stream per rank (non-blocking, or blocking: ordered after set-up copies on
// the legacy stream). Streams go with the group; communicators are destroyed by their own
// destructors (or abort()ed first by a test that left them failed).
struct RankGroup {
  std::vector<int> devices;
  std::vector<std::unique_ptr<tpcomm::Communicator>> comms;
  std::vector<cudaStream_t> streams;
  int n() const { return static_cast<int>(devices.size()); }
  ~RankGroup() {
    for (size_t r = 0; r < streams.size(); ++r) {
      cudaSetDevice(devices[r]);
      cudaStreamDestroy(streams[r]);
    }
  }
};

// nullptr, with a test failure naming `what`, when createGroup or a stream fails.
inline std::unique_ptr<RankGroup> makeRankGroup(const tpcomm::Config& cfg, const std::string& what,
                                                bool blockingStreams = false, std::vector<int> devices = {}) {
  auto g = std::make_unique<RankGroup>();
  g->devices = devices.empty() ? rankDevices() : devices;
  if (tpcomm::Communicator::createGroup(g->devices, cfg, &g->comms) != tpcomm::Status::kOk) {
    ADD_FAILURE() << "createGroup(" << what << "): " << tpcomm::lastErrorMessage();
    return nullptr;
  }
  for (int d : g->devices) {
    cudaStream_t st = nullptr;
    if (cudaSetDevice(d) != cudaSuccess ||
        (blockingStreams ? cudaStreamCreate(&st) : cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking)) !=
            cudaSuccess) {
      ADD_FAILURE() << "stream on device " << d;
      return nullptr;
    }
    g->streams.push_back(st);
  }
  return g;
}

// After a run of calls: rank r's stream drained, its communicator without error, and `bytes` of
// its device buffer `dev` read back into *out. Failures are fatal test failures (check
// HasFatalFailure() after).
inline void drainAndReadBack(const RankGroup& g, int r, const void* dev, size_t bytes, std::vector<uint8_t>* out) {
  CUDA_OK(cudaSetDevice(g.devices[r]));
  CUDA_OK(cudaStreamSynchronize(g.streams[r]));
  ASSERT_EQ(g.comms[r]->checkError(), tpcomm::Status::kOk) << "rank " << r << ": " << tpcomm::lastErrorMessage();
  out->resize(bytes);
  CUDA_OK(cudaMemcpy(out->data(), dev, bytes, cudaMemcpyDeviceToHost));
}

// CUDA graphs of one step on every rank: `issue` enqueues the step on each rank's stream while all
// of them capture (relaxed mode: the ranks' captures interleave in one thread), then each graph is
// instantiated. Failures are test failures; ok() says whether the graphs can be launched.
struct RankGraphs {
  std::vector<int> devices;
  std::vector<cudaGraph_t> graphs;
  std::vector<cudaGraphExec_t> execs;
  bool captured = false;
  bool ok() const { return captured && execs.size() == devices.size(); }
  ~RankGraphs() {
    for (cudaGraphExec_t e : execs) cudaGraphExecDestroy(e);
    for (cudaGraph_t gr : graphs) cudaGraphDestroy(gr);
  }
};

inline void captureOnEveryRank(const RankGroup& g, const std::function<void()>& issue, RankGraphs* out) {
  out->devices = g.devices;
  for (int r = 0; r < g.n(); ++r) {
    cudaSetDevice(g.devices[r]);
    cudaError_t e = cudaStreamBeginCapture(g.streams[r], cudaStreamCaptureModeRelaxed);
    if (e != cudaSuccess) {
      ADD_FAILURE() << "rank " << r << " begin capture: " << cudaGetErrorString(e);
      return;
    }
  }
  issue();
  bool ok = true;
  for (int r = 0; r < g.n(); ++r) {  // end every capture, even after a failed issue
    cudaSetDevice(g.devices[r]);
    cudaGraph_t graph = nullptr;
    cudaError_t e = cudaStreamEndCapture(g.streams[r], &graph);
    if (graph) out->graphs.push_back(graph);
    cudaGraphExec_t exec = nullptr;
    if (e == cudaSuccess) e = cudaGraphInstantiate(&exec, graph, 0);
    if (e != cudaSuccess) {
      ADD_FAILURE() << "rank " << r << " end capture / instantiate: " << cudaGetErrorString(e);
      ok = false;
      continue;
    }
    out->execs.push_back(exec);
  }
  out->captured = ok;
}

// Launches every rank's graph on its stream; false (with a test failure) on a CUDA error.
inline bool launchOnEveryRank(const RankGroup& g, const RankGraphs& graphs) {
  for (int r = 0; r < g.n(); ++r) {
    cudaSetDevice(g.devices[r]);
    cudaError_t e = cudaGraphLaunch(graphs.execs[r], g.streams[r]);
    if (e != cudaSuccess) {
      ADD_FAILURE() << "rank " << r << " graph launch: " << cudaGetErrorString(e);
      return false;
    }
  }
  return true;
}

// Small integers (|v| <= 8), exact in every dtype and in sums of up to 16 ranks.
inline float intInput(int rank, size_t i, uint64_t salt) {
  return static_cast<float>(static_cast<int>((i * 7 + rank * 13 + salt * 5) % 17) - 8);
}

// Host buffer of `count` elements of `dtype` from a value function.
template <typename F>
std::vector<uint8_t> makeHost(DataType dtype, size_t count, F value) {
  std::vector<uint8_t> h(count * tpcomm::dataTypeSize(dtype));
  for (size_t i = 0; i < count; ++i) tpcomm::storeFromFloat(h.data(), i, dtype, value(i));
  return h;
}

// Reference in the library's order: fp32 accumulation over ranks 0..n-1, one rounding.
inline std::vector<uint8_t> reference(const std::vector<std::vector<uint8_t>>& inputs, DataType dtype, ReduceOp op,
                                      size_t count) {
  std::vector<const void*> srcs;
  for (const auto& in : inputs) srcs.push_back(in.data());
  std::vector<uint8_t> out(count * tpcomm::dataTypeSize(dtype));
  tpcomm::hostReduce(out.data(), srcs.data(), static_cast<int>(srcs.size()), count, dtype, op);
  return out;
}

// Index of the first differing element, or -1.
inline long long firstMismatch(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, size_t elemSize) {
  if (a.size() != b.size()) return 0;
  if (std::memcmp(a.data(), b.data(), a.size()) == 0) return -1;
  for (size_t i = 0; i < a.size() / elemSize; ++i)
    if (std::memcmp(a.data() + i * elemSize, b.data() + i * elemSize, elemSize) != 0) return static_cast<long long>(i);
  return -1;
}

// Worst |out - ref| / max(1, |ref|) against an fp64 reference.
inline double worstRelError(const std::vector<uint8_t>& out, const std::vector<double>& ref, DataType dtype) {
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    double v = tpcomm::loadAsFloat(out.data(), i, dtype);
    if (std::isnan(v)) return INFINITY;
    worst = std::max(worst, std::fabs(v - ref[i]) / std::max(1.0, std::fabs(ref[i])));
  }
  return worst;
}

// Tolerance for one rounding of a sum of small random values (stated in the test docs):
// f32 1e-6, f16 1e-3, bf16 8e-3.
inline double tolerance(DataType d) { return d == DataType::kF32 ? 1e-6 : d == DataType::kF16 ? 1e-3 : 8e-3; }

inline const char* name(DataType d) { return tpcomm::dataTypeName(d); }
inline const char* name(ReduceOp o) { return tpcomm::reduceOpName(o); }

}  // namespace tpcomm_test
