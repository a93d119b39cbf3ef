// mtp_prologue.cuh: the MTP head's fc input in one launch: both pre-fc RMSNorms (and, at tp == 1,
// the token's embedding row), written as the concatenation.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace qwen {
namespace gpu {

/// cat[t] = [rmsnorm(e_t) * wE | rmsnorm(hidden[t]) * wH] ([n, 2H]; hidden [n, H]): the two
/// rmsNormBf16 launches of the MTP head (mtp.pre_fc_norm_embedding, mtp.pre_fc_norm_hidden) in
/// one, with their arithmetic, so the same bits. e_t: when tokens is not null, row
/// tokens[t] - vocabBegin of E gathered here (zero when not owned; tp == 1 only, where the
/// embedding needs no all-reduce), which also saves embed()'s launch; else row t of x (the
/// embedding gathered and summed over the ranks).
void mtpPrologue(const int32_t* tokens, const __nv_bfloat16* E, int vocabBegin, int vocabLocal, const __nv_bfloat16* x,
                 const __nv_bfloat16* hidden, const __nv_bfloat16* wE, const __nv_bfloat16* wH, int n, int H, float eps,
                 __nv_bfloat16* cat, cudaStream_t s);

}  // namespace gpu
}  // namespace qwen
