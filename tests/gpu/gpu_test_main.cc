// main() of tpcomm_gpu_tests. Without a usable CUDA device it prints the reason and exits 77,
// which tests/gpu/CMakeLists.txt maps to ctest's "Skipped" (SKIP_RETURN_CODE): a machine
// without GPUs skips these tests visibly instead of passing them. Tests needing more than the
// devices present (e.g. 2 GPUs) GTEST_SKIP with the reason themselves.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>

int main(int argc, char** argv) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    std::printf("tpcomm_gpu_tests: SKIPPED: no CUDA device (%s)\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount returned 0");
    return 77;
  }
  std::printf("tpcomm_gpu_tests: %d CUDA device(s)\n", count);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
