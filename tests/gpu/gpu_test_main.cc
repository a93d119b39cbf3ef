// main() of tpcomm_gpu_tests. Without a usable CUDA device it prints the reason and exits 77,
// which tests/gpu/CMakeLists.txt maps to ctest's "Skipped" (SKIP_RETURN_CODE): a machine
// without GPUs skips these tests visibly instead of passing them. Tests needing more than the
// devices present (e.g. 2 GPUs) GTEST_SKIP with the reason themselves.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "gpu_allreduce_util.h"

int main(int argc, char** argv) {
  // Before any CUDA context: a stream per hardware queue for the ~20 streams the multi-rank tests
  // keep on one GPU (ranks sharing it, the copy-engine mode's two per rank). With the default 8,
  // streams share queues in order, and one rank's copy queued behind its spinning flag kernel can
  // hold back the peer work that kernel waits for.
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    std::printf("tpcomm_gpu_tests: SKIPPED: no CUDA device (%s)\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount returned 0");
    return 77;
  }
  std::printf("tpcomm_gpu_tests: %d CUDA device(s)\n", count);
  // Every P2P kernel checks that all ranks make the same call (a debug mode; on in the tests).
  setenv("TPCOMM_CHECK_CALLS", "1", 0);
  const int ranks = tpcomm_test::testRanks();
  if (const char* v = std::getenv("TPCOMM_TEST_RANKS"); v && ranks != std::atoi(v)) {
    std::printf("tpcomm_gpu_tests: TPCOMM_TEST_RANKS=%s: expected a rank count from 2 to 16\n", v);
    return 2;
  }
  if (ranks > count) {
    const std::string line = tpcomm_test::shareGpus(ranks, count);
    if (line.empty()) {
      std::printf("tpcomm_gpu_tests: cannot read the GPU's multiprocessor count\n");
      return 1;
    }
    std::printf("tpcomm_gpu_tests: %s\n", line.c_str());
  }
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  const testing::UnitTest& u = *testing::UnitTest::GetInstance();
  std::printf("tpcomm_gpu_tests: %d ranks: %d passed, %d failed, %d skipped\n", ranks, u.successful_test_count(),
              u.failed_test_count(), u.skipped_test_count());
  return rc;
}
