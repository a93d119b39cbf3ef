// sampling.cu: greedy sampling: per-rank argmax into a (max, index) table, then the pick.
#include <algorithm>
#include <cfloat>
#include <cstdint>

#include "kernels/common.cuh"
#include "kernels/sampling.cuh"

namespace qwen {
namespace gpu {
namespace {

// One block per row; lowest index wins ties.
__global__ void localArgmaxKernel(const float* logits, int V, int vocabBegin, int tp, int rank, float* table) {
  pdlLaunch();
  pdlWait();
  const int t = blockIdx.x;
  const float* l = logits + static_cast<int64_t>(t) * V;
  float best = -FLT_MAX;
  int bi = 0x7fffffff;
  for (int i = threadIdx.x; i < V; i += blockDim.x)
    if (l[i] > best) best = l[i], bi = i;  // per thread, i ascends: first max kept
  __shared__ float sv[1024];
  __shared__ int si[1024];
  sv[threadIdx.x] = best;
  si[threadIdx.x] = bi;
  __syncthreads();
  for (int o = blockDim.x / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) {
      float v2 = sv[threadIdx.x + o];
      int i2 = si[threadIdx.x + o];
      if (v2 > sv[threadIdx.x] || (v2 == sv[threadIdx.x] && i2 < si[threadIdx.x]))
        sv[threadIdx.x] = v2, si[threadIdx.x] = i2;
    }
    __syncthreads();
  }
  if (threadIdx.x < tp * 2) table[static_cast<int64_t>(t) * tp * 2 + threadIdx.x] = 0.f;
  __syncthreads();
  if (threadIdx.x == 0) {
    table[(static_cast<int64_t>(t) * tp + rank) * 2] = sv[0];
    table[(static_cast<int64_t>(t) * tp + rank) * 2 + 1] = static_cast<float>(vocabBegin + si[0]);
  }
}

__global__ void pickArgmaxKernel(const float* table, int n, int tp, int32_t* tokens) {
  pdlLaunch();
  pdlWait();
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= n) return;
  int br = 0;
  for (int r = 1; r < tp; ++r)
    if (table[(t * tp + r) * 2] > table[(t * tp + br) * 2]) br = r;
  tokens[t] = static_cast<int32_t>(table[(t * tp + br) * 2 + 1]);
}

}  // namespace

void localArgmax(const float* logits, int n, int V, int vocabBegin, int tp, int rank, float* table, cudaStream_t s) {
  launch(localArgmaxKernel, n, 1024, s, logits, V, vocabBegin, tp, rank, table);
}

void pickArgmax(const float* table, int n, int tp, int32_t* tokens, cudaStream_t s) {
  launch(pickArgmaxKernel, (n + 127) / 128, 128, s, table, n, tp, tokens);
}

}  // namespace gpu
}  // namespace qwen
