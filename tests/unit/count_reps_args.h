// count_reps_args.h: the "[--count N] [--reps N]" command line of the quantizer benchmarks
// (tests/unit/quantize_host_bench.cc, tests/gpu/quantize_gpu_bench.cu).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tpcomm {
namespace test {

/// Parses argv into *count and *reps (left at their defaults when absent). On anything else, or
/// a value that is not positive, prints the usage and returns false.
inline bool parseCountReps(int argc, char** argv, size_t* count, int* reps) {
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--count") && i + 1 < argc) {
      *count = std::strtoull(argv[++i], nullptr, 10);
    } else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) {
      *reps = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--count N] [--reps N]\n", argv[0]);
      return false;
    }
  }
  if (*count == 0 || *reps < 1) {
    std::fprintf(stderr, "%s: --count and --reps must be positive\n", argv[0]);
    return false;
  }
  return true;
}

}  // namespace test
}  // namespace tpcomm
