// host_device.h: TPCOMM_HD marks a function that host code and kernels both call (__host__
// __device__ under nvcc, nothing for the host compiler).
#pragma once

#ifdef __CUDACC__
#define TPCOMM_HD __host__ __device__
#else
#define TPCOMM_HD
#endif

#include <cstddef>

namespace tpcomm {

/// v rounded up to a multiple of a (a > 0).
TPCOMM_HD constexpr size_t alignUp(size_t v, size_t a) { return (v + a - 1) / a * a; }

}  // namespace tpcomm
