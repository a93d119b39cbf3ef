// copy_local's kernel (copy_local.cu), as its algorithm (copy_local.cc) calls it.
#pragma once

#include <cstddef>

#include "tpcomm/status.h"
#include "tpcomm/types.h"

#ifdef TPCOMM_HAVE_CUDA
#include <cuda_runtime_api.h>

namespace tpcomm {

/// out[i] = in[i] + 0 in fp32, rounded once (the zero rule), on `stream`; in place allowed.
Status launchZeroRuleCopy(const void* in, void* out, size_t count, DataType dtype, cudaStream_t stream);
/// Loads the kernel for every dtype (Algorithm::preload).
Status preloadZeroRuleCopy();

}  // namespace tpcomm
#endif
