// gemv_stream.cu: small-n products that stream W (a decode step's weight products, the MTP
// drafts and verify calls): Y[t, o] = sum_i W[o, i] X[t, i] for t < n <= kGemvStreamMaxTokens,
// W [out, in] bf16 row-major, X [n, in] bf16, fp32 accumulation, Y [n, out] bf16 or fp32.
//
// Why another GEMV: docs/decode_kernels.md, "The GEMVs": cuBLAS streams the qwen3-8b step's
// weights at ~3.65 TB/s over the step (4.1 on gate/up alone; the small products lose their ramp
// and tail), gemvBf16 at 2.4-3.3 TB/s (bursts of 4 KB a warp between MMAs, partial waves). This
// kernel is the plainest stream: a warp owns whole rows (rows g, g + G, g + 2G, ... for global
// warp g of G), reads a row in chunks of kStreamLoads 16-byte loads a lane (4 KB a warp) all in
// flight before their FMAs. The grid is at most kStreamBlocksPerSm blocks a multiprocessor of 16
// warps (up to 128 KB of W a multiprocessor in flight against the ~33 KB Little's law asks at
// ~4.4 TB/s and ~1 us), and no more warps than give every warp the same number of rows: a
// product of 5120 rows runs 2560 warps of 2 rows, not 4224 warps of which 896 take a second row
// alone. X is staged in shared memory once a block when n * in * 2 bytes fit kStreamSharedX, else
// read through L1 (the same values, so the same bits). No tensor cores: a token is 2 FLOP a weight
// and, at n = 1, about 25 instructions a 16-byte load (a fifth of the issue rate at 4.4 TB/s);
// each token more adds ~17 (unpacking x and 8 FMAs), so n = 4 runs ~1.5x and n = 8 ~3x n = 1's
// time (gemv_bench): GpuModel sends it one-token calls only.
//
// PDL: the kernel lets its dependents launch at once, but is itself launched without PDL by
// default (setGemvStreamPdl): PDL-launched behind a kernel that triggers early, its blocks (a
// full grid: every slot of 2 blocks a multiprocessor) start while that kernel's blocks and the
// next kernel's waiting blocks still hold slots, so part of the grid waits for a whole block
// lifetime (the product's) for a slot. Measured on one H200 (qwen3-8b step at 512): 4.98 ms
// PDL-launched, 4.57 ms with PDL off everywhere, 4.78 ms for cuBLAS's products. Each warp's first
// chunk of W (constant: no kernel writes it) is loaded before the wait, which overlaps the
// previous kernel's tail only when PDL-launched.
//
// Order of the sums: for each token, lane l accumulates its elements chunk by chunk, 8 bf16 of a
// load in order, then a warp butterfly: a function of `in` only. So Y[t, o] is the same bits
// whatever the grid, n, the other tokens of the call, the device or the run: a verify call of
// N + 1 tokens reproduces N + 1 one-token steps (speculative == greedy). Needs in % 8 == 0 and
// 16-byte aligned W and X (gemvStreamSupported). A launch reads W, X and writes Y only; nothing
// waits on another block, so there is no cross-block protocol to bound.
#include <algorithm>
#include <cfloat>
#include <cstdint>

#include <cooperative_groups.h>

#include "kernels/common.cuh"
#include "kernels/gemv.cuh"
#include "kernels/norm_rows.cuh"
#include "kernels/stream_grid.h"

