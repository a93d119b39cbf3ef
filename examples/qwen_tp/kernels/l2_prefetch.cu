// l2_prefetch.cu: the weights of the decode step's next product pulled into L2 while the kernels
// between two products (norms, RoPE, attention, SwiGLU) leave device memory idle.
//
// Who writes what: nothing; each thread asks for its share of [p, p + bytes) with
// cp.async.bulk.prefetch.L2 (a fire-and-forget request to the copy engine of its SM: no
// completion to wait for, no register or shared memory written). The weights are constant for
// the model's life, so the requests need no ordering against any other kernel, and a line that
// is evicted before the product reads it costs only the bandwidth it took.
#include <algorithm>
#include <cstdint>

#include "kernels/l2_prefetch.cuh"

namespace qwen {
namespace gpu {
namespace {

constexpr int kThreads = 32;

// Thread i of the grid prefetches [i * chunk, (i + 1) * chunk) of the region (the last one less).
__global__ void prefetchL2Kernel(const char* p, size_t bytes, size_t chunk) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t begin = i * chunk;
  if (begin >= bytes) return;
  const size_t len = std::min(chunk, bytes - begin);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  for (size_t off = 0; off < len; off += 1u << 20) {  // the size operand is 32-bit: 1 MB requests
    const uint32_t n = static_cast<uint32_t>(std::min<size_t>(len - off, 1u << 20));
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + begin + off), "r"(n) : "memory");
  }
#else
  for (size_t off = 0; off < len; off += 128) asm volatile("prefetch.global.L2 [%0];" ::"l"(p + begin + off));
#endif
}

int smCount() {
  static const int sms = [] {
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n < 1)
      return 1;
    return n;
  }();
  return sms;
}

}  // namespace

bool prepareL2Prefetch() {
  cudaFuncAttributes a;
  return cudaFuncGetAttributes(&a, prefetchL2Kernel) == cudaSuccess;
}

bool prefetchL2(const void* p, size_t bytes, cudaStream_t s) {
  bytes &= ~size_t(15);
  if (!p || bytes == 0 || reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  // Spread over every SM (one SM's copy engine cannot request lines at the memory's rate), each
  // thread's share a multiple of 16 bytes.
  const int blocks = smCount();
  const size_t threads = static_cast<size_t>(blocks) * kThreads;
  const size_t chunk = ((bytes + threads - 1) / threads + 15) & ~size_t(15);
  prefetchL2Kernel<<<blocks, kThreads, 0, s>>>(static_cast<const char*>(p), bytes, chunk);
  return cudaPeekAtLastError() == cudaSuccess;
}

}  // namespace gpu
}  // namespace qwen
