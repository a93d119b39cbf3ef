// main() of tpcomm_gpu_tests. Without a usable CUDA device it prints the reason and exits 77,
// which tests/gpu/CMakeLists.txt maps to ctest's "Skipped" (SKIP_RETURN_CODE): a machine
// without GPUs skips these tests visibly instead of passing them. Tests needing more than the
// devices present (e.g. 2 GPUs) GTEST_SKIP with the reason themselves.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

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
  if (count == 1) {
    // Multi-rank tests put two ranks on the one GPU (tests/gpu/gpu_allreduce_util.h).
    setenv("TPCOMM_ALLOW_SHARED_DEVICE", "1", 0);
    // Both ranks' kernels must be resident at once (create checks it): 2 x 64 two-shot blocks
    // fit an H200's 132 SMs at one 512-thread block per SM, 2 x 128 would not.
    setenv("TPCOMM_TWOSHOT_BLOCKS", "64", 0);
    std::printf("tpcomm_gpu_tests: one GPU: multi-rank tests run 2 ranks on GPU 0 (correctness, not speed; no NCCL)\n");
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
