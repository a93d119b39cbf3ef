// embedding.cu: vocab-parallel embedding lookup; bf16 row copy.
#include <algorithm>
#include <cfloat>
#include <cstdint>

#include "kernels/common.cuh"
#include "kernels/embedding.cuh"

namespace qwen {
namespace gpu {
namespace {

__global__ void embedKernel(const int32_t* tokens, const __nv_bfloat16* E, int vocabBegin, int vocabLocal, int H,
                            __nv_bfloat16* x) {
  pdlLaunch();
  pdlWait();
  const int t = blockIdx.x;
  const int local = tokens[t] - vocabBegin;
  const bool mine = local >= 0 && local < vocabLocal;
  for (int i = threadIdx.x; i < H; i += blockDim.x)
    x[static_cast<int64_t>(t) * H + i] = mine ? E[static_cast<int64_t>(local) * H + i] : __float2bfloat16_rn(0.f);
}

__global__ void copyRowsKernel(const __nv_bfloat16* src, int ldSrc, __nv_bfloat16* dst, int ldDst, int cols) {
  pdlLaunch();
  pdlWait();
  for (int i = threadIdx.x; i < cols; i += blockDim.x)
    dst[static_cast<int64_t>(blockIdx.x) * ldDst + i] = src[static_cast<int64_t>(blockIdx.x) * ldSrc + i];
}

}  // namespace

void embed(const int32_t* tokens, int n, const __nv_bfloat16* E, int vocabBegin, int vocabLocal, int H,
           __nv_bfloat16* x, cudaStream_t s) {
  launch(embedKernel, n, 256, s, tokens, E, vocabBegin, vocabLocal, H, x);
}

void copyRowsBf16(const __nv_bfloat16* src, int ldSrc, __nv_bfloat16* dst, int ldDst, int n, int cols, cudaStream_t s) {
  launch(copyRowsKernel, n, 256, s, src, ldSrc, dst, ldDst, cols);
}

}  // namespace gpu
}  // namespace qwen
