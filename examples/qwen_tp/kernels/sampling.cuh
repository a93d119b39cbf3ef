// sampling.cuh: greedy sampling: vocab-parallel argmax through a (max, index, sum) table.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace qwen {
namespace gpu {

/// Floats per (row, rank) entry of the table.
constexpr int kArgmaxEntry = 3;
/// Per row of logits [n, V]: (max, vocabBegin + argmax with the lowest index on ties, sum of
/// exp(logit - max) over the shard) into table[(t * tp + rank) * 3 + {0, 1, 2}]; the rest of the
/// row's table is zeroed by this call, so a sum-all-reduce gathers every rank's entry. NaN never
/// wins; a row with nothing above -FLT_MAX (all NaN or -inf) gives (-FLT_MAX, vocabBegin).
void localArgmax(const float* logits, int n, int V, int vocabBegin, int tp, int rank, float* table, cudaStream_t s);
/// After the table is sum-all-reduced: tokens[t] = index of the best (value, lowest rank); when
/// topProb is not null, topProb[t] = that token's softmax probability over the whole vocabulary
/// (the same on every rank: computed from the same table in rank order).
void pickArgmax(const float* table, int n, int tp, int32_t* tokens, float* topProb, cudaStream_t s);
/// QWEN_ARGMAX=loop (GpuModel sets it at init): both kernels read a float at a time and always
/// take the sums, for A/B timing against the 16-byte loads. Process-wide.
void setArgmaxLoop(bool on);
/// tp == 1 (vocabulary not split, nothing to all-reduce): localArgmax and pickArgmax in one
/// launch, the same tokens and topProb bits. Without topProb it takes no exponential: the
/// table's sum entries are then 0 (nothing reads them).
void argmaxPick(const float* logits, int n, int V, float* table, int32_t* tokens, float* topProb, cudaStream_t s);

}  // namespace gpu
}  // namespace qwen