namespace qwen {
namespace gpu {
namespace {

constexpr int kStreamLoads = 8;  // 16-byte loads a lane in flight (kStreamWarps: stream_grid.h)
constexpr int kStreamSharedX = 96 * 1024;  // two blocks a multiprocessor still fit

__device__ __forceinline__ float dot8(uint4 w, uint4 x, float acc) {
  const uint32_t* ws = &w.x;
  const uint32_t* xs = &x.x;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    acc = __fmaf_rn(__uint_as_float(ws[j] << 16), __uint_as_float(xs[j] << 16), acc);
    acc = __fmaf_rn(__uint_as_float(ws[j] & 0xffff0000u), __uint_as_float(xs[j] & 0xffff0000u), acc);
  }
  return acc;
}

// One row of W against the call's n tokens: lane l's elements chunk by chunk, then the warp
// butterfly (every lane gets the sums). w holds the row's first chunk already when `loaded`.
// X: shared memory (kSharedX) or global through L1.
template <int kTok, bool kSharedX>
__device__ __forceinline__ void dotRow(const uint4* __restrict__ row, int vecs, int lane, const uint4* __restrict__ xg,
                                       int n, bool loaded, uint4 (&w)[kStreamLoads], float (&acc)[kTok]) {
  extern __shared__ uint4 xs[];
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
  for (int t = 0; t < kTok; ++t) acc[t] = 0.f;
  for (int base = 0; base < vecs; base += kStreamLoads * 32) {
    if (!loaded || base != 0) {
#pragma unroll
      for (int j = 0; j < kStreamLoads; ++j) {
        const int v = base + j * 32 + lane;
        w[j] = v < vecs ? __ldcs(row + v) : zero;
      }
    }
#pragma unroll
    for (int j = 0; j < kStreamLoads; ++j) {
      const int v = base + j * 32 + lane;
      if (v < vecs) {
#pragma unroll
        for (int t = 0; t < kTok; ++t)
          if (t < n) acc[t] = dot8(w[j], kSharedX ? xs[t * vecs + v] : __ldg(xg + t * vecs + v), acc[t]);
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kTok; ++t) acc[t] = warpSum(acc[t]);
}

// What a launch does around the products (the fused decode step's forms, GpuModel's
// enqueueLayerFused under streamGemv):
//  kPlain: Y [n, out] = bf16 or fp32 of the sums.
//  kNorm: n = 1; X is the residual row, and the products take hn = bf16((x * inv) * normW) with
//   addRmsNorm's arithmetic in its order (a block of 512 threads = kNormThreads: thread t sums
//   x[t], x[t + 512], ... with fma, then blockSum), so the bits of addRmsNorm + kPlain. Every
//   block norms the row itself (the row and normW, 16-20 KB through shared memory in one round
//   trip, once a block: the blocks live the whole product).
//  kResidual: Y is the bf16 residual R [n, out]: R = bf16(R + bf16(sum)), addRmsNorm's add; each
//   element written by the one warp that owns its row, read by no other block.
//  kNormSwiglu: kNorm's input; W = [gate; up] of 2 * out rows; item r is gate row r then up row
//   out + r, one warp; Y = act [out] = bf16(silu(g) * u) of the rounded g and u, swiglu's math.
enum StreamForm { kPlain = 0, kNorm = 1, kResidual = 2, kNormSwiglu = 3 };

// The first chunk of row `first` of W (when it exists) into w: loaded before whatever the warp
// waits for next (the PDL wait, the norm's sums, a grid barrier), since no kernel writes W.
__device__ __forceinline__ void loadFirstChunk(const __nv_bfloat16* W, int out, int in, int first, int lane,
                                               uint4 (&w)[kStreamLoads]) {
  if (first >= out) return;
  const uint4* row = reinterpret_cast<const uint4*>(W + static_cast<int64_t>(first) * in);
  const int vecs = in / 8;
#pragma unroll
  for (int j = 0; j < kStreamLoads; ++j) {
    const int v = j * 32 + lane;
    w[j] = v < vecs ? __ldcs(row + v) : make_uint4(0u, 0u, 0u, 0u);
  }
}

// hn = the RMSNorm of the row X (in elements) with normW into shared memory (the block's 512
// threads): the row and the norm weights in 16-byte loads, all in flight at once (one round
// trip, where a strided loop of 2-byte loads costs one per element), then the sums in
// addRmsNorm's order from there and hn over the row in place. Needs 2 * in * 2 bytes.
__device__ __forceinline__ void stageNormedRow(const __nv_bfloat16* __restrict__ X,
                                               const __nv_bfloat16* __restrict__ normW, int in, float eps) {
  extern __shared__ uint4 xs[];
  __nv_bfloat16* hn = reinterpret_cast<__nv_bfloat16*>(xs);
  __nv_bfloat16* nw = hn + in;
  for (int v = threadIdx.x; v < in / 8; v += blockDim.x) {
    xs[v] = __ldcg(reinterpret_cast<const uint4*>(X) + v);  // L2: streamLayer's other blocks wrote X
    reinterpret_cast<uint4*>(nw)[v] = reinterpret_cast<const uint4*>(normW)[v];
  }
  __syncthreads();
  float ss = 0.f;
  for (int i = threadIdx.x; i < in; i += kNormThreads) {
    const float v = __bfloat162float(hn[i]);
    ss = __fmaf_rn(v, v, ss);
  }
  const float inv = invRmsRn(ss, in, eps);  // blockSum: its __syncthreads order the sums
  for (int i = threadIdx.x; i < in; i += kNormThreads) hn[i] = scaleRn(__bfloat162float(hn[i]), inv, nw[i]);
  __syncthreads();
}

// The epilogues' arithmetic, one place for every kernel here: swiglu's on the rounded gate and up
// products, addRmsNorm's add of the rounded product to the residual.
__device__ __forceinline__ __nv_bfloat16 swigluOf(float gSum, float uSum) {
  const float g = __bfloat162float(__float2bfloat16_rn(gSum));
  const float u = __bfloat162float(__float2bfloat16_rn(uSum));
  return __float2bfloat16_rn(g / (1.f + __expf(-g)) * u);
}
__device__ __forceinline__ __nv_bfloat16 residualOf(__nv_bfloat16 r, float sum) {
  return __float2bfloat16_rn(__fadd_rn(__bfloat162float(r), __bfloat162float(__float2bfloat16_rn(sum))));
}

template <int kTok, bool kSharedX, bool kF32, int kForm>
__global__ void __launch_bounds__(kStreamWarps * 32, kStreamBlocksPerSm)
    gemvStreamKernel(const __nv_bfloat16* __restrict__ W, int out, int in, const __nv_bfloat16* __restrict__ X, int n,
                     void* __restrict__ Y, const __nv_bfloat16* __restrict__ normW, float eps) {
  extern __shared__ uint4 xs[];
  constexpr bool kNormed = kForm == kNorm || kForm == kNormSwiglu;
  pdlLaunch();
  const int lane = threadIdx.x & 31, vecs = in / 8;
  const int warps = gridDim.x * kStreamWarps, first = blockIdx.x * kStreamWarps + (threadIdx.x >> 5);
  const uint4* xg = reinterpret_cast<const uint4*>(X);
  uint4 w[kStreamLoads];
  loadFirstChunk(W, out, in, first, lane, w);  // before the wait (and before the norm's sums)
  pdlWait();
  if (kNormed) {
    stageNormedRow(X, normW, in, eps);
  } else if (kSharedX) {
    for (int v = threadIdx.x; v < n * vecs; v += blockDim.x) xs[v] = xg[v];
    __syncthreads();
  }
  for (int r = first; r < out; r += warps) {
    // kResidual at one token: R's value loaded before the row streams (no other block writes
    // it), so the epilogue's add waits for no round trip.
    __nv_bfloat16 r1 = __float2bfloat16_rn(0.f);
    if (kForm == kResidual && kTok == 1 && lane == 0) r1 = static_cast<const __nv_bfloat16*>(Y)[r];
    float acc[kTok];
    dotRow<kTok, kSharedX>(reinterpret_cast<const uint4*>(W + static_cast<int64_t>(r) * in), vecs, lane, xg, n,
                           r == first, w, acc);
    if (kForm == kNormSwiglu) {
      float up[kTok];
      dotRow<kTok, kSharedX>(reinterpret_cast<const uint4*>(W + static_cast<int64_t>(out + r) * in), vecs, lane, xg, n,
                             false, w, up);
      if (lane == 0) static_cast<__nv_bfloat16*>(Y)[r] = swigluOf(acc[0], up[0]);
      continue;
    }
    if (lane != 0) continue;
#pragma unroll
    for (int t = 0; t < kTok; ++t) {
      if (t >= n) break;
      const int64_t at = static_cast<int64_t>(t) * out + r;
      if (kForm == kResidual) {
        __nv_bfloat16* R = static_cast<__nv_bfloat16*>(Y);
        R[at] = residualOf(kTok == 1 ? r1 : R[at], acc[t]);
      } else if (kF32) {
        static_cast<float*>(Y)[at] = acc[t];
      } else {
        static_cast<__nv_bfloat16*>(Y)[at] = __float2bfloat16_rn(acc[t]);
      }
    }
  }
}

// ---- streamLayer: a layer's o_proj, gate/up and down, and the next layer's qkv, in one launch ----
//
// Who writes what: phase 1 (o_proj) adds each row's product to the residual x, the row's warp
// alone (phase 3's rows are the same warps'); phase 2 reads all of x (every block norms it with
// ln2) and writes act; phase 3 reads all of act and adds down's rows to x; phase 4 reads all of
// x (normed with the next layer's ln1) and writes qkv. Between the phases a grid barrier in two
// halves. Arrive: after __syncthreads, thread 0 reads the generation bar[1], fences the block's
// writes (__threadfence) and adds 1 to bar[0]; the last to arrive zeroes bar[0], fences (its
// acquire of every block's fenced writes) and bumps bar[1]. Then every warp loads the first chunk
// of its first row of the next phase (W is constant), after the fence, so the fence never waits
// for those loads and they stream while the other blocks finish. Wait: thread 0 polls bar[1]
// with ld.acquire.gpu (with __nanosleep) until it moves, then __syncthreads; what one block
// reads of another's writes goes through L2 (__ldcg: L1 is not coherent). The blocks are
// co-resident (a cooperative launch, at most the occupancy's blocks), so the barrier cannot wait
// on a block that has not started. A wait is bounded (boundNs of %globaltimer): past it the
// block sets *failed (host-mapped) and returns without writing again; the barrier words are then
// left mid-count and the host zeroes them before the next launch (GpuModel checks *failed after
// every call). Each phase's rows are the separate stream kernels' rows with their arithmetic
// (dotRow, stageNormedRow, residualOf, swigluOf), so the same bits.
__device__ __forceinline__ uint64_t globalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ unsigned ldAcquireGpu(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// The barrier's first half; returns (in thread 0) the generation gridWait waits past.
__device__ __forceinline__ unsigned gridArrive(unsigned* bar) {
  __syncthreads();  // every warp's rows of this phase written
  unsigned g = 0;
  if (threadIdx.x == 0) {
    g = *reinterpret_cast<volatile unsigned*>(bar + 1);  // cannot move before this block arrives
    __threadfence();
    if (atomicAdd(bar, 1u) == gridDim.x - 1) {
      atomicExch(bar, 0u);
      __threadfence();
      atomicAdd(bar + 1, 1u);
    }
  }
  return g;
}

// The second half: false (and *failed set) when the generation did not move within boundNs.
__device__ bool gridWait(const unsigned* bar, unsigned g, int* failed, uint64_t boundNs) {
  __shared__ int passed;
  if (threadIdx.x == 0) {
    passed = 1;
    const uint64_t t0 = globalTimerNs();
    while (ldAcquireGpu(bar + 1) == g) {
      if (globalTimerNs() - t0 > boundNs) {
        *reinterpret_cast<volatile int*>(failed) = 1;  // host-mapped: a plain store
        passed = 0;
        break;
      }
      __nanosleep(64);
    }
  }
  __syncthreads();
  return passed;
}

// One phase's rows of one token (X staged in shared memory): warp g < active takes rows g,
// g + active, ... (active = balancedWarps); its first row's first chunk is in w already.
template <int kForm>
__device__ __forceinline__ void streamRows(const __nv_bfloat16* __restrict__ W, int out, int in,
                                           __nv_bfloat16* __restrict__ Y, int first, int warps, int lane,
                                           uint4 (&w)[kStreamLoads]) {
  const int vecs = in / 8, active = balancedWarps(out, warps);
  if (first >= active) return;
  for (int r = first; r < out; r += active) {
    __nv_bfloat16 r1 = __float2bfloat16_rn(0.f);
    if (kForm == kResidual && lane == 0) r1 = __ldcg(Y + r);
    float acc[1];
    dotRow<1, true>(reinterpret_cast<const uint4*>(W + static_cast<int64_t>(r) * in), vecs, lane, nullptr, 1,
                    r == first, w, acc);
    if (kForm == kNormSwiglu) {
      float up[1];
      dotRow<1, true>(reinterpret_cast<const uint4*>(W + static_cast<int64_t>(out + r) * in), vecs, lane, nullptr, 1,
                      false, w, up);
      if (lane == 0) Y[r] = swigluOf(acc[0], up[0]);
    } else if (lane == 0) {
      Y[r] = kForm == kResidual ? residualOf(r1, acc[0]) : __float2bfloat16_rn(acc[0]);
    }
  }
}

__device__ __forceinline__ void stageRow(const __nv_bfloat16* __restrict__ X, int in) {
  extern __shared__ uint4 xs[];
  for (int v = threadIdx.x; v < in / 8; v += blockDim.x) xs[v] = __ldcg(reinterpret_cast<const uint4*>(X) + v);
  __syncthreads();
}

__global__ void __launch_bounds__(kStreamWarps * 32, kStreamBlocksPerSm) streamLayerKernel(StreamLayer a) {
  const int lane = threadIdx.x & 31;
  const int warps = gridDim.x * kStreamWarps, first = blockIdx.x * kStreamWarps + (threadIdx.x >> 5);
  uint4 w[kStreamLoads];
  // 1. x += o_proj(att)
  auto firstOf = [&](int out) { return first < balancedWarps(out, warps) ? first : out; };  // out: none
  loadFirstChunk(a.wo, a.hidden, a.attIn, firstOf(a.hidden), lane, w);
  stageRow(a.att, a.attIn);
  streamRows<kResidual>(a.wo, a.hidden, a.attIn, a.x, first, warps, lane, w);
  // 2. act = SwiGLU(gate/up of norm2(x))
  unsigned g = gridArrive(a.barrier);
  loadFirstChunk(a.wgu, a.inter, a.hidden, firstOf(a.inter), lane, w);
  if (!gridWait(a.barrier, g, a.failed, a.boundNs)) return;
  stageNormedRow(a.x, a.ln2, a.hidden, a.eps);
  streamRows<kNormSwiglu>(a.wgu, a.inter, a.hidden, a.act, first, warps, lane, w);
  // 3. x += down(act)
  g = gridArrive(a.barrier);
  loadFirstChunk(a.wd, a.hidden, a.inter, firstOf(a.hidden), lane, w);
  if (!gridWait(a.barrier, g, a.failed, a.boundNs)) return;
  stageRow(a.act, a.inter);
  streamRows<kResidual>(a.wd, a.hidden, a.inter, a.x, first, warps, lane, w);
  // 4. qkv = the next layer's qkv of its norm1(x)
  if (!a.wqkv) return;
  g = gridArrive(a.barrier);
  loadFirstChunk(a.wqkv, a.qkvRows, a.hidden, firstOf(a.qkvRows), lane, w);
  if (!gridWait(a.barrier, g, a.failed, a.boundNs)) return;
  stageNormedRow(a.x, a.ln1, a.hidden, a.eps);
  streamRows<kNorm>(a.wqkv, a.qkvRows, a.hidden, a.qkv, first, warps, lane, w);
}

// ---- streamPick: the lm_head's one-token stream with the greedy pick in its last block ----
//
// Who writes what: every warp writes its rows' logits (fp32, lane 0, as gemvStream with yF32)
// and keeps the best (value, row) of its rows, rows ascending: a strictly larger value takes it,
// so the first of equal values stays and NaN (never larger) is never picked. Thread 0 merges its
// block's warps (mergePick: larger value, else lower row; a total order, so any merge order gives
// one answer), stores the block's pick in partials[block], fences it (__threadfence: visible at
// gpu scope before the count moves) and counts the block in with atomicInc(ticket, blocks - 1),
// which wraps to 0 on the last arrival: each launch starts from a zero ticket with no reset. The
// last block fences (its acquire of every fenced partial), reads the partials through L2 and
// writes the token: the row of the best value, or 0 when no value was above -FLT_MAX (all NaN or
// -inf), argmaxPick's rules, so the same token from the same logits. No block waits for another:
// there is nothing to bound. With normW the products take the RMSNorm of the row X
// (stageNormedRow: addRmsNorm's bits) and block 0 also stores that normed row to normOut.
struct Pick {
  float value;
  int row;
};

__device__ __forceinline__ Pick mergePick(Pick a, Pick b) {
  return b.value > a.value || (b.value == a.value && b.row < a.row) ? b : a;
}

__device__ __forceinline__ Pick warpMergePick(Pick p) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    p = mergePick(p, Pick{__shfl_xor_sync(0xffffffffu, p.value, o), __shfl_xor_sync(0xffffffffu, p.row, o)});
  return p;
}

// One pick from a block's 16 warps' (lane 0 holds each warp's): thread 0 returns it.
__device__ __forceinline__ Pick blockMergePick(Pick mine) {
  __shared__ Pick warpPick[kStreamWarps];
  if ((threadIdx.x & 31) == 0) warpPick[threadIdx.x >> 5] = mine;
  __syncthreads();
  Pick p = warpPick[0];
  if (threadIdx.x == 0)
    for (int w = 1; w < kStreamWarps; ++w) p = mergePick(p, warpPick[w]);
  return p;
}

constexpr Pick kNoPick{-FLT_MAX, 0x7fffffff};

__global__ void __launch_bounds__(kStreamWarps * 32, kStreamBlocksPerSm)
    streamPickKernel(const __nv_bfloat16* __restrict__ W, int out, int in, const __nv_bfloat16* __restrict__ X,
                     const __nv_bfloat16* __restrict__ normW, float eps, __nv_bfloat16* __restrict__ normOut,
                     float* __restrict__ logits, Pick* __restrict__ partials, unsigned* __restrict__ ticket,
                     int32_t* __restrict__ token) {
  extern __shared__ uint4 xs[];
  pdlLaunch();
  const int lane = threadIdx.x & 31, vecs = in / 8;
  const int warps = gridDim.x * kStreamWarps, first = blockIdx.x * kStreamWarps + (threadIdx.x >> 5);
  uint4 w[kStreamLoads];
  loadFirstChunk(W, out, in, first, lane, w);
  pdlWait();
  if (normW) {
    stageNormedRow(X, normW, in, eps);
    if (normOut && blockIdx.x == 0)
      for (int v = threadIdx.x; v < vecs; v += blockDim.x) reinterpret_cast<uint4*>(normOut)[v] = xs[v];
  } else {
    stageRow(X, in);
  }
  Pick mine = kNoPick;
  for (int r = first; r < out; r += warps) {
    float acc[1];
    dotRow<1, true>(reinterpret_cast<const uint4*>(W + static_cast<int64_t>(r) * in), vecs, lane, nullptr, 1,
                    r == first, w, acc);
    if (lane == 0) logits[r] = acc[0];
    if (acc[0] > mine.value) mine = Pick{acc[0], r};
  }
  __shared__ bool last;
  Pick p = blockMergePick(mine);
  if (threadIdx.x == 0) {
    partials[blockIdx.x] = p;
    __threadfence();
    last = atomicInc(ticket, gridDim.x - 1) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  p = kNoPick;
  for (unsigned b = threadIdx.x; b < gridDim.x; b += blockDim.x) {
    const int2 raw = __ldcg(reinterpret_cast<const int2*>(partials + b));
    p = mergePick(p, Pick{__int_as_float(raw.x), raw.y});
  }
  p = blockMergePick(warpMergePick(p));
  if (threadIdx.x == 0) *token = p.row == kNoPick.row ? 0 : p.row;
}

// ---- streamQkvRope: a one-token step's norm + qkv stream with the q/k norm, RoPE and KV store ----
//
// A cluster of C blocks per head (hq q heads, then hk k heads, then hk v heads: the qkv rows' own
// order): block r of head h streams rows h D + r D / C .. + D / C, warp w of it rpw = D / (16 C)
// consecutive ones, with the normed row in shared memory as gemvStreamNorm (stageNormedRow), and
// lane 0 keeps each row's bf16 product in the block's shared `head` slice. Who writes what: the v
// heads' warps store their rows to the V cache at slot *pos themselves (no exchange). For a q or k
// head, barrier.cluster (cg::cluster_group::sync: arrive with release, wait with acquire at
// cluster scope) publishes every block's slice; warp 0 of the cluster's block 0 reads the head's D
// values through distributed shared memory into registers, the cluster syncs again (no block
// leaves while its slice may still be read), and that warp norms, rotates and stores the head to q
// or the K cache: qkNormRopeStore's arithmetic in its order (each half-element pair a lane, the
// sum of squares as its blockSum over D / 64 warps: (w0 + w2) + (w1 + w3)), so the same bits. The
// blocks of a cluster are co-scheduled by the hardware, so the cluster barrier cannot wait on a
// block that has not started; nothing waits on another cluster. sm_90+ (clusters).
namespace cg = cooperative_groups;

constexpr int kQkvRopeMaxKw = 4;  // D <= 256: at most 4 elements a lane of each half

__global__ void __launch_bounds__(kStreamWarps * 32, kStreamBlocksPerSm) streamQkvRopeKernel(QkvRope a, int C) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __shared__ __nv_bfloat16 head[256];  // this block's products of the head (D / C <= 256)
  cg::cluster_group cluster = cg::this_cluster();
  pdlLaunch();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, D = a.headDim, in = a.hidden, vecs = in / 8;
  const int h = blockIdx.x / C, rank = static_cast<int>(cluster.block_rank());
  const int perBlock = D / C, rpw = perBlock / kStreamWarps;
  const int row0 = h * D + rank * perBlock + warp * rpw;  // the warp's first row of W
  uint4 w[kStreamLoads];
  loadFirstChunk(a.wqkv, (a.hq + 2 * a.hk) * D, in, row0, lane, w);
  pdlWait();
  stageNormedRow(a.x, a.ln, in, a.eps);
  const int slot = *a.pos;
  const bool isV = h >= a.hq + a.hk;
  const int half = D / 2, kW = half / 32;
  const bool picker = !isV && rank == 0 && warp == 0;
  // The picker's norm weights and rotary angles, made before its rows stream (they depend on the
  // head and the slot only) and kept in shared memory (not registers: the stream's loop is at the
  // launch bounds' 64), so the head's tail after the exchange is the sums and the stores.
  __shared__ float ropeOf[4][128];  // [norm weight of i, of i + half, cos, sin][i < half <= 128]
  if (picker) {
    const __nv_bfloat16* nw = h < a.hq ? a.qNorm : a.kNorm;
    for (int i = lane; i < half; i += 32) {
      ropeOf[0][i] = __bfloat162float(nw[i]);
      ropeOf[1][i] = __bfloat162float(nw[i + half]);
      const float invFreq = 1.0f / powf(a.theta, static_cast<float>(2 * i) / static_cast<float>(D));
      sincosf(static_cast<float>(slot + a.ropeOffset) * invFreq, &ropeOf[3][i], &ropeOf[2][i]);
    }
  }
  for (int k = 0; k < rpw; ++k) {
    float acc[1];
    dotRow<1, true>(reinterpret_cast<const uint4*>(a.wqkv + static_cast<int64_t>(row0 + k) * in), vecs, lane, nullptr,
                    1, k == 0, w, acc);
    if (lane != 0) continue;
    const __nv_bfloat16 y = __float2bfloat16_rn(acc[0]);
    const int e = rank * perBlock + warp * rpw + k;  // the element of the head
    if (isV)
      a.vCache[(static_cast<int64_t>(slot) * a.hk + (h - a.hq - a.hk)) * D + e] = y;
    else
      head[e - rank * perBlock] = y;
  }
  if (isV) return;  // the whole cluster: h is the cluster's
  cluster.sync();
  float x1[kQkvRopeMaxKw], x2[kQkvRopeMaxKw];
  if (picker) {
#pragma unroll
    for (int k = 0; k < kQkvRopeMaxKw; ++k) {
      x1[k] = x2[k] = 0.f;
      if (k >= kW) continue;
      const int i = lane + 32 * k, j = i + half;
      const __nv_bfloat16* s1 = cluster.map_shared_rank(head, i / perBlock);
      const __nv_bfloat16* s2 = cluster.map_shared_rank(head, j / perBlock);
      x1[k] = __bfloat162float(s1[i % perBlock]);
      x2[k] = __bfloat162float(s2[j % perBlock]);
    }
  }
  cluster.sync();  // every slice read: the other blocks may leave
  if (!picker) return;
  float part[kQkvRopeMaxKw];
#pragma unroll
  for (int k = 0; k < kQkvRopeMaxKw; ++k) part[k] = k < kW ? warpSum(x1[k] * x1[k] + x2[k] * x2[k]) : 0.f;
  const float inv = rsqrtf(((part[0] + part[2]) + (part[1] + part[3])) / D + a.eps);
  __nv_bfloat16* dst = h < a.hq ? a.q + static_cast<int64_t>(h) * D
                                 : a.kCache + (static_cast<int64_t>(slot) * a.hk + (h - a.hq)) * D;
#pragma unroll
  for (int k = 0; k < kQkvRopeMaxKw; ++k) {
    if (k >= kW) break;
    const int i = lane + 32 * k;
    const float v1 = __bfloat162float(__float2bfloat16_rn(ropeOf[0][i] * (x1[k] * inv)));
    const float v2 = __bfloat162float(__float2bfloat16_rn(ropeOf[1][i] * (x2[k] * inv)));
    const float cs = ropeOf[2][i], sn = ropeOf[3][i];  // its own lane's: no barrier needed
    dst[i] = __float2bfloat16_rn(v1 * cs - v2 * sn);
    dst[i + half] = __float2bfloat16_rn(v2 * cs + v1 * sn);
  }
#endif
}

int gStreamSms = 0;      // prepareGemvStream
bool gStreamPdl = false;  // setGemvStreamPdl
bool gStreamClusters = false;  // prepareGemvStream: sm_90+ and streamQkvRopeKernel loaded
int gStreamSlots = kStreamBlocksPerSm;  // setGemvStreamSlots: blocks a multiprocessor a stream's grid takes

template <int kTok, bool kF32, int kForm = kPlain>
void launchStream(const __nv_bfloat16* W, int out, int in, const __nv_bfloat16* X, int n, void* Y, int blocks,
                  cudaStream_t s, const __nv_bfloat16* normW = nullptr, float eps = 0.f) {
  const size_t xBytes = static_cast<size_t>(n) * in * 2;
  auto* kernel = gemvStreamKernel<kTok, true, kF32, kForm>;  // the normed forms: hn in shared memory always
  size_t smem = xBytes;
  if constexpr (kForm == kNorm || kForm == kNormSwiglu) smem = 2 * xBytes;  // the row, then hn; the norm weights
  if constexpr (kForm != kNorm && kForm != kNormSwiglu) {
    if (xBytes > static_cast<size_t>(kStreamSharedX)) kernel = gemvStreamKernel<kTok, false, kF32, kForm>, smem = 0;
  }
  if (gStreamPdl)
    launchSmem(kernel, blocks, kStreamWarps * 32, smem, s, W, out, in, X, n, Y, normW, eps);
  else
    kernel<<<blocks, kStreamWarps * 32, smem, s>>>(W, out, in, X, n, Y, normW, eps);
}

template <int kTok, bool kF32, int kForm>
bool prepareForm() {
  if (cudaFuncSetAttribute(gemvStreamKernel<kTok, true, kF32, kForm>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           kStreamSharedX) != cudaSuccess)
    return false;
  if constexpr (kForm != kNorm && kForm != kNormSwiglu) {
    cudaFuncAttributes a;
    return cudaFuncGetAttributes(&a, gemvStreamKernel<kTok, false, kF32, kForm>) == cudaSuccess;
  }
  return true;
}

// The form compiled for n tokens: 1, up to 4, up to kGemvStreamMaxTokens accumulators a lane.
template <bool kF32, int kForm>
void launchForTokens(const __nv_bfloat16* W, int out, int in, const __nv_bfloat16* X, int n, void* Y, int blocks,
                     cudaStream_t s) {
  if (n == 1)
    launchStream<1, kF32, kForm>(W, out, in, X, n, Y, blocks, s);
  else if (n <= 4)
    launchStream<4, kF32, kForm>(W, out, in, X, n, Y, blocks, s);
  else
    launchStream<kGemvStreamMaxTokens, kF32, kForm>(W, out, in, X, n, Y, blocks, s);
}

// The normed forms' operands: one row X and normW 16-byte aligned, row and hn in shared memory.
bool normedSupported(const void* W, const void* X, const void* normW, int in) {
  return gStreamSms > 0 && gemvStreamSupported(W, X, in) && in * 4 <= kStreamSharedX && normW && aligned16(normW);
}

}  // namespace

bool prepareGemvStream() {
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&gStreamSms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
    return false;
  gStreamClusters = major >= 9 && cudaFuncSetAttribute(streamQkvRopeKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                       kStreamSharedX) == cudaSuccess;
  if (!gStreamClusters) cudaGetLastError();  // an unsupported attribute is not the caller's error
  // X up to kStreamSharedX in shared memory: past the default 48 KB. Setting the attribute (or
  // reading the attributes) loads every form now, before any capture or collective.
  return prepareForm<1, false, kPlain>() && prepareForm<1, true, kPlain>() && prepareForm<4, false, kPlain>() &&
         prepareForm<4, true, kPlain>() && prepareForm<kGemvStreamMaxTokens, false, kPlain>() &&
         prepareForm<kGemvStreamMaxTokens, true, kPlain>() && prepareForm<1, false, kNorm>() &&
         prepareForm<1, false, kResidual>() && prepareForm<4, false, kResidual>() &&
         prepareForm<kGemvStreamMaxTokens, false, kResidual>() && prepareForm<1, false, kNormSwiglu>() &&
         cudaFuncSetAttribute(streamLayerKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kStreamSharedX) ==
             cudaSuccess &&
         cudaFuncSetAttribute(streamPickKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kStreamSharedX) ==
             cudaSuccess;
}

void setGemvStreamPdl(bool on) { gStreamPdl = on; }

bool setGemvStreamSlots(int perSm) {
  if (perSm < 1 || perSm > kStreamBlocksPerSm) return false;
  gStreamSlots = perSm;
  return true;
}

bool gemvStreamSupported(const void* W, const void* X, int in) {
  return in > 0 && in % 8 == 0 && in <= kGemvStreamMaxIn && aligned16(W, X);
}

bool gemvStream(const __nv_bfloat16* W, int out, int in, const __nv_bfloat16* X, int n, void* Y, bool yF32,
                cudaStream_t s) {
  if (gStreamSms <= 0 || out <= 0 || n < 1 || n > kGemvStreamMaxTokens || !gemvStreamSupported(W, X, in)) return false;
  const int blocks = streamBlocks(out, gStreamSms, gStreamSlots);
  yF32 ? launchForTokens<true, kPlain>(W, out, in, X, n, Y, blocks, s)
       : launchForTokens<false, kPlain>(W, out, in, X, n, Y, blocks, s);
  return cudaPeekAtLastError() == cudaSuccess;
}

size_t streamLayerSmem(const StreamLayer& a) {
  return static_cast<size_t>(std::max({a.attIn, a.inter, 2 * a.hidden})) * 2;
}

bool streamLayerSupported(const StreamLayer& a) {
  const bool sizes = a.hidden > 0 && a.attIn > 0 && a.inter > 0 && a.hidden % 8 == 0 && a.attIn % 8 == 0 &&
                     a.inter % 8 == 0 && (!a.wqkv || a.qkvRows > 0);
  return sizes && streamLayerSmem(a) <= static_cast<size_t>(kStreamSharedX) && a.barrier && a.failed && a.ln2 &&
         (!a.wqkv || (a.ln1 && a.qkv && aligned16(a.wqkv, a.ln1))) &&
         aligned16(a.wo, a.wgu, a.wd, a.att, a.x, a.act, a.ln2);
}

bool streamLayer(const StreamLayer& a, cudaStream_t s) {
  if (gStreamSms <= 0 || !streamLayerSupported(a)) return false;
  const size_t smem = streamLayerSmem(a);
  int perSm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, streamLayerKernel, kStreamWarps * 32, smem) != cudaSuccess ||
      perSm < 1)
    return false;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(gStreamSms * std::min(perSm, kStreamBlocksPerSm));
  cfg.blockDim = dim3(kStreamWarps * 32);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;  // every block resident at once: the barriers need it
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, streamLayerKernel, a) == cudaSuccess;
}

