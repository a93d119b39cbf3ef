// The residual add + RMSNorm of Communicator::allReduceResidualRmsNorm on its own, for an engine
// that all-reduces some other way (e.g. NCCL) and still wants tpcomm's norm, bit for bit.
#pragma once

#include <cstddef>

#include "tpcomm/status.h"
#include "tpcomm/types.h"

namespace tpcomm {

/// On the current CUDA device, stream-ordered on `stream`: per row, residualInOut += x and
/// out = residualInOut / sqrt(mean(residualInOut^2) + eps) * weight, in fp32 with one rounding
/// per stored value, in the fixed order allReduceResidualRmsNorm uses (so its bits are the fused
/// call's). x, residualInOut and out hold rows x hidden elements of dtype (device memory), weight
/// holds hidden; hidden 1..16384, rows >= 1; out may equal x; residualInOut may alias neither.
/// Graph-capturable. kInvalidArgument naming the argument for bad input; kNotSupported when
/// tpcomm was built without CUDA.
Status residualRmsNorm(const void* x, void* residualInOut, const void* weight, float eps, void* out, size_t rows,
                       size_t hidden, DataType dtype, cudaStream_t stream);

}  // namespace tpcomm
