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

// Merges two partial (max, index, sum); with kSum the sums are rescaled to the larger maximum,
// without it they stay 0.
template <bool kSum = true>
__device__ Top mergeTop(Top a, Top b) {
  const bool bWins = b.max > a.max || (b.max == a.max && b.index < a.index);
  const Top& w = bWins ? b : a;
  const Top& l = bWins ? a : b;
  return Top{w.max, w.index, kSum ? w.sum + l.sum * __expf(l.max - w.max) : 0.f};
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

// One element seen by a thread, its elements in ascending index: a strictly larger value takes the
// maximum (so the first of equal maxima stays); with kSum the running sum of exp(v - max) is
// rescaled to the new maximum (online softmax).
template <bool kSum>
__device__ __forceinline__ void see(Top& m, float v, int i) {
  if (v > m.max) {
    if (kSum) m.sum = m.sum * __expf(m.max - v) + 1.f;
    m.max = v, m.index = i;
  } else if (kSum) {
    m.sum += __expf(v - m.max);
  }
}

// Lane 0 of the warp gets the merge of the warp's 32 partials (the same butterfly order every time).
template <bool kSum>
__device__ __forceinline__ Top warpMergeTop(Top m) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const Top other{__shfl_xor_sync(0xffffffffu, m.max, o), __shfl_xor_sync(0xffffffffu, m.index, o),
                    __shfl_xor_sync(0xffffffffu, m.sum, o)};
    m = mergeTop<kSum>(m, other);
  }
  return m;
}

// One block of kArgmaxThreads per row. The row in 16-byte loads (when V % 4 == 0 and the logits
// are 16-byte aligned), kArgmaxBatch of them a thread in flight before any is used: one block
// streams the row (600 KB at qwen3's vocabulary) where a load a thread at a time waited one
// round trip per element. Thread k sees float4s k, k + 1024, ... in order (elements ascending),
// then each warp merges by butterfly and warp 0 merges the 32 warps' partials the same way.
// kSum: the sums of exp(v - max) (the table's third entry) too, one __expf an element; without
// it (greedy steps that want no top probability) the entry is 0 and no exponential is taken.
// !kVec (QWEN_ARGMAX=loop, setArgmaxLoop): a float at a time, always with the sums, for A/B
// timing; the same tokens (the sums, another thread's share of the row each, differ within
// rounding).
// kPick (tp == 1: nothing to gather): the block also picks from the entry it wrote, with
// pickArgmaxKernel's code (the same bits), into tokens[t] / topProb[t]: one launch where the
// argmax took two (a draft step of a small model is launch-bound).
constexpr int kArgmaxThreads = 1024;
constexpr int kArgmaxBatch = 8;
template <bool kPick, bool kSum, bool kVec = true>
__global__ void __launch_bounds__(kArgmaxThreads) localArgmaxKernel(const float* logits, int V, int vocabBegin, int tp,
                                                                    int rank, float* table, int32_t* tokens,
                                                                    float* topProb) {
  pdlLaunch();
  pdlWait();
  const int t = blockIdx.x;
  const float* l = logits + static_cast<int64_t>(t) * V;
  Top mine{-FLT_MAX, 0x7fffffff, 0.f};
  if (kVec && V % 4 == 0 && (reinterpret_cast<uintptr_t>(l) & 15u) == 0) {
    const float4* l4 = reinterpret_cast<const float4*>(l);
    const int V4 = V / 4;
    for (int base = threadIdx.x; base < V4; base += kArgmaxBatch * kArgmaxThreads) {
      float4 v[kArgmaxBatch];
#pragma unroll
      for (int u = 0; u < kArgmaxBatch; ++u) {
        const int j = base + u * kArgmaxThreads;
        if (j < V4) v[u] = l4[j];
      }
#pragma unroll
      for (int u = 0; u < kArgmaxBatch; ++u) {
        const int j = base + u * kArgmaxThreads;
        if (j >= V4) break;
        see<kSum>(mine, v[u].x, 4 * j), see<kSum>(mine, v[u].y, 4 * j + 1);
        see<kSum>(mine, v[u].z, 4 * j + 2), see<kSum>(mine, v[u].w, 4 * j + 3);
      }
    }
  } else {
    for (int i = threadIdx.x; i < V; i += kArgmaxThreads) see<kSum>(mine, l[i], i);
  }
  __shared__ Top s[kArgmaxThreads / 32];
  mine = warpMergeTop<kSum>(mine);
  if ((threadIdx.x & 31) == 0) s[threadIdx.x >> 5] = mine;
  float* row = table + static_cast<int64_t>(t) * tp * kEntry;
  if (threadIdx.x < tp * kEntry) row[threadIdx.x] = 0.f;  // the other ranks' entries: zero for the sum
  __syncthreads();
  if (threadIdx.x >= 32) return;
  mine = warpMergeTop<kSum>(s[threadIdx.x]);
  if (threadIdx.x == 0) {
    // A row with nothing above -FLT_MAX (all NaN or -inf) keeps the index it started with: it
    // names the shard's first token, as the CPU reference does, rather than no token at all.
    if (mine.index == 0x7fffffff) mine.index = 0;
    row[rank * kEntry] = mine.max;
    row[rank * kEntry + 1] = static_cast<float>(vocabBegin + mine.index);
    row[rank * kEntry + 2] = mine.sum;
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

bool gArgmaxLoop = false;  // setArgmaxLoop

}  // namespace

void setArgmaxLoop(bool on) { gArgmaxLoop = on; }

void localArgmax(const float* logits, int n, int V, int vocabBegin, int tp, int rank, float* table, cudaStream_t s) {
  launch(gArgmaxLoop ? localArgmaxKernel<false, true, false> : localArgmaxKernel<false, true>, n, kArgmaxThreads, s,
         logits, V, vocabBegin, tp, rank, table, static_cast<int32_t*>(nullptr), static_cast<float*>(nullptr));
}

void argmaxPick(const float* logits, int n, int V, float* table, int32_t* tokens, float* topProb, cudaStream_t s) {
  if (gArgmaxLoop)  // QWEN_ARGMAX=loop: a float at a time with the sums, for A/B timing
    launch(localArgmaxKernel<true, true, false>, n, kArgmaxThreads, s, logits, V, 0, 1, 0, table, tokens, topProb);
  else if (topProb)
    launch(localArgmaxKernel<true, true>, n, kArgmaxThreads, s, logits, V, 0, 1, 0, table, tokens, topProb);
  else
    launch(localArgmaxKernel<true, false>, n, kArgmaxThreads, s, logits, V, 0, 1, 0, table, tokens, topProb);
}

void pickArgmax(const float* table, int n, int tp, int32_t* tokens, float* topProb, cudaStream_t s) {
  launch(pickArgmaxKernel, (n + 127) / 128, 128, s, table, n, tp, tokens, topProb);
}

}  // namespace gpu
}  // namespace qwen