bool gemvStreamNorm(const __nv_bfloat16* W, int out, int in, const __nv_bfloat16* X, const __nv_bfloat16* normW,
                    float eps, __nv_bfloat16* Y, cudaStream_t s) {
  if (out <= 0 || !normedSupported(W, X, normW, in)) return false;
  launchStream<1, false, kNorm>(W, out, in, X, 1, Y, streamBlocks(out, gStreamSms, gStreamSlots), s, normW, eps);
  return cudaPeekAtLastError() == cudaSuccess;
}

bool gemvStreamResidual(const __nv_bfloat16* W, int out, int in, const __nv_bfloat16* X, int n, __nv_bfloat16* R,
                        cudaStream_t s) {
  if (gStreamSms <= 0 || out <= 0 || n < 1 || n > kGemvStreamMaxTokens || !gemvStreamSupported(W, X, in)) return false;
  launchForTokens<false, kResidual>(W, out, in, X, n, R, streamBlocks(out, gStreamSms, gStreamSlots), s);
  return cudaPeekAtLastError() == cudaSuccess;
}

bool gemvStreamNormSwiglu(const __nv_bfloat16* W, int I, int in, const __nv_bfloat16* X, const __nv_bfloat16* normW,
                          float eps, __nv_bfloat16* act, cudaStream_t s) {
  if (I <= 0 || !normedSupported(W, X, normW, in)) return false;
  launchStream<1, false, kNormSwiglu>(W, I, in, X, 1, act, streamBlocks(I, gStreamSms, gStreamSlots), s, normW, eps);
  return cudaPeekAtLastError() == cudaSuccess;
}

