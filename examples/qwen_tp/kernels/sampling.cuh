// sampling.cuh: greedy sampling: vocab-parallel argmax through a (max, index) table.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace qwen {
namespace gpu {

/// Per row of logits [n, V]: (max, vocabBegin + argmax, lowest index on ties) into
/// table[(t * tp + rank) * 2 + {0, 1}]; the rest of the table is zeroed by this call.
void localArgmax(const float* logits, int n, int V, int vocabBegin, int tp, int rank, float* table, cudaStream_t s);
/// After the table is sum-all-reduced: tokens[t] = index of the best (value, lowest rank).
void pickArgmax(const float* table, int n, int tp, int32_t* tokens, cudaStream_t s);

}  // namespace gpu
}  // namespace qwen
