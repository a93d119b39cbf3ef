// hostmem_bench: how fast SMs read and write pinned host memory, the medium of staged_host (GPU
// ranks without P2P: publishers store into their host slot, reducers read their peers' slots with
// ld.global.cv). staged_host and staged_host+int8/fp8 reach 35-55% of the copy engines' rate
// (docs/compression.md); this says whether SM loads of host memory can reach it at all, and with
// how many 16-byte loads in flight per thread (U) and how many 512-thread blocks.
// Rows (GB/s of payload, median of --reps launches, CUDA events):
//   ce d2h / ce h2d     cudaMemcpyAsync device <-> pinned host: the copy engines' reference
//   sm read  B U        B blocks read the host buffer with ld.global.cv, U loads issued before use
//   sm write B          B blocks store device data into the host buffer (posted writes)
//   sm read+write B U   B blocks read one host buffer while B others write another (staged_host's
//                       mix: both PCIe directions at once)
// Every read's sum is checked against the host's, so a load the compiler drops shows as an error.
// Not a test: run by hand, build/tests/gpu/hostmem_bench [--count BYTES] [--reps N]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CHECK_CUDA(call)                                                                          \
  do {                                                                                            \
    cudaError_t e_ = (call);                                                                      \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "hostmem_bench: %s: %s (%s:%d)\n", #call, cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)

namespace {

constexpr int kThreads = 512;

// Blocks [0, readers) read `src` (host) in 16-byte loads, U in flight per thread, and add the
// low words into sums[block]; blocks [readers, readers + writers) copy `dev` into `dst` (host).
template <int U>
__global__ void __launch_bounds__(kThreads) hostmemKernel(const uint4* src, size_t n16, unsigned long long* sums,
                                                          int readers, const uint4* dev, uint4* dst, size_t w16) {
  if (blockIdx.x < static_cast<unsigned>(readers)) {
    const size_t stride = static_cast<size_t>(readers) * kThreads;
    unsigned long long acc = 0;
    size_t i = blockIdx.x * static_cast<size_t>(kThreads) + threadIdx.x;
    for (; i + (U - 1) * stride < n16; i += U * stride) {
      uint4 v[U];
#pragma unroll
      for (int u = 0; u < U; ++u) v[u] = __ldcv(src + i + u * stride);  // all U issued before any use
#pragma unroll
      for (int u = 0; u < U; ++u) acc += 0ull + v[u].x + v[u].y + v[u].z + v[u].w;
    }
    for (; i < n16; i += stride) {
      const uint4 v = __ldcv(src + i);
      acc += 0ull + v.x + v.y + v.z + v.w;
    }
    atomicAdd(sums + blockIdx.x, acc);
  } else {
    const int b = blockIdx.x - readers, writers = gridDim.x - readers;
    const size_t stride = static_cast<size_t>(writers) * kThreads;
    for (size_t i = b * static_cast<size_t>(kThreads) + threadIdx.x; i < w16; i += stride) dst[i] = dev[i];
  }
}

using KernelFn = void (*)(const uint4*, size_t, unsigned long long*, int, const uint4*, uint4*, size_t);
KernelFn kernelFor(int u) {
  switch (u) {
    case 1: return hostmemKernel<1>;
    case 2: return hostmemKernel<2>;
    case 4: return hostmemKernel<4>;
    default: return hostmemKernel<8>;
  }
}

template <typename Fn>
float medianMs(int reps, cudaStream_t s, Fn fn) {
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  fn();  // warm
  CHECK_CUDA(cudaStreamSynchronize(s));
  std::vector<float> t;
  for (int r = 0; r < reps; ++r) {
    CHECK_CUDA(cudaEventRecord(a, s));
    fn();
    CHECK_CUDA(cudaEventRecord(b, s));
    CHECK_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  CHECK_CUDA(cudaEventDestroy(a));
  CHECK_CUDA(cudaEventDestroy(b));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  size_t bytes = 64u << 20;
  int reps = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--count")) bytes = std::strtoull(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: hostmem_bench [--count BYTES] [--reps N]\n");
      return 2;
    }
  }
  bytes = bytes / 16 * 16;
  if (bytes == 0 || reps < 1) {
    std::fprintf(stderr, "hostmem_bench: --count must be >= 16 bytes and --reps >= 1\n");
    return 2;
  }
  const size_t n16 = bytes / 16;
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  uint4 *hostA, *hostB, *devA;
  unsigned long long* sums;
  CHECK_CUDA(cudaHostAlloc(&hostA, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
  CHECK_CUDA(cudaHostAlloc(&hostB, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
  CHECK_CUDA(cudaMalloc(&devA, bytes));
  CHECK_CUDA(cudaMalloc(&sums, 1024 * sizeof(unsigned long long)));
  const uint32_t* words = reinterpret_cast<const uint32_t*>(hostA);
  for (size_t i = 0; i < n16 * 4; ++i) const_cast<uint32_t*>(words)[i] = static_cast<uint32_t>(i * 2654435761u);
  unsigned long long want = 0;
  for (size_t i = 0; i < n16 * 4; ++i) want += words[i];
  CHECK_CUDA(cudaMemset(devA, 1, bytes));
  uint4 *srcA, *dstB;
  CHECK_CUDA(cudaHostGetDevicePointer(reinterpret_cast<void**>(&srcA), hostA, 0));
  CHECK_CUDA(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dstB), hostB, 0));
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (int u : {1, 2, 4, 8}) CHECK_CUDA(cudaFuncSetAttribute(kernelFor(u), cudaFuncAttributePreferredSharedMemoryCarveout, 0));

  std::printf("# hostmem_bench: %s, %zu bytes, median of %d launches (CUDA events), %d threads per block\n", prop.name,
              bytes, reps, kThreads);
  std::printf("# %-22s %10s %10s\n", "row", "ms", "GB/s");
  auto row = [&](const char* name, float ms, double payload) {
    std::printf("  %-22s %10.3f %10.1f\n", name, ms, payload / (ms * 1e-3) / 1e9);
  };
  row("ce d2h", medianMs(reps, s, [&] { CHECK_CUDA(cudaMemcpyAsync(hostB, devA, bytes, cudaMemcpyDeviceToHost, s)); }),
      bytes);
  row("ce h2d", medianMs(reps, s, [&] { CHECK_CUDA(cudaMemcpyAsync(devA, hostA, bytes, cudaMemcpyHostToDevice, s)); }),
      bytes);
  int bad = 0;
  char name[64];
  for (int blocks : {8, 16, 32, 64}) {
    for (int u : {1, 2, 4, 8}) {
      const float ms = medianMs(reps, s, [&] { kernelFor(u)<<<blocks, kThreads, 0, s>>>(srcA, n16, sums, blocks, devA, dstB, 0); });
      CHECK_CUDA(cudaGetLastError());
      // The check: one more launch from zeroed sums, its total against the host's.
      CHECK_CUDA(cudaMemsetAsync(sums, 0, 1024 * sizeof(unsigned long long), s));
      kernelFor(u)<<<blocks, kThreads, 0, s>>>(srcA, n16, sums, blocks, devA, dstB, 0);
      std::vector<unsigned long long> got(blocks);
      CHECK_CUDA(cudaMemcpyAsync(got.data(), sums, blocks * sizeof(unsigned long long), cudaMemcpyDeviceToHost, s));
      CHECK_CUDA(cudaStreamSynchronize(s));
      unsigned long long total = 0;
      for (unsigned long long g : got) total += g;
      if (total != want) ++bad;
      std::snprintf(name, sizeof(name), "sm read %d U%d%s", blocks, u, total != want ? " WRONG" : "");
      row(name, ms, bytes);
    }
    std::snprintf(name, sizeof(name), "sm write %d", blocks);
    row(name, medianMs(reps, s, [&] { kernelFor(1)<<<blocks, kThreads, 0, s>>>(srcA, 0, sums, 0, devA, dstB, n16); }), bytes);
    for (int u : {1, 4}) {
      std::snprintf(name, sizeof(name), "sm read+write %d U%d", blocks, u);
      row(name,
          medianMs(reps, s, [&] { kernelFor(u)<<<2 * blocks, kThreads, 0, s>>>(srcA, n16, sums, blocks, devA, dstB, n16); }),
          2.0 * bytes);
    }
  }
  CHECK_CUDA(cudaStreamSynchronize(s));
  std::printf("# %s\n", bad ? "FAILED: a read's sum differs from the host's" : "all read sums match the host's");
  return bad ? 1 : 0;
}