int streamQkvRopeCluster(const QkvRope& a) {
  if (!gStreamClusters || a.headDim <= 0 || a.headDim % 64 != 0 || a.headDim > 256 || a.hq <= 0 || a.hk <= 0)
    return 0;
  const int heads = a.hq + 2 * a.hk;
  for (int c = 8; c >= 1; c /= 2)  // the most blocks a head whose grid fits the resident slots at once
    if (a.headDim % (kStreamWarps * c) == 0 && heads * c <= gStreamSms * gStreamSlots) return c;
  return 0;
}

bool streamQkvRopeSupported(const QkvRope& a) {
  return streamQkvRopeCluster(a) > 0 && normedSupported(a.wqkv, a.x, a.ln, a.hidden) && a.qNorm && a.kNorm && a.pos &&
         a.q && a.kCache && a.vCache;
}

bool streamQkvRope(const QkvRope& a, cudaStream_t s) {
  if (!streamQkvRopeSupported(a)) return false;
  const int c = streamQkvRopeCluster(a);
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((a.hq + 2 * a.hk) * c);
  cfg.blockDim = dim3(kStreamWarps * 32);
  cfg.dynamicSmemBytes = static_cast<size_t>(a.hidden) * 4;  // the row (then hn) and the norm weights
  cfg.stream = s;
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = c, attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
  attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[1].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = gStreamPdl && pdlEnabled() ? 2 : 1;
  return cudaLaunchKernelEx(&cfg, streamQkvRopeKernel, a, c) == cudaSuccess && cudaPeekAtLastError() == cudaSuccess;
}

