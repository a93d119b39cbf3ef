// twoshot_multicast.cu: all-reduce as reduce-scatter then all-gather, both done by the
// NVSwitch (NCCL's NVLS RSxLD_AGxST: the reduce-scatter is a multimem.ld_reduce, the all-gather
// a multimem.st; TensorRT-LLM's MultiShot). UNTESTED ON HARDWARE: compiled for sm_90+, never
// run (multicast is off on every machine this project has; see docs/multicast.md).
//
// Per chunk of dataBytes (the message loops over chunks), cut into n slices of whole 16-byte
// packs (slice j owned by rank j) and each slice into one part per block:
//   Copy in:  block b copies part b of every slice of its input into its own buffer (UC view),
//             zero-padding the last pack.                                    Barrier (round 2e+1).
//   Reduce:   block b of rank r, for part b of slice r: v = multimem.ld_reduce(MC + k) (the
//             switch reads pack k from every rank's buffer and reduces: fp32 accumulation for
//             16-bit types via .acc::f32), then multimem.st(MC + k, v) writes v into every
//             rank's buffer. Every rank gets the same bits: each pack is reduced once.
//                                                                            Barrier (round 2e+2).
//   Copy out: block b copies part b of every slice from its buffer to its output.
// Barrier: per block, a u64 counter in every rank's buffer; arriving is one
// multimem.red.release.sys.add(1) through the MC view (it increments every rank's copy), then
// an acquire spin on the own copy until it reaches n x round, bounded by TPCOMM_TIMEOUT_MS
// (timeout: the error word, peer unknown). Before arriving and after passing, fence.proxy.alias
// orders the block's UC-view accesses with MC-view accesses to the same memory (virtual
// aliases), and __threadfence_system + __syncthreads publish every thread's writes.
// Buffer reuse: a rank copies chunk c+1 into its buffer only after the second barrier of chunk
// c, when every rank has finished reading (ld_reduce) and writing (st) it. Rounds per block
// live in the buffer's epoch slots, so CUDA-graph replays continue the sequence.
#include <cuda_runtime.h>

#include <atomic>
#include <type_traits>

#include "algos/common/device_common.cuh"
#include "algos/common/launch.cuh"
#include "algos/multicast/chunk_split.h"
#include "algos/multicast/twoshot_multicast.h"

