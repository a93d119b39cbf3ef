// common.cu: the process-wide PDL switch (gpu::setPdl).
#include "gpu_kernels.h"
#include "kernels/common.cuh"

namespace qwen {
namespace gpu {
namespace {
bool gPdl = false;
}  // namespace

void setPdl(bool on) { gPdl = on; }
bool pdlEnabled() { return gPdl; }

}  // namespace gpu
}  // namespace qwen
