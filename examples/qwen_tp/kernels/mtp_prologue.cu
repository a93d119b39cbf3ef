// mtp_prologue.cu: the MTP head's fc input, grid (token, 2): blockIdx.y 0 norms the token's
// embedding into cat[t, 0:H], 1 the hidden row into cat[t, H:2H]. A draft step at a
// launch-bound size pays ~3.5 us per kernel; this is one launch where embed + two norms were three.
#include <cstdint>

#include "kernels/mtp_prologue.cuh"
#include "kernels/norm_rows.cuh"

namespace qwen {
namespace gpu {
namespace {

__global__ void mtpPrologueKernel(const int32_t* tokens, const __nv_bfloat16* E, int vocabBegin, int vocabLocal,
                                  const __nv_bfloat16* x, const __nv_bfloat16* hidden, const __nv_bfloat16* wE,
                                  const __nv_bfloat16* wH, int H, float eps, __nv_bfloat16* cat) {
  pdlLaunch();
  pdlWait();
  const int t = blockIdx.x;
  __nv_bfloat16* out = cat + static_cast<int64_t>(t) * 2 * H;
  if (blockIdx.y == 1) {
    const __nv_bfloat16* h = hidden + static_cast<int64_t>(t) * H;
    rmsNormRow([&](int i) { return __bfloat162float(h[i]); }, wH, H, eps, out + H);
  } else if (tokens) {  // embed()'s row, read in place: the values embed() would have copied
    const int local = tokens[t] - vocabBegin;
    const bool mine = local >= 0 && local < vocabLocal;
    const __nv_bfloat16* e = E + static_cast<int64_t>(mine ? local : 0) * H;
    rmsNormRow([&](int i) { return mine ? __bfloat162float(e[i]) : 0.f; }, wE, H, eps, out);
  } else {
    const __nv_bfloat16* e = x + static_cast<int64_t>(t) * H;
    rmsNormRow([&](int i) { return __bfloat162float(e[i]); }, wE, H, eps, out);
  }
}

}  // namespace

void mtpPrologue(const int32_t* tokens, const __nv_bfloat16* E, int vocabBegin, int vocabLocal, const __nv_bfloat16* x,
                 const __nv_bfloat16* hidden, const __nv_bfloat16* wE, const __nv_bfloat16* wH, int n, int H, float eps,
                 __nv_bfloat16* cat, cudaStream_t s) {
  launch(mtpPrologueKernel, dim3(n, 2), kNormThreads, s, tokens, E, vocabBegin, vocabLocal, x, hidden, wE, wH, H, eps,
         cat);
}

}  // namespace gpu
}  // namespace qwen
