// p2p_verify_kernels.cu: the few kernels of the P2P data check and micro-measure. Not a
// collective: plain stores through a peer mapping (a pattern no stale or zero-filled buffer can
// match: every word odd, the poison even), a local check on the owner, a bandwidth store loop,
// and a one-thread flag ping-pong (volatile stores + __threadfence_system, every spin bounded
// by clock64 so a lost flag ends the kernel with an error instead of a hang).
#include <cuda_runtime.h>

#include <cstdint>

namespace tpcomm {
namespace {

__host__ __device__ inline uint32_t patternWord(uint32_t seed, uint32_t i) {
  uint32_t x = i * 0x9E3779B9u ^ seed;
  x ^= x >> 16;
  x *= 0x85EBCA6Bu;
  x ^= x >> 13;
  x *= 0xC2B2AE35u;
  x ^= x >> 16;
  return x | 1u;  // odd: never equal to the even poison 0xA4A4A4A4
}

__global__ void writePatternKernel(uint32_t* dst, uint32_t n, uint32_t seed) {
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    dst[i] = patternWord(seed, i);
}

// result[0]: mismatching words; result[1]: first bad index (init UINT32_MAX).
__global__ void checkPatternKernel(const uint32_t* buf, uint32_t n, uint32_t seed, uint32_t* result) {
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    if (buf[i] != patternWord(seed, i)) {
      atomicAdd(&result[0], 1u);
      atomicMin(&result[1], i);
    }
}

__global__ void storeBandwidthKernel(uint4* dst, size_t n16, uint32_t v) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n16;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    dst[i] = make_uint4(v, v + 1, v + 2, static_cast<uint32_t>(i));
}

// Pinger (on a): for i = 1..iters: store i to the peer's flag, wait for i in the local flag.
// Ponger (on b): wait for i locally, echo it to a. error[0] = 1 on a timed-out spin.
__global__ void pingPongKernel(volatile uint32_t* remote, volatile uint32_t* local, uint32_t iters, bool pinger,
                               long long timeoutCycles, uint32_t* error) {
  for (uint32_t i = 1; i <= iters; ++i) {
    if (pinger) {
      *remote = i;
      __threadfence_system();
    }
    long long start = clock64();
    while (*local != i) {
      if (clock64() - start > timeoutCycles) {
        *error = 1;
        return;
      }
    }
    if (!pinger) {
      *remote = i;
      __threadfence_system();
    }
  }
}

}  // namespace

uint32_t p2pPatternWord(uint32_t seed, uint32_t i) { return patternWord(seed, i); }

cudaError_t launchWritePattern(uint32_t* dst, uint32_t n, uint32_t seed) {
  writePatternKernel<<<64, 256>>>(dst, n, seed);
  return cudaGetLastError();
}

cudaError_t launchCheckPattern(const uint32_t* buf, uint32_t n, uint32_t seed, uint32_t* result) {
  checkPatternKernel<<<64, 256>>>(buf, n, seed, result);
  return cudaGetLastError();
}

cudaError_t launchStoreBandwidth(void* dst, size_t bytes, uint32_t v, cudaStream_t s) {
  storeBandwidthKernel<<<264, 512, 0, s>>>(static_cast<uint4*>(dst), bytes / 16, v);
  return cudaGetLastError();
}

cudaError_t launchPingPong(uint32_t* remote, uint32_t* local, uint32_t iters, bool pinger, long long timeoutCycles,
                           uint32_t* error, cudaStream_t s) {
  pingPongKernel<<<1, 1, 0, s>>>(remote, local, iters, pinger, timeoutCycles, error);
  return cudaGetLastError();
}

}  // namespace tpcomm
