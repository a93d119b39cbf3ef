// fused_rmsnorm: the residual add + RMSNorm that follows the all-reduce in every tensor-parallel
// decoder layer (Communicator::allReduceResidualRmsNorm), defined once here for every path:
//
//   x        = all-reduce sum of `in` over ranks (fp32 in rank order, rounded to T: the bits
//              allReduce gives)
//   residual = round_T(residual + x)                                  (in place)
//   out      = round_T(residual * inv_rms * weight), inv_rms = 1 / sqrt(sum(residual^2) / hidden + eps)
//
// all in fp32 with one rounding per stored value. The sum of squares has a fixed order, the one
// the GPU kernels use (kRmsNormThreads threads; thread t owns the 16-byte units t, t + 512, ...
// of the row and accumulates them in element order with fmaf; then a xor-butterfly within each
// warp of 32 and the 16 warp sums in order), and every operation is an explicitly rounded IEEE
// one (no contraction, IEEE division and square root). hostResidualRmsNorm() computes exactly
// that on the CPU, so the host path, the fused GPU kernels and the unfused GPU kernel all give
// the same bits, which is what the GPU tests check.
#pragma once

#include <cstddef>

#include "algos/common/launch_shape.h"
#include "tpcomm/status.h"
#include "tpcomm/types.h"

namespace tpcomm {

/// Longest row (elements) the norm supports: 32 values per thread of a 512-thread block.
constexpr size_t kMaxRmsNormHidden = 16384;
/// Threads per row of every norm kernel (a block of kThreads); the sum-of-squares order depends on it.
constexpr int kRmsNormThreads = kThreads;

/// Elements per 16-byte unit of `dtype` (4 for f32, 8 for f16/bf16).
inline int rmsNormUnitElems(DataType dtype) { return static_cast<int>(16 / dataTypeSize(dtype)); }

/// Host path, with the GPU's bits: x holds the all-reduced rows (x may equal out). Buffers are
/// rows x hidden elements of dtype, weight is hidden elements. hidden <= kMaxRmsNormHidden.
void hostResidualRmsNorm(const void* x, void* residual, const void* weight, float eps, void* out, size_t rows,
                         size_t hidden, DataType dtype);

/// fp64 reference (tests): the sum over `inputs` (one buffer per rank), then the residual add
/// and the norm, all in double, from the same dtype inputs. Fills residualOut and out
/// (rows x hidden doubles).
void referenceResidualRmsNorm(const void* const* inputs, int nRanks, const void* residual, const void* weight,
                              double eps, size_t rows, size_t hidden, DataType dtype, double* residualOut, double* out);

/// The unfused GPU kernel: residual += x; out = rmsnorm(residual) * weight, one block per row.
struct RmsNormLaunch {
  const void* x;  // all-reduced rows (may equal out)
  void* residual;
  const void* weight;
  void* out;
  float eps;
  size_t rows, hidden;
  int dtype;  // DataType
  int pdl;    // launch with programmatic dependent launch (sm_90+)
};
/// Enqueues the kernel (fused_rmsnorm.cu). Loading it: preloadResidualRmsNorm().
Status launchResidualRmsNorm(const RmsNormLaunch& p, cudaStream_t stream);
Status preloadResidualRmsNorm();

}  // namespace tpcomm