size_t streamPickScratch() {
  return gStreamSms > 0 ? static_cast<size_t>(gStreamSms) * kStreamBlocksPerSm * sizeof(Pick) + sizeof(unsigned) : 0;
}

bool streamPick(const __nv_bfloat16* W, int out, int in, const __nv_bfloat16* X, const __nv_bfloat16* normW, float eps,
                __nv_bfloat16* normOut, float* logits, void* scratch, size_t scratchBytes, int32_t* token,
                cudaStream_t s) {
  if (out <= 0 || !logits || !token || !scratch || (reinterpret_cast<uintptr_t>(scratch) & 7u) != 0 ||
      scratchBytes < streamPickScratch())
    return false;
  if (normW ? !normedSupported(W, X, normW, in) : (gStreamSms <= 0 || !gemvStreamSupported(W, X, in) ||
                                                   in * 2 > kStreamSharedX))
    return false;
  if (normOut && (reinterpret_cast<uintptr_t>(normOut) & 15u) != 0) return false;
  const int blocks = streamBlocks(out, gStreamSms, gStreamSlots);
  Pick* partials = static_cast<Pick*>(scratch);
  unsigned* ticket = reinterpret_cast<unsigned*>(partials + gStreamSms * kStreamBlocksPerSm);
  const size_t smem = static_cast<size_t>(in) * 2 * (normW ? 2 : 1);  // the row (then hn), the norm weights
  if (gStreamPdl)
    launchSmem(streamPickKernel, blocks, kStreamWarps * 32, smem, s, W, out, in, X, normW, eps, normOut, logits,
               partials, ticket, token);
  else
    streamPickKernel<<<blocks, kStreamWarps * 32, smem, s>>>(W, out, in, X, normW, eps, normOut, logits, partials,
                                                             ticket, token);
  return cudaPeekAtLastError() == cudaSuccess;
}

}  // namespace gpu
}  // namespace qwen
