// sampling.cu: greedy sampling: per-rank argmax into a (max, index, sum) table, then the pick.
#include <algorithm>
#include <cfloat>
#include <cstdint>

#include "kernels/common.cuh"
#include "kernels/sampling.cuh"

namespace qwen {
namespace gpu {
namespace {

// An entry of the table (kArgmaxEntry floats): each rank's row maximum, its vocabulary index, and
// the sum of exp(logit - max) over the rank's shard, so that after the table's sum-all-reduce
// every rank derives the same top probability (for --spec-draft-p-min) from the same numbers.
constexpr int kEntry = kArgmaxEntry;

struct Top {
  float max;  // -FLT_MAX when nothing seen
  int index;  // lowest index among equal maxima
  float sum;  // sum of exp(v - max) over what was seen
};

// Merges two partial (max, index, sum); the sums are rescaled to the larger maximum.
__device__ Top mergeTop(Top a, Top b) {
  const bool bWins = b.max > a.max || (b.max == a.max && b.index < a.index);
  const Top& w = bWins ? b : a;
  const Top& l = bWins ? a : b;
  return Top{w.max, w.index, w.sum + l.sum * __expf(l.max - w.max)};
}

// Row t of the gathered table: the token of the best (value, lowest rank) and, when topProb is
// not null, its probability, 1 / sum over the vocabulary of exp(logit - global max), summed in
// rank order so every rank gets the same bits.
__device__ __forceinline__ void pickRow(const float* row, int tp, int32_t* token, float* topProb) {
  int br = 0;
  for (int r = 1; r < tp; ++r)
    if (row[r * kEntry] > row[br * kEntry]) br = r;
  *token = static_cast<int32_t>(row[br * kEntry + 1]);
  if (topProb) {
    const float m = row[br * kEntry];
    float sum = 0.f;
    for (int r = 0; r < tp; ++r) sum += row[r * kEntry + 2] * __expf(row[r * kEntry] - m);
    *topProb = 1.f / sum;
  }
}

// One block per row. One pass: a running maximum with its rescaled sum (online softmax).
// kPick (tp == 1: nothing to gather): the block also picks from the entry it wrote, with
// pickArgmaxKernel's code (the same bits), into tokens[t] / topProb[t]: one launch where the
// argmax took two (a draft step of a small model is launch-bound).
template <bool kPick>
__global__ void localArgmaxKernel(const float* logits, int V, int vocabBegin, int tp, int rank, float* table,
                                  int32_t* tokens, float* topProb) {
  pdlLaunch();
  pdlWait();
  const int t = blockIdx.x;
  const float* l = logits + static_cast<int64_t>(t) * V;
  Top mine{-FLT_MAX, 0x7fffffff, 0.f};
  for (int i = threadIdx.x; i < V; i += blockDim.x) {  // per thread, i ascends: first max kept
    const float v = l[i];
    if (v > mine.max) {
      mine.sum = mine.sum * __expf(mine.max - v) + 1.f;
      mine.max = v, mine.index = i;
    } else {
      mine.sum += __expf(v - mine.max);
    }
  }
  __shared__ Top s[1024];
  s[threadIdx.x] = mine;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) s[threadIdx.x] = mergeTop(s[threadIdx.x], s[threadIdx.x + o]);
    __syncthreads();
  }
  float* row = table + static_cast<int64_t>(t) * tp * kEntry;
  if (threadIdx.x < tp * kEntry) row[threadIdx.x] = 0.f;  // the other ranks' entries: zero for the sum
  __syncthreads();
  if (threadIdx.x == 0) {
    row[rank * kEntry] = s[0].max;
    row[rank * kEntry + 1] = static_cast<float>(vocabBegin + s[0].index);
    row[rank * kEntry + 2] = s[0].sum;
    if (kPick) pickRow(row, tp, tokens + t, topProb ? topProb + t : nullptr);
  }
}

__global__ void pickArgmaxKernel(const float* table, int n, int tp, int32_t* tokens, float* topProb) {
  pdlLaunch();
  pdlWait();
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= n) return;
  pickRow(table + static_cast<int64_t>(t) * tp * kEntry, tp, tokens + t, topProb ? topProb + t : nullptr);
}

}  // namespace

void localArgmax(const float* logits, int n, int V, int vocabBegin, int tp, int rank, float* table, cudaStream_t s) {
  launch(localArgmaxKernel<false>, n, 1024, s, logits, V, vocabBegin, tp, rank, table, static_cast<int32_t*>(nullptr),
         static_cast<float*>(nullptr));
}

void argmaxPick(const float* logits, int n, int V, float* table, int32_t* tokens, float* topProb, cudaStream_t s) {
  launch(localArgmaxKernel<true>, n, 1024, s, logits, V, 0, 1, 0, table, tokens, topProb);
}

void pickArgmax(const float* table, int n, int tp, int32_t* tokens, float* topProb, cudaStream_t s) {
  launch(pickArgmaxKernel, (n + 127) / 128, 128, s, table, n, tp, tokens, topProb);
}

}  // namespace gpu
}  // namespace qwen
