// Helpers for the GPU all-reduce tests: integer-valued inputs whose exact results are known,
// host references, bit-level comparisons. Shared by the createGroup and mpirun test programs.
#pragma once

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "algos/host_reduce.h"
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

// The GPUs a multi-rank test puts its ranks on: every GPU when there are two or more, else two
// ranks sharing GPU 0 (gpu_test_main.cc then sets TPCOMM_ALLOW_SHARED_DEVICE=1). A shared-device
// run proves the protocols correct (every push, flag and epoch crosses between two ranks as it
// does between two GPUs), not fast, and has no NCCL (it needs one GPU per rank).
inline std::vector<int> rankDevices() {
  const int n = gpuCount();
  std::vector<int> d;
  for (int i = 0; i < n; ++i) d.push_back(i);
  if (n == 1) d.push_back(0);
  return d;
}
inline bool sharedDevice() { return gpuCount() == 1; }

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
