// bench_bandwidth: the reference bandwidths allreduce_perf measures in the same run, so that a
// speed claim is a ratio against this machine rather than a number from elsewhere:
//   host ranks: single-thread memcpy of 64 MiB (what one core can move);
//   GPU ranks:  pinned-host cudaMemcpyAsync of 64 MiB, D2H and H2D (what the PCIe path can move),
//               all local ranks copying at once, as they do inside a staged all-reduce.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "bench_runner.h"

namespace tpcomm_bench {

constexpr size_t kReferenceBytes = 64u << 20;

/// GB/s (1e9 bytes/s, counting the bytes copied once) of memcpy of `bytes` by this thread,
/// median of 5 after one warm-up copy.
double hostMemcpyGBps(size_t bytes);

/// Per direction, the slowest local rank's GB/s for cudaMemcpyAsync of `bytes` between device
/// memory and pinned host memory, every local rank copying at once; median of 5 after a
/// warm-up. false + message on a CUDA error or without CUDA.
bool pinnedCopyGBps(std::vector<LocalRank>& ranks, size_t bytes, double* d2h, double* h2d, std::string* error);

}  // namespace tpcomm_bench