namespace tpcomm {
namespace {

using dev::Pack;
using dev::PackOf;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define TPCOMM_MULTIMEM_OK 1

// multimem.ld_reduce of the 16-byte pack at multicast address `a`, for (T, Op).
template <typename T, int Op>
__device__ __forceinline__ Pack multimemLoadReduce(const void* a);

template <>
__device__ __forceinline__ Pack multimemLoadReduce<float, 0>(const void* a) {
  float x, y, z, w;
  asm volatile("multimem.ld_reduce.relaxed.sys.global.add.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(x), "=f"(y), "=f"(z), "=f"(w)
               : "l"(a)
               : "memory");
  return make_uint4(__float_as_uint(x), __float_as_uint(y), __float_as_uint(z), __float_as_uint(w));
}

#define TPCOMM_MULTIMEM_HALF(T, OP, INSTR)                                                                           \
  template <>                                                                                                        \
  __device__ __forceinline__ Pack multimemLoadReduce<T, OP>(const void* a) {                                         \
    Pack v;                                                                                                          \
    asm volatile(INSTR " {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(a) : "memory"); \
    return v;                                                                                                        \
  }
TPCOMM_MULTIMEM_HALF(__half, 0, "multimem.ld_reduce.relaxed.sys.global.add.acc::f32.v4.f16x2")
TPCOMM_MULTIMEM_HALF(__half, 1, "multimem.ld_reduce.relaxed.sys.global.max.v4.f16x2")
TPCOMM_MULTIMEM_HALF(__half, 2, "multimem.ld_reduce.relaxed.sys.global.min.v4.f16x2")
TPCOMM_MULTIMEM_HALF(__nv_bfloat16, 0, "multimem.ld_reduce.relaxed.sys.global.add.acc::f32.v4.bf16x2")
TPCOMM_MULTIMEM_HALF(__nv_bfloat16, 1, "multimem.ld_reduce.relaxed.sys.global.max.v4.bf16x2")
TPCOMM_MULTIMEM_HALF(__nv_bfloat16, 2, "multimem.ld_reduce.relaxed.sys.global.min.v4.bf16x2")
#undef TPCOMM_MULTIMEM_HALF

// multimem.st of a 16-byte pack to every rank's copy of multicast address `a` (bits as is).
__device__ __forceinline__ void multimemStore(void* a, const Pack& v) {
  asm volatile("multimem.st.relaxed.sys.global.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(a), "f"(__uint_as_float(v.x)),
               "f"(__uint_as_float(v.y)), "f"(__uint_as_float(v.z)), "f"(__uint_as_float(v.w))
               : "memory");
}

__device__ __forceinline__ void fenceProxyAlias() { asm volatile("fence.proxy.alias;" ::: "memory"); }

// Block barrier with block blockIdx.x of every rank (see the opening comment). false on timeout.
__device__ __forceinline__ bool multicastBarrier(uint64_t* counterMc, const uint64_t* counterUc, uint64_t target,
                                                 uint64_t deadline, uint32_t* errorWord) {
  __shared__ int failed;
  fenceProxyAlias();
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x == 0) {
    failed = 0;
    asm volatile("multimem.red.release.sys.global.add.u64 [%0], %1;" ::"l"(counterMc), "l"(1ull) : "memory");
    if (!dev::waitFlagAtLeast(counterUc, target, deadline, errorWord, -1)) failed = 1;
  }
  __syncthreads();
  fenceProxyAlias();
  return failed == 0;
}
#endif  // sm_90+

template <typename T, int Op>
__global__ void __launch_bounds__(kThreads) twoshotMulticastKernel(MulticastLaunch p) {
#ifdef TPCOMM_MULTIMEM_OK
  constexpr int kEpp = PackOf<T>::kElems;
  const uint64_t deadline = dev::globalTimerNs() + p.timeoutNs;
  const int me = p.rank, n = p.nRanks, b = blockIdx.x, nb = gridDim.x;
  const MulticastLayout& L = p.layout;
  uint64_t* roundPtr = reinterpret_cast<uint64_t*>(p.uc + L.epochOffset(b));
  const uint64_t* counterUc = reinterpret_cast<const uint64_t*>(p.uc + L.counterOffset(b));
  uint64_t* counterMc = reinterpret_cast<uint64_t*>(p.mc + L.counterOffset(b));
  uint64_t round = *roundPtr;
  const T* src = static_cast<const T*>(p.send);
  T* dst = static_cast<T*>(p.recv);
  T* buf = reinterpret_cast<T*>(p.uc + L.dataOffset);
  char* bufMc = p.mc + L.dataOffset;
  const size_t chunkElems = L.dataBytes / sizeof(T);
  const bool vec = (reinterpret_cast<uintptr_t>(src) % 16) == 0 && (reinterpret_cast<uintptr_t>(dst) % 16) == 0;
  const T zero = dev::Elem<T>::fromFloat(0.0f);

  for (size_t c0 = 0; c0 < p.count; c0 += chunkElems) {
    const size_t len = p.count - c0 < chunkElems ? p.count - c0 : chunkElems;
    const size_t packs = (len + kEpp - 1) / kEpp;
    // Packs [lo, hi) of the chunk that block b handles for slice j (chunk_split.h: the full
    // chunk's split, clipped, so a shorter last chunk stays inside what b owned before).
    const size_t fullPacks = chunkElems / kEpp;
    auto part = [&](int j, size_t* lo, size_t* hi) { chunkPart(fullPacks, packs, n, j, nb, b, lo, hi); };
    // fn(e0) for the first element of each pack block b handles, in every slice (copy in, out).
    auto forEveryPart = [&](auto fn) {
      for (int j = 0; j < n; ++j) {
        size_t lo, hi;
        part(j, &lo, &hi);
        for (size_t k = lo + threadIdx.x; k < hi; k += blockDim.x) fn(k * kEpp);
      }
    };

    forEveryPart([&](size_t e0) {
      if (vec && e0 + kEpp <= len) {
        *reinterpret_cast<Pack*>(buf + e0) = *reinterpret_cast<const Pack*>(src + c0 + e0);
      } else {
#pragma unroll
        for (int i = 0; i < kEpp; ++i) buf[e0 + i] = e0 + i < len ? src[c0 + e0 + i] : zero;
      }
    });
    if (!multicastBarrier(counterMc, counterUc, (round + 1) * n, deadline, p.errorWord)) return;
    ++round;

    {
      size_t lo, hi;
      part(me, &lo, &hi);
      for (size_t k = lo + threadIdx.x; k < hi; k += blockDim.x) {
        char* at = bufMc + k * dev::kPackBytes;
        multimemStore(at, multimemLoadReduce<T, Op>(at));
      }
    }
    if (!multicastBarrier(counterMc, counterUc, (round + 1) * n, deadline, p.errorWord)) return;
    ++round;

    forEveryPart([&](size_t e0) {
      if (vec && e0 + kEpp <= len) {
        *reinterpret_cast<Pack*>(dst + c0 + e0) = __ldcg(reinterpret_cast<const Pack*>(buf + e0));
      } else {
        for (int i = 0; i < kEpp && e0 + i < len; ++i) dst[c0 + e0 + i] = dev::loadUncached(buf + e0 + i);
      }
    });
    __syncthreads();  // the next chunk's copy-in rewrites what other threads just read
  }
  if (threadIdx.x == 0) *roundPtr = round;
#else
  // Built for an architecture without multimem: the host never launches this (the transport
  // needs sm_90); report instead of doing anything.
  if (blockIdx.x == 0 && threadIdx.x == 0)
    atomicCAS_system(p.errorWord, 0u, static_cast<uint32_t>(Status::kNotSupported));
#endif
}

template <typename T, int Op>
Status launchTyped(const MulticastLaunch& p, cudaStream_t stream) {
  // The image loaded for this GPU must have the multimem body (binaryVersion = SASS arch x 10).
  // Cached per instantiation (threads of a createGroup may race to fill it: atomic).
  static std::atomic<int> cachedVersion{0};
  int binaryVersion = cachedVersion.load(std::memory_order_relaxed);
  if (binaryVersion == 0) {
    cudaFuncAttributes fa{};
    TPCOMM_TRY(dev::toStatus(cudaFuncGetAttributes(&fa, twoshotMulticastKernel<T, Op>), "twoshot_multicast launch"));
    binaryVersion = fa.binaryVersion;
    cachedVersion.store(binaryVersion, std::memory_order_relaxed);
  }
  if (binaryVersion < 90) return TPCOMM_ERROR(kNotSupported, "twoshot_multicast: needs sm_90 or newer (multimem)");
  return dev::launch("twoshot_multicast launch", twoshotMulticastKernel<T, Op>,
                     LaunchShape{static_cast<unsigned>(p.blocks)}, stream, p);
}

// f(TypeTag<T>, IntTag<Op>) for the call's dtype and op among those multimem reduces (f32: sum
// only; multicastReducible), so no other instantiation exists.
template <typename F>
auto byReducible(int dtype, int op, F f) {
  return dev::byType(dtype, [&](auto t) {
    if constexpr (std::is_same<typename decltype(t)::type, float>::value)
      return f(t, dev::IntTag<0>{});
    else
      return dev::byOp(op, [&](auto o) { return f(t, o); });
  });
}

}  // namespace

Status preloadTwoshotMulticast() {
  // The instantiations launchTwoshotMulticast can launch. launchTyped's own
  // cudaFuncGetAttributes comes at the first launch (too late) and once per process, not per device.
  cudaError_t e = cudaSuccess;
  for (int v = 0; v < 9 && e == cudaSuccess; ++v)  // f32 sum (once per op slot), f16 and bf16 x 3 ops
    e = byReducible(v / 3, v % 3, [](auto t, auto o) {
      return dev::preload(twoshotMulticastKernel<typename decltype(t)::type, decltype(o)::value>);
    });
  return dev::toStatus(e, "loading the twoshot_multicast kernels");
}

Status launchTwoshotMulticast(const MulticastLaunch& p, cudaStream_t stream) {
  const DataType dt = static_cast<DataType>(p.dtype);
  const ReduceOp op = static_cast<ReduceOp>(p.op);
  if (!multicastReducible(dt, op))
    return TPCOMM_ERROR(kNotSupported, "twoshot_multicast: multimem cannot reduce %s with op %d", dataTypeName(dt),
                        p.op);
  if (p.blocks < 1 || p.blocks > p.layout.maxBlocks)
    return TPCOMM_ERROR(kInternal, "twoshot_multicast: %d blocks, layout has %d", p.blocks, p.layout.maxBlocks);
  return byReducible(p.dtype, p.op, [&](auto t, auto o) {
    return launchTyped<typename decltype(t)::type, decltype(o)::value>(p, stream);
  });
}

}  // namespace tpcomm
