// norms.cuh: RMSNorm kernels: the residual add + norm epilogue and a strided row norm.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace qwen {
namespace gpu {

/// If `add` is non-null: x = bf16(x + add). Then out = bf16((x * inv_rms) * w), inv_rms in fp32.
/// One block of 512 per row. The unfused path's epilogue after an all-reduce (what
/// Communicator::allReduceResidualRmsNorm computes in one call, up to the sum-of-squares order).
void addRmsNorm(__nv_bfloat16* x, const __nv_bfloat16* add, const __nv_bfloat16* w, int n, int H, float eps,
                __nv_bfloat16* out, cudaStream_t s);
/// addRmsNorm's kernel, process-wide (the same bits either way): false (default) loads each
/// thread's elements of a row at once (rows up to 8192), true runs the per-element loop, for
/// A/B timing (QWEN_NORM=loop).
void setNormLoop(bool on);
/// What setNormLoop set (embedRmsNorm follows it too).
bool normLoop();
/// out[t, :] = bf16(rmsnorm(in[t, :]) * w) with in bf16 and an output row stride.
void rmsNormBf16(const __nv_bfloat16* in, int ldIn, const __nv_bfloat16* w, int n, int H, float eps, __nv_bfloat16* out,
                 int ldOut, cudaStream_t s);

}  // namespace gpu
}  // namespace qwen
