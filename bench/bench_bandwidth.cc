// bench_bandwidth: reference bandwidths measured in the same run (see bench_bandwidth.h).
#include "bench_bandwidth.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#ifdef TPCOMM_BENCH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace tpcomm_bench {
namespace {

double medianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

double hostMemcpyGBps(size_t bytes) {
  char* src = static_cast<char*>(std::aligned_alloc(4096, bytes));
  char* dst = static_cast<char*>(std::aligned_alloc(4096, bytes));
  if (!src || !dst) {
    std::free(src);
    std::free(dst);
    return 0;
  }
  std::memset(src, 1, bytes);
  std::memset(dst, 0, bytes);
  std::memcpy(dst, src, bytes);  // warm-up
  std::vector<double> sec;
  for (int i = 0; i < 5; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    std::memcpy(dst, src, bytes);
    auto t1 = std::chrono::steady_clock::now();
    sec.push_back(std::chrono::duration<double>(t1 - t0).count());
    src[i] = dst[bytes - 1 - i];  // keep the copies observable
  }
  std::free(src);
  std::free(dst);
  return static_cast<double>(bytes) / medianOf(sec) / 1e9;
}

bool pinnedCopyGBps(std::vector<LocalRank>& ranks, size_t bytes, double* d2h, double* h2d, std::string* error) {
#ifdef TPCOMM_BENCH_CUDA
  const size_t n = ranks.size();
  std::vector<void*> host(n, nullptr), dev(n, nullptr);
  auto cleanup = [&]() {
    for (size_t i = 0; i < n; ++i) {
      cudaSetDevice(ranks[i].device);
      if (host[i]) cudaFreeHost(host[i]);
      if (dev[i]) cudaFree(dev[i]);
    }
  };
  auto fail = [&](const char* what, cudaError_t e) {
    *error = std::string(what) + ": " + cudaGetErrorString(e);
    cudaGetLastError();
    cleanup();
    return false;
  };
  cudaError_t e;
  for (size_t i = 0; i < n; ++i) {
    if ((e = cudaSetDevice(ranks[i].device)) != cudaSuccess) return fail("cudaSetDevice", e);
    if ((e = cudaHostAlloc(&host[i], bytes, cudaHostAllocPortable)) != cudaSuccess) return fail("cudaHostAlloc", e);
    if ((e = cudaMalloc(&dev[i], bytes)) != cudaSuccess) return fail("cudaMalloc", e);
    std::memset(host[i], 1, bytes);
  }
  for (int dir = 0; dir < 2; ++dir) {
    const bool toHost = dir == 0;
    std::vector<std::vector<double>> sec(n);
    for (int rep = 0; rep < 6; ++rep) {  // rep 0 is the warm-up
      for (size_t i = 0; i < n; ++i) {
        cudaSetDevice(ranks[i].device);
        cudaEventRecord(static_cast<cudaEvent_t>(ranks[i].evStart), ranks[i].stream);
        e = toHost ? cudaMemcpyAsync(host[i], dev[i], bytes, cudaMemcpyDeviceToHost, ranks[i].stream)
                   : cudaMemcpyAsync(dev[i], host[i], bytes, cudaMemcpyHostToDevice, ranks[i].stream);
        if (e != cudaSuccess) return fail("cudaMemcpyAsync", e);
        cudaEventRecord(static_cast<cudaEvent_t>(ranks[i].evStop), ranks[i].stream);
      }
      for (size_t i = 0; i < n; ++i) {
        cudaSetDevice(ranks[i].device);
        if ((e = cudaEventSynchronize(static_cast<cudaEvent_t>(ranks[i].evStop))) != cudaSuccess)
          return fail("cudaEventSynchronize", e);
        float ms = 0;
        cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(ranks[i].evStart), static_cast<cudaEvent_t>(ranks[i].evStop));
        if (rep > 0) sec[i].push_back(ms / 1000.0);
      }
    }
    double slowest = 1e30;
    for (size_t i = 0; i < n; ++i) slowest = std::min(slowest, static_cast<double>(bytes) / medianOf(sec[i]) / 1e9);
    (toHost ? *d2h : *h2d) = slowest;
  }
  cleanup();
  return true;
#else
  (void)ranks;
  (void)bytes;
  (void)d2h;
  (void)h2d;
  *error = "built without CUDA";
  return false;
#endif
}

}  // namespace tpcomm_bench
