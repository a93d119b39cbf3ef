// Device helpers shared by every kernel: 16-byte packs reduced in fp32, system-scope
// release/acquire flags, and bounded waits that report a timeout through the communicator's
// error word instead of spinning forever.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "tpcomm/status.h"

namespace tpcomm {
namespace dev {

constexpr int kPackBytes = 16;
using Pack = uint4;

template <typename T>
struct Elem;
template <>
struct Elem<float> {
  __device__ static float toFloat(float v) { return v; }
  __device__ static float fromFloat(float v) { return v; }
};
template <>
struct Elem<__half> {
  __device__ static float toFloat(__half v) { return __half2float(v); }
  __device__ static __half fromFloat(float v) { return __float2half_rn(v); }
};
template <>
struct Elem<__nv_bfloat16> {
  __device__ static float toFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 fromFloat(float v) { return __float2bfloat16_rn(v); }
};

// Op: 0 sum, 1 max, 2 min (ReduceOp's values). fmaxf/fminf match the host's std::fmax/fmin.
template <int Op>
__device__ __forceinline__ float combine(float a, float b) {
  if (Op == 0) return a + b;
  if (Op == 1) return fmaxf(a, b);
  return fminf(a, b);
}

template <typename T>
struct PackOf {
  static constexpr int kElems = kPackBytes / sizeof(T);
  __device__ static void toFloats(const Pack& p, float (&f)[kElems]) {
    const T* e = reinterpret_cast<const T*>(&p);
#pragma unroll
    for (int i = 0; i < kElems; ++i) f[i] = Elem<T>::toFloat(e[i]);
  }
  __device__ static Pack fromFloats(const float (&f)[kElems]) {
    Pack p;
    T* e = reinterpret_cast<T*>(&p);
#pragma unroll
    for (int i = 0; i < kElems; ++i) e[i] = Elem<T>::fromFloat(f[i]);
    return p;
  }
  // A reduction's operand: -0.0 reads as +0.0 (kZeroRule, host_reduce.cc): a zero result is +0.0
  // on every algorithm and rank, whatever the order or the op.
  __device__ static void toFloatsForReduce(const Pack& p, float (&f)[kElems]) {
    toFloats(p, f);
#pragma unroll
    for (int i = 0; i < kElems; ++i) f[i] = __fadd_rn(f[i], 0.0f);
  }
  // acc = acc op v, elementwise in fp32.
  template <int Op>
  __device__ static void accumulate(float (&acc)[kElems], const Pack& v) {
    float f[kElems];
    toFloatsForReduce(v, f);
#pragma unroll
    for (int i = 0; i < kElems; ++i) acc[i] = combine<Op>(acc[i], f[i]);
  }
};

__device__ __forceinline__ uint64_t globalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Flag load with acquire semantics at system scope: data written before the matching release
// store (by a peer GPU or the host) is visible after it.
__device__ __forceinline__ uint64_t loadAcquireSys(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void storeReleaseSys(uint64_t* p, uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ uint32_t loadVolatile(const uint32_t* p) {
  return *reinterpret_cast<const volatile uint32_t*>(p);
}

// One element read past every cache level that may hold a stale copy (ld.global.cv): for data
// another GPU or the host rewrites while this kernel runs.
template <typename T>
__device__ __forceinline__ T loadUncached(const T* p) {
  static_assert(sizeof(T) == 2 || sizeof(T) == 4, "2- or 4-byte elements");
  T out;
  if constexpr (sizeof(T) == 4) {
    unsigned int u = __ldcv(reinterpret_cast<const unsigned int*>(p));
    memcpy(&out, &u, 4);
  } else {
    unsigned short u = __ldcv(reinterpret_cast<const unsigned short*>(p));
    memcpy(&out, &u, 2);
  }
  return out;
}

// Reports a timeout waiting for `peer` (first error wins).
__device__ __forceinline__ void reportTimeout(uint32_t* errorWord, int peer) {
  uint32_t code = static_cast<uint32_t>(Status::kTimeout) | (static_cast<uint32_t>(peer + 1) << 16);
  atomicCAS_system(errorWord, 0u, code);
}

// The one bounded spin: until *flag >= target (acquire, system scope). Every 1024 polls, false
// when stop() says the call has already failed, or, past the deadline, after expire() reported
// the timeout. One thread per flag (several threads may wait on different flags).
template <typename Stop, typename Expire>
__device__ __forceinline__ bool spinFlagAtLeast(const uint64_t* flag, uint64_t target, uint64_t deadlineNs, Stop stop,
                                                Expire expire) {
  for (uint32_t spin = 0; loadAcquireSys(flag) < target; ++spin) {
    if ((spin & 1023u) == 1023u) {
      if (stop()) return false;
      if (globalTimerNs() > deadlineNs) {
        expire();
        return false;
      }
    }
  }
  return true;
}

// Spins until *flag >= target. false on timeout (reported) or when another block already
// reported an error.
__device__ __forceinline__ bool waitFlagAtLeast(const uint64_t* flag, uint64_t target, uint64_t deadlineNs,
                                                uint32_t* errorWord, int peer) {
  return spinFlagAtLeast(
      flag, target, deadlineNs, [&] { return loadVolatile(errorWord) != 0; }, [&] { reportTimeout(errorWord, peer); });
}

// Makes this block's earlier global writes visible system-wide before thread 0's next store.
__device__ __forceinline__ void blockReleaseFence() {
  __threadfence_system();
  __syncthreads();
}

}  // namespace dev
}  // namespace tpcomm
