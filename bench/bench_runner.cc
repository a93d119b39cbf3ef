// bench_runner: buffers, timing and checking for allreduce_perf (see bench_runner.h).
//
// Timing. GPU ranks: per batch, every controller syncs its streams and meets at a barrier,
// records a start event on each local stream, enqueues the batch (iters eager collectives, or
// graphLaunches replays of a graph holding iters collectives), records a stop event, and
// synchronizes. The batch's time is the slowest local rank's event time, then the slowest
// controller's. Host ranks: the same with std::chrono::steady_clock around synchronous calls.
// The result is the median batch time divided by the collectives per batch.
#include "bench_runner.h"

#include "bench_error.h"

#include <cstdint>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <cstring>

#include "bench_data.h"
#include "tpcomm/status.h"

#ifdef TPCOMM_BENCH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace tpcomm_bench {
namespace {

#ifdef TPCOMM_BENCH_CUDA
bool cudaOk(cudaError_t e, const char* what, std::string* error) {
  if (e == cudaSuccess) return true;
  *error = std::string(what) + ": " + cudaGetErrorString(e);
  cudaGetLastError();
  return false;
}
#define BENCH_CUDA(call) \
  if (!cudaOk((call), #call, error)) return false
#endif

bool anyGpu(const std::vector<LocalRank>& ranks) {
  for (const LocalRank& r : ranks)
    if (r.device >= 0) return true;
  return false;
}

bool syncRanks(std::vector<LocalRank>& ranks, std::string* error) {
#ifdef TPCOMM_BENCH_CUDA
  for (LocalRank& r : ranks) {
    if (r.device < 0) continue;
    BENCH_CUDA(cudaSetDevice(r.device));
    BENCH_CUDA(cudaStreamSynchronize(r.stream));
  }
#else
  (void)ranks;
  (void)error;
#endif
  return true;
}

#ifdef TPCOMM_BENCH_CUDA
// Graphs of one batch, one per local rank (each captured on the rank's own stream).
struct Graphs {
  std::vector<cudaGraphExec_t> execs;
  ~Graphs() {
    for (cudaGraphExec_t g : execs)
      if (g) cudaGraphExecDestroy(g);
  }
};

bool captureGraphs(Backend& backend, std::vector<LocalRank>& ranks, bool inPlace, size_t count, tpcomm::DataType dtype,
                   tpcomm::ReduceOp op, int collectives, Graphs* out, std::string* error) {
  for (size_t i = 0; i < ranks.size(); ++i) {
    cudaError_t e = cudaSetDevice(ranks[i].device);
    if (e == cudaSuccess) e = cudaStreamBeginCapture(ranks[i].stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {  // end the captures already begun: no stream is left capturing
      for (size_t j = 0; j < i; ++j) {
        cudaGraph_t g = nullptr;
        cudaSetDevice(ranks[j].device);
        if (cudaStreamEndCapture(ranks[j].stream, &g) == cudaSuccess && g) cudaGraphDestroy(g);
      }
      cudaGetLastError();
      *error = std::string("graph mode (-G): cudaStreamBeginCapture (rank ") + std::to_string(ranks[i].rank) +
               "): " + cudaGetErrorString(e);
      return false;
    }
  }
  std::string runError;
  bool ok = true;
  for (int i = 0; i < collectives && ok; ++i) ok = backend.run(ranks, inPlace, count, dtype, op, &runError);
  // Every capture ends before any graph is instantiated: with one thread driving several ranks,
  // instantiating rank 0's graph while rank 1's stream still captures (thread-local mode) is a
  // call the capture forbids, and it invalidates rank 1's capture.
  std::vector<cudaGraph_t> captured(ranks.size(), nullptr);
  for (size_t i = 0; i < ranks.size(); ++i) {
    cudaSetDevice(ranks[i].device);
    cudaError_t e = cudaStreamEndCapture(ranks[i].stream, &captured[i]);
    if (ok && e != cudaSuccess) {
      ok = false;
      runError = std::string("CUDA graph capture (end, rank ") + std::to_string(ranks[i].rank) +
                 "): " + cudaGetErrorString(e);
    }
    cudaGetLastError();
  }
  for (size_t i = 0; i < ranks.size(); ++i) {
    cudaGraphExec_t exec = nullptr;
    cudaSetDevice(ranks[i].device);
    if (ok && captured[i]) {
      cudaError_t e = cudaGraphInstantiate(&exec, captured[i], 0);
      if (e != cudaSuccess) {
        ok = false;
        runError = std::string("CUDA graph instantiate (rank ") + std::to_string(ranks[i].rank) +
                   "): " + cudaGetErrorString(e);
      }
    }
    if (captured[i]) cudaGraphDestroy(captured[i]);
    out->execs.push_back(exec);
    cudaGetLastError();
  }
  if (!ok) *error = "graph mode (-G): " + runError;
  return ok;
}

bool launchGraphs(Graphs& graphs, std::vector<LocalRank>& ranks, int launches, std::string* error) {
  for (int l = 0; l < launches; ++l)
    for (size_t i = 0; i < ranks.size(); ++i) {
      BENCH_CUDA(cudaSetDevice(ranks[i].device));
      BENCH_CUDA(cudaGraphLaunch(graphs.execs[i], ranks[i].stream));
    }
  return true;
}
#endif

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

bool setupRanks(std::vector<LocalRank>* ranks, size_t maxBytes, std::string* error) {
  const size_t bytes = std::max<size_t>(maxBytes, 16);
  for (LocalRank& r : *ranks) {
    if (r.device < 0) {
      // Page-aligned host buffers, touched so first-use page faults stay out of the timing.
      size_t rounded = (bytes + 4095) / 4096 * 4096;
      r.send = std::aligned_alloc(4096, rounded);
      r.recv = std::aligned_alloc(4096, rounded);
      if (!r.send || !r.recv) {
        *error = "host buffers of " + std::to_string(rounded) + " bytes: out of memory";
        return false;
      }
      std::memset(r.send, 0, rounded);
      std::memset(r.recv, 0, rounded);
      continue;
    }
#ifdef TPCOMM_BENCH_CUDA
    BENCH_CUDA(cudaSetDevice(r.device));
    BENCH_CUDA(cudaMalloc(&r.send, bytes));
    BENCH_CUDA(cudaMalloc(&r.recv, bytes));
    BENCH_CUDA(cudaMemset(r.send, 0, bytes));
    BENCH_CUDA(cudaMemset(r.recv, 0, bytes));
    BENCH_CUDA(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking));
    cudaEvent_t a, b;
    BENCH_CUDA(cudaEventCreate(&a));
    BENCH_CUDA(cudaEventCreate(&b));
    r.evStart = a;
    r.evStop = b;
    BENCH_CUDA(cudaDeviceSynchronize());
#else
    *error = "GPU rank requested but allreduce_perf was built without CUDA";
    return false;
#endif
  }
  return true;
}

void teardownRanks(std::vector<LocalRank>* ranks) {
  for (LocalRank& r : *ranks) {
    if (r.device < 0) {
      std::free(r.send);
      std::free(r.recv);
    } else {
#ifdef TPCOMM_BENCH_CUDA
      cudaSetDevice(r.device);
      cudaDeviceSynchronize();
      if (r.send) cudaFree(r.send);
      if (r.recv) cudaFree(r.recv);
      if (r.stream) cudaStreamDestroy(r.stream);
      if (r.evStart) cudaEventDestroy(static_cast<cudaEvent_t>(r.evStart));
      if (r.evStop) cudaEventDestroy(static_cast<cudaEvent_t>(r.evStop));
#endif
    }
    r.send = r.recv = nullptr;
  }
}

bool timeCollective(World& world, Backend& backend, std::vector<LocalRank>& ranks, bool inPlace, size_t count,
                    tpcomm::DataType dtype, tpcomm::ReduceOp op, const TimingPlan& plan, double* usPerColl,
                    std::string* error) {
  const bool gpu = anyGpu(ranks);
  for (int i = 0; i < plan.warmup; ++i)
    if (!backend.run(ranks, inPlace, count, dtype, op, error)) return false;
  if (!syncRanks(ranks, error)) return false;

  const bool graphMode = gpu && plan.graphLaunches > 0;
#ifdef TPCOMM_BENCH_CUDA
  Graphs graphs;
  if (graphMode) {
    if (!captureGraphs(backend, ranks, inPlace, count, dtype, op, plan.iters, &graphs, error)) return false;
    if (!launchGraphs(graphs, ranks, 1, error) || !syncRanks(ranks, error)) return false;  // upload, untimed
  }
#endif
  const double perBatch = graphMode ? static_cast<double>(plan.iters) * plan.graphLaunches : plan.iters;
  std::vector<double> batchUs;
  for (int rep = 0; rep < plan.repeats; ++rep) {
    if (!world.barrier()) {
      *error = "bootstrap barrier failed";
      return false;
    }
    double us = 0;
    if (!gpu) {
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < plan.iters; ++i)
        if (!backend.run(ranks, inPlace, count, dtype, op, error)) return false;
      auto t1 = std::chrono::steady_clock::now();
      us = std::chrono::duration<double, std::micro>(t1 - t0).count();
    } else {
#ifdef TPCOMM_BENCH_CUDA
      for (LocalRank& r : ranks) {
        BENCH_CUDA(cudaSetDevice(r.device));
        BENCH_CUDA(cudaEventRecord(static_cast<cudaEvent_t>(r.evStart), r.stream));
      }
      if (graphMode) {
        if (!launchGraphs(graphs, ranks, plan.graphLaunches, error)) return false;
      } else {
        for (int i = 0; i < plan.iters; ++i)
          if (!backend.run(ranks, inPlace, count, dtype, op, error)) return false;
      }
      for (LocalRank& r : ranks) {
        BENCH_CUDA(cudaSetDevice(r.device));
        BENCH_CUDA(cudaEventRecord(static_cast<cudaEvent_t>(r.evStop), r.stream));
      }
      for (LocalRank& r : ranks) {
        BENCH_CUDA(cudaSetDevice(r.device));
        BENCH_CUDA(cudaEventSynchronize(static_cast<cudaEvent_t>(r.evStop)));
        float ms = 0;
        BENCH_CUDA(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(r.evStart), static_cast<cudaEvent_t>(r.evStop)));
        us = std::max(us, 1000.0 * ms);
      }
#endif
    }
    batchUs.push_back(world.maxOf(us));
  }
  *usPerColl = median(batchUs) / perBatch;
  return true;
}

bool writeInputs(World& world, Backend& backend, std::vector<LocalRank>& ranks, bool inPlace, size_t count,
                 tpcomm::DataType dtype, bool errorData, bool poisonOutput, std::string* error) {
  const size_t es = tpcomm::dataTypeSize(dtype);
  const int n = world.nRanks();
  const Coll coll = backend.coll();
  auto fill = [&](void* dst, size_t elems, int rank) {
    if (errorData)
      fillErrorInput(dst, elems, dtype, rank);
    else
      fillInput(dst, elems, dtype, rank, n);
  };
  // Host images of what each rank's buffers must hold before the call: the input (element
  // first.. of rank r's values) and, when asked, poison everywhere the output goes that is not input.
  for (LocalRank& r : ranks) {
    const CollBuffers b = collBuffers(coll, r, inPlace, count, es, n);
    const size_t inCount = coll == Coll::kAllGather ? b.perRank : count;
    const size_t outCount = coll == Coll::kReduceScatter ? b.perRank : count;
    const bool poison = poisonOutput && (coll == Coll::kAllGather || !inPlace);
    void* input = const_cast<void*>(b.send);
    if (r.device < 0) {
      if (poison) std::memset(b.recv, kPoisonByte, outCount * es);
      fill(input, inCount, r.rank);  // after the poison: in-place all-gather's input is inside recv
      continue;
    }
#ifdef TPCOMM_BENCH_CUDA
    r.hostScratch.resize(std::max(inCount, outCount) * es);
    fill(r.hostScratch.data(), inCount, r.rank);
    // On this rank's stream and synchronised with it alone: with a thread per rank (-t) and ranks
    // sharing a GPU, a device-wide wait here (cudaDeviceSynchronize) waited for the other rank's
    // collective, which spins until this rank calls: both stuck until the timeout.
    BENCH_CUDA(cudaSetDevice(r.device));
    if (poison) BENCH_CUDA(cudaMemsetAsync(b.recv, kPoisonByte, outCount * es, r.stream));
    BENCH_CUDA(cudaMemcpyAsync(input, r.hostScratch.data(), inCount * es, cudaMemcpyHostToDevice, r.stream));
    BENCH_CUDA(cudaStreamSynchronize(r.stream));
#endif
  }
  return true;
}

bool checkCollective(World& world, Backend& backend, std::vector<LocalRank>& ranks, bool inPlace, size_t count,
                     tpcomm::DataType dtype, tpcomm::ReduceOp op, bool graph, int64_t* wrong, std::string* error,
                     double* accuracy) {
  const size_t es = tpcomm::dataTypeSize(dtype);
  const int n = world.nRanks();
  const Coll coll = backend.coll();
  if (!writeInputs(world, backend, ranks, inPlace, count, dtype, accuracy != nullptr, true, error)) return false;
  if (!world.barrier()) {
    *error = "bootstrap barrier failed";
    return false;
  }
  if (graph && anyGpu(ranks)) {
#ifdef TPCOMM_BENCH_CUDA
    Graphs graphs;
    if (!captureGraphs(backend, ranks, inPlace, count, dtype, op, 1, &graphs, error)) return false;
    if (!launchGraphs(graphs, ranks, 1, error)) return false;
#endif
  } else if (!backend.run(ranks, inPlace, count, dtype, op, error)) {
    return false;
  }
  if (!syncRanks(ranks, error)) return false;
  int64_t local = 0;
  if (accuracy) accuracy[0] = accuracy[1] = 0;
  for (LocalRank& r : ranks) {
    const CollBuffers b = collBuffers(coll, r, inPlace, count, es, n);
    const size_t outCount = coll == Coll::kReduceScatter ? b.perRank : count;
    const void* out = b.recv;
#ifdef TPCOMM_BENCH_CUDA
    if (r.device >= 0) {
      BENCH_CUDA(cudaSetDevice(r.device));
      BENCH_CUDA(cudaMemcpyAsync(r.hostScratch.data(), b.recv, outCount * es, cudaMemcpyDeviceToHost, r.stream));
      BENCH_CUDA(cudaStreamSynchronize(r.stream));
      out = r.hostScratch.data();
    }
#endif
    if (accuracy) {
      double maxAbs, rmsRel;
      compressionError(out, count, dtype, n, &maxAbs, &rmsRel);
      accuracy[0] = std::isnan(maxAbs) || maxAbs > accuracy[0] ? maxAbs : accuracy[0];
      accuracy[1] = std::isnan(rmsRel) || rmsRel > accuracy[1] ? rmsRel : accuracy[1];
    } else if (coll == Coll::kAllGather) local += countWrongGathered(out, b.perRank, dtype, n);
    else if (coll == Coll::kReduceScatter) local += countWrong(out, b.perRank, dtype, op, n, static_cast<size_t>(r.rank) * b.perRank);
    else local += countWrong(out, count, dtype, op, n);
  }
  *wrong = local;
  return true;
}

}  // namespace tpcomm_bench
