// cudaFailure: the message of a failed CUDA runtime call (TPCOMM_CUDA_TRY in common/error.h).
#include <cuda_runtime_api.h>

#include "common/error.h"

namespace tpcomm {

Status cudaFailure(int err, const char* what, const char* file, int line, const char* context) {
  cudaGetLastError();  // a launch error is sticky until read: the next call must not see it
  const cudaError_t e = static_cast<cudaError_t>(err);
  return setError(Status::kCudaError, file, line, "%s%s%s: %s (%s)", context ? context : "", context ? ": " : "", what,
                  cudaGetErrorString(e), cudaGetErrorName(e));
}

}  // namespace tpcomm
