// common.cu: the process-wide PDL and wide-row switches (gpu::setPdl, setWideRowKernels) and the
// module loading mode's query.
#include <cuda.h>

#include "gpu_kernels.h"
#include "kernels/common.cuh"

namespace qwen {
namespace gpu {
namespace {
bool gPdl = false;
bool gWideRows = true;
}  // namespace

void setPdl(bool on) { gPdl = on; }
bool pdlEnabled() { return gPdl; }
void setWideRowKernels(bool on) { gWideRows = on; }
bool wideRows(int n) { return gWideRows && n > kWideRows; }

bool lazyModuleLoading(bool* known) {
  // Through the runtime's driver entry point: no link against libcuda.
  using Fn = CUresult (*)(CUmoduleLoadingMode*);
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q;
  CUmoduleLoadingMode mode = CU_MODULE_EAGER_LOADING;
  *known = cudaGetDriverEntryPointByVersion("cuModuleGetLoadingMode", &fn, 12000, cudaEnableDefault, &q) ==
               cudaSuccess &&
           q == cudaDriverEntryPointSuccess && fn && reinterpret_cast<Fn>(fn)(&mode) == CUDA_SUCCESS;
  return *known && mode == CU_MODULE_LAZY_LOADING;
}

}  // namespace gpu
}  // namespace qwen
