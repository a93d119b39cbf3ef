// attention_prefill_fa3.cu: causal GQA attention for prefill chunks on Hopper, in the
// FlashAttention-3 schedule (Shah et al., 2024), head_dim 128, sm_90a only. A CTA owns 128
// query rows, the (token, query head) pairs of one KV head's group, token-major ("packed GQA":
// every K/V tile read serves the whole group), and three warpgroups:
//  - warpgroup 0, the producer: one warp issues TMA loads (cp.async.bulk.tensor, 128-byte
//    swizzle) of the Q tile once and of 128-slot K and V tiles through a ring of kStages stages,
//    each stage with a full mbarrier (the copy's transaction bytes) and an empty one (one arrive
//    per consumer warp once its wgmma has read the stage). It keeps 24 registers (setmaxnreg).
//  - warpgroups 1 and 2, the consumers, 64 rows each, 240 registers: S = Q K^T as 8 wgmma
//    m64n128k16 with both operands in shared memory (K-major), O += P V as 8 wgmma with P in
//    registers (the S accumulators as bf16 are the A fragments) and V read N-major (no transpose
//    copy). Within a warpgroup, tile j's S GEMM and tile j-1's P V GEMM are in flight together and
//    tile j's softmax runs while P V still runs; between the two warpgroups, two named barriers
//    alternate their GEMM issue (ping-pong), so one's softmax overlaps the other's GEMMs.
// Softmax in fp32, base 2 (log2(e)/sqrt(D) folded into one FFMA), the causal mask only on tiles
// that reach past the CTA's first query position. K/V tiles run in order from slot 0 for every
// CTA, a tile past a row's position is an exact identity for that row (P = 0, the rescale factor
// exactly 1), and rows never mix: a query's bits do not depend on n or on its tile. V rows past
// the call's last slot (*pos + n) are zeroed in shared memory before use (stale cache slots may
// hold NaN, and 0 * NaN would reach O). CTAs are issued longest first, KV heads fastest.
#include <cuda.h>
#include <cudaTypedefs.h>

#include <cmath>
#include <cstdint>

#include "kernels/attention_prefill_fa3.cuh"
#include "kernels/common.cuh"
#include "kernels/smem_mma.cuh"

#ifndef QWEN_FA3_SM90A
#define QWEN_FA3_SM90A 0
#endif

namespace qwen {
namespace gpu {
namespace {

constexpr int kD = 128;
constexpr int kRows = 128;                  // query rows a CTA: 2 consumer warpgroups x 64
constexpr int kKeys = 128;                  // cache slots a K/V tile
constexpr int kStages = 2;                  // K/V ring depth
constexpr int kThreads = 384;               // warpgroup 0: producer; 1, 2: consumers
constexpr uint32_t kHalfBytes = 128 * 128;  // one 64-column half of a 128-row tile (128-byte rows)
constexpr uint32_t kTileBytes = 2 * kHalfBytes;
constexpr uint32_t kBarBytes = 8 * (2 + 4 * kStages);
constexpr int kSmemBytes = 1024 /* alignment slack */ + (1 + 2 * kStages) * kTileBytes + kBarBytes;

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// ---- mbarriers, TMA, named barriers ----
__device__ __forceinline__ void mbarInit(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbarExpectTx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbarArrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ bool mbarTryWait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
               : "=r"(done)
               : "r"(bar), "r"(parity)
               : "memory");
  return done != 0;
}
// Waits for the phase of the given parity to complete.
__device__ __forceinline__ void mbarWait(uint32_t bar, uint32_t parity) {
  while (!mbarTryWait(bar, parity)) {
  }
}
// The producer's waits are bounded: a CTA's whole work takes well under a millisecond, so a wait of
// 2^32 cycles (about 2 s) is a bug (a lost arrive, a wrong parity, consumers stuck on a copy that
// never lands), and the kernel traps, failing the launch with an error, instead of hanging the GPU.
// (Consumers wait unbounded: a bound there costs registers in the GEMM loop, and a stuck consumer
// leaves the producer stuck on an empty barrier, which traps.)
__device__ __forceinline__ void mbarWaitBounded(uint32_t bar, uint32_t parity) {
  if (mbarTryWait(bar, parity)) return;
  const long long t0 = clock64();
  while (!mbarTryWait(bar, parity))
    if (clock64() - t0 > (1ll << 32)) __trap();
}
// A box of the 3-d tensor map at coordinates (c0, c1, c2) -> shared dst; completes on bar.
__device__ __forceinline__ void tmaLoad3d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];" ::
          "r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
// Named barriers 1 and 2 (0 is __syncthreads), shared by the two consumer warpgroups (256 threads).
__device__ __forceinline__ void namedBarSync(int id) {
  if (id == 1)
    asm volatile("bar.sync 1, 256;" ::: "memory");
  else
    asm volatile("bar.sync 2, 256;" ::: "memory");
}
__device__ __forceinline__ void namedBarArrive(int id) {
  if (id == 1)
    asm volatile("bar.arrive 1, 256;" ::: "memory");
  else
    asm volatile("bar.arrive 2, 256;" ::: "memory");
}

// ---- wgmma ----
__device__ __forceinline__ void wgFence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgCommit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Pins a register at this point of the program: wgmma writes its accumulators and reads its A
// registers asynchronously, so no access may move across the wait that completes it.
__device__ __forceinline__ void pin(float& r) { asm volatile("" : "+f"(r)::"memory"); }
__device__ __forceinline__ void pin(uint32_t& r) { asm volatile("" : "+r"(r)::"memory"); }

// Shared memory matrix descriptors, 128-byte swizzle (bits 62-63 = 1), start address >> 4 in bits
// 0-13, leading byte offset >> 4 in 16-29, stride byte offset >> 4 in 32-45. K-major (Q, K):
// rows of 128 bytes, 8-row groups 1024 bytes apart (SBO); the leading offset is unused. N-major
// (V as B of P V): 64 columns of one half per 128-byte row, the next 64 columns a half further
// (LBO 16 KB), 8-row (slot) groups 1024 bytes apart (SBO).
__device__ __forceinline__ uint64_t descKMajor(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}
__device__ __forceinline__ uint64_t descNMajor(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(kHalfBytes >> 4) << 16) | (64ull << 32) |
         (1ull << 62);
}

#define FA3_D8(i)                                                                                             \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
      "+f"(d[i + 7])
#define FA3_D64 FA3_D8(0), FA3_D8(8), FA3_D8(16), FA3_D8(24), FA3_D8(32), FA3_D8(40), FA3_D8(48), FA3_D8(56)
#define FA3_R64                                                                                                     \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, " \
  "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, "  \
  "%46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"

// d (64 x 128, fp32; d = A B when !accumulate) [+]= A B, A 64 x 16 and B 16 x 128 from shared
// memory, both K-major.
__device__ __forceinline__ void wgmmaSS(float (&d)[64], uint64_t descA, uint64_t descB, int accumulate) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " FA3_R64 ", %64, %65, p, 1, 1, 0, 0;\n}\n"
      : FA3_D64
      : "l"(descA), "l"(descB), "r"(accumulate));
}
// d += A B, A 64 x 16 in registers (a0..a3: the m16n8k16 A fragment of the thread's warp's 16 rows),
// B 16 x 128 from shared memory, N-major (imm-trans-b = 1).
__device__ __forceinline__ void wgmmaRS(float (&d)[64], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                        uint64_t descB) {
  asm volatile("{\n wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " FA3_R64
               ", {%64, %65, %66, %67}, %68, 1, 1, 1, 1;\n}\n"
               : FA3_D64
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(descB));
}

struct Bars {  // shared addresses of the mbarriers
  uint32_t base;
  __device__ uint32_t q() const { return base; }
  __device__ uint32_t vFix() const { return base + 8; }
  __device__ uint32_t kFull(int s) const { return base + 8 * (2 + s); }
  __device__ uint32_t kEmpty(int s) const { return base + 8 * (2 + kStages + s); }
  __device__ uint32_t vFull(int s) const { return base + 8 * (2 + 2 * kStages + s); }
  __device__ uint32_t vEmpty(int s) const { return base + 8 * (2 + 3 * kStages + s); }
};

// The producer warp: Q once, then K_j and V_j for j = 0 .. tiles-1 through the ring. The V tile
// that reaches past the call's last slot (the CTA's last tile, if any) lands on vFix instead; the
// warp zeroes its rows from that slot on, makes the stores visible to the async proxy, then
// arrives on the stage's full barrier itself.
__device__ __forceinline__ void produce(const CUtensorMap* tmQ, const CUtensorMap* tmK, const CUtensorMap* tmV,
                                        const Bars& b, uint32_t sQ, uint32_t sK, uint32_t sV, int kvh, int G, int tok0,
                                        int rowsQ, int tiles, int zeroFrom) {
  const int lane = threadIdx.x & 31;
  if (lane == 0) {
    mbarExpectTx(b.q(), 2 * rowsQ * 128);
    tmaLoad3d(sQ, tmQ, b.q(), 0, kvh * G, tok0);
    tmaLoad3d(sQ + kHalfBytes, tmQ, b.q(), 64, kvh * G, tok0);
  }
  for (int j = 0; j < tiles; ++j) {
    const int st = j % kStages, s0 = j * kKeys;
    const uint32_t ph = (j / kStages) & 1, kDst = sK + st * kTileBytes, vDst = sV + st * kTileBytes;
    const bool fix = s0 + kKeys > zeroFrom;
    if (lane == 0) {
      mbarWaitBounded(b.kEmpty(st), ph ^ 1);
      mbarExpectTx(b.kFull(st), kTileBytes);
      tmaLoad3d(kDst, tmK, b.kFull(st), 0, kvh, s0);
      tmaLoad3d(kDst + kHalfBytes, tmK, b.kFull(st), 64, kvh, s0);
      mbarWaitBounded(b.vEmpty(st), ph ^ 1);
      const uint32_t bar = fix ? b.vFix() : b.vFull(st);
      mbarExpectTx(bar, kTileBytes);
      tmaLoad3d(vDst, tmV, bar, 0, kvh, s0);
      tmaLoad3d(vDst + kHalfBytes, tmV, bar, 64, kvh, s0);
    }
    if (fix) {       // the last tile only: s0 + kKeys <= kvEnd <= zeroFrom for every earlier one
      __syncwarp();  // lanes 1..31 sleep here until lane 0 has issued the copy
      mbarWaitBounded(b.vFix(), 0);
      // Rows z0 .. kKeys-1 of both halves: lane l stores 16-byte chunk l % 8 of rows z0 + l / 8 + 4 i.
      for (int r = zeroFrom - s0 + (lane >> 3); r < kKeys; r += 4)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          asm volatile(
              "st.shared.v4.u32 [%0], {%1, %1, %1, %1};" ::"r"(vDst + h * kHalfBytes + r * 128 + (lane & 7) * 16),
              "r"(0)
              : "memory");
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      __syncwarp();
      if (lane == 0) mbarArrive(b.vFull(st));
    }
  }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// grid (hk * ceil(n / tokPerTile)), block 384, kSmemBytes of dynamic shared memory. Block b
// serves KV head b % hk and query tile numTiles - 1 - b / hk (tokens tok0 .. tok0 + tokPerTile - 1,
// rows (t - tok0) * G + head-in-group; tokPerTile = 128 / G, rows past tokPerTile * G unused).
template <bool kPingPong>
__global__ void __launch_bounds__(kThreads, 1)
    attnPrefillFa3Kernel(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
                         const __grid_constant__ CUtensorMap tmV, const int32_t* pos, int n, int hq, int hk, int G,
                         int tokPerTile, int numTiles, float scaleLog2, __nv_bfloat16* out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smemRaw[];
  const uint32_t sQ = (smemAddr(smemRaw) + 1023u) & ~1023u;  // 128-byte swizzle: 1024-byte aligned tiles
  const uint32_t sK = sQ + kTileBytes, sV = sK + kStages * kTileBytes;
  const Bars b{sV + kStages * kTileBytes};
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = warp >> 2;
  if (tid == 0) {
    mbarInit(b.q(), 1);
    mbarInit(b.vFix(), 1);
    for (int s = 0; s < kStages; ++s) {
      mbarInit(b.kFull(s), 1);
      mbarInit(b.vFull(s), 1);
      mbarInit(b.kEmpty(s), 8);  // one arrive per consumer warp
      mbarInit(b.vEmpty(s), 8);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  const int kvh = blockIdx.x % hk, tok0 = (numTiles - 1 - static_cast<int>(blockIdx.x) / hk) * tokPerTile;
  const int rowsQ = tokPerTile * G;
  pdlLaunch();
  pdlWait();  // q, the caches and pos are written by earlier kernels of the stream
  __syncthreads();
  const int p0 = *pos;
  const int kvEnd = p0 + min(tok0 + tokPerTile, n);  // the CTA reads slots [0, kvEnd)
  const int tiles = (kvEnd + kKeys - 1) / kKeys;

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;");
    if (warp == 0) produce(&tmQ, &tmK, &tmV, b, sQ, sK, sV, kvh, G, tok0, rowsQ, tiles, p0 + n);
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 240;");

  // ---- consumers ----
  const int cw = wg - 1, wq = warp & 3, g = lane >> 2, tq = lane & 3;
  // This thread's rows: r = 64 cw + 16 wq + g + 8 h (h = 0, 1); accumulator element 4 c + 2 h + e is
  // row r, column 8 c + 2 tq + e.
  int qpos[2], rowTok[2], rowHead[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = 64 * cw + 16 * wq + g + 8 * h;
    rowTok[h] = (r < rowsQ) ? tok0 + r / G : n;  // n: not stored
    rowHead[h] = kvh * G + r % G;
    qpos[h] = p0 + rowTok[h];
  }
  const int maskFrom = p0 + tok0;  // every row's position is >= this
  const uint32_t qBase = sQ + cw * 64 * 128;
  float o[64], s[64], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  uint32_t p[32];
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.f, s[i] = 0.f;

  auto issueS = [&](uint32_t kBase) {
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      const uint32_t off = (kk / 4) * kHalfBytes + (kk % 4) * 32;
      wgmmaSS(s, descKMajor(qBase + off), descKMajor(kBase + off), kk > 0);
    }
    wgCommit();
  };
  auto issuePV = [&](uint32_t vBase) {
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk)
      wgmmaRS(o, p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3], descNMajor(vBase + kk * 16 * 128));
    wgCommit();
  };
  auto release = [&](uint32_t bar) {
    __syncwarp();
    if (lane == 0) mbarArrive(bar);
  };
  // Mask (tiles past maskFrom), running max, P = exp2(S scale - m scale) in s, row sums; returns
  // the factor O must be scaled by before this tile's P V.
  auto softmax = [&](int j, float(&corr)[2]) {
    const int s0 = j * kKeys;
    if (s0 + kKeys - 1 > maskFrom) {
#pragma unroll
      for (int c = 0; c < 16; ++c)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int e = 0; e < 2; ++e)
            if (s0 + 8 * c + 2 * tq + e > qpos[h]) s[4 * c + 2 * h + e] = -INFINITY;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = m[h];
#pragma unroll
      for (int c = 0; c < 16; ++c) mx = fmaxf(mx, fmaxf(s[4 * c + 2 * h], s[4 * c + 2 * h + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      // Exactly 1 when the max holds (a tile past the row's position changes nothing).
      corr[h] = mx == m[h] ? 1.f : fastExp2((m[h] - mx) * scaleLog2);
      m[h] = mx;
      const float ms = mx * scaleLog2;
      float sum = 0.f;
#pragma unroll
      for (int c = 0; c < 16; ++c)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float v = fastExp2(fmaf(s[4 * c + 2 * h + e], scaleLog2, -ms));
          s[4 * c + 2 * h + e] = v;
          sum += v;
        }
      l[h] = l[h] * corr[h] + sum;
    }
  };
  // P (bf16) as the A fragments of P V: k-step kk takes accumulator columns 16 kk .. 16 kk + 15.
  auto toP = [&]() {
#pragma unroll
    for (int i = 0; i < 32; ++i) p[i] = packBf16(s[2 * i], s[2 * i + 1]);
  };
  const int turn = 1 + cw, other = 2 - cw;  // named barriers 1, 2: whose turn to issue GEMMs
  // The wait for P V in a basic block of its own: ptxas schedules within blocks and hoists a wait
  // (it has no operands) above the softmax, which then runs after P V instead of beside it. Both
  // sides of the branch wait; the condition only keeps ptxas from merging them.
  auto waitPV = [&]() {
    if (__float_as_uint(l[1]) != 0x7fc00001u)
      asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    else
      asm volatile("wgmma.wait_group.sync.aligned 0; // the other block" ::: "memory");
  };

  if (kPingPong && cw == 1) namedBarArrive(1);  // warpgroup 1 issues first
  mbarWait(b.q(), 0);
  float corr[2];
  // Tile 0: S, softmax.
  mbarWait(b.kFull(0), 0);
  if (kPingPong) namedBarSync(turn);
  wgFence();
  issueS(sK);
  if (kPingPong) namedBarArrive(other);
  wgWait<0>();
#pragma unroll
  for (int i = 0; i < 64; ++i) pin(s[i]);
  release(b.kEmpty(0));
  softmax(0, corr);
  toP();
  // Tile j: S_j and P_{j-1} V_{j-1} in flight; softmax of S_j while P V runs. O is rescaled for
  // tile j-1's max while S_j runs, before P_{j-1} V_{j-1} is issued (FlashAttention-3's order):
  // after the P V wait only the conversion of S_j to P remains.
  auto rescaleO = [&]() {
#pragma unroll
    for (int c = 0; c < 16; ++c)
#pragma unroll
      for (int h = 0; h < 2; ++h) o[4 * c + 2 * h] *= corr[h], o[4 * c + 2 * h + 1] *= corr[h];
  };
  for (int j = 1; j < tiles; ++j) {
    const int st = j % kStages, pst = (j - 1) % kStages;
    mbarWait(b.kFull(st), (j / kStages) & 1);
    mbarWait(b.vFull(pst), ((j - 1) / kStages) & 1);
    if (kPingPong) namedBarSync(turn);
    wgFence();
    issueS(sK + st * kTileBytes);
    rescaleO();
    wgFence();
    issuePV(sV + pst * kTileBytes);
    if (kPingPong) namedBarArrive(other);
    wgWait<1>();
#pragma unroll
    for (int i = 0; i < 64; ++i) pin(s[i]);
    release(b.kEmpty(st));
    softmax(j, corr);
    waitPV();
#pragma unroll
    for (int i = 0; i < 64; ++i) pin(o[i]);
#pragma unroll
    for (int i = 0; i < 32; ++i) pin(p[i]);
    release(b.vEmpty(pst));
    toP();
  }
  // The last tile's P V.
  {
    const int lst = (tiles - 1) % kStages;
    mbarWait(b.vFull(lst), ((tiles - 1) / kStages) & 1);
    if (kPingPong) namedBarSync(turn);
    rescaleO();
    wgFence();
    issuePV(sV + lst * kTileBytes);
    if (kPingPong && cw == 0) namedBarArrive(other);  // warpgroup 1's last turn has no taker
    wgWait<0>();
#pragma unroll
    for (int i = 0; i < 64; ++i) pin(o[i]);
#pragma unroll
    for (int i = 0; i < 32; ++i) pin(p[i]);
    release(b.vEmpty(lst));
  }
  // O / l -> bf16, the thread's two rows (4-byte stores: a quad writes 16 contiguous bytes).
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float sum = l[h];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    if (rowTok[h] >= n) continue;
    const float inv = 1.f / sum;
    __nv_bfloat16* dst = out + (static_cast<int64_t>(rowTok[h]) * hq + rowHead[h]) * kD + 2 * tq;
#pragma unroll
    for (int c = 0; c < 16; ++c)
      *reinterpret_cast<uint32_t*>(dst + 8 * c) = packBf16(o[4 * c + 2 * h] * inv, o[4 * c + 2 * h + 1] * inv);
  }
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

// ---- host ----

// The driver's cuTensorMapEncodeTiled (the runtime does not wrap it; libcudart finds it in the
// loaded driver), resolved once per process; null when the driver lacks it.
PFN_cuTensorMapEncodeTiled_v12000 encodeFn() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    const cudaError_t e =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found);
#else
    const cudaError_t e = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &f, cudaEnableDefault, &found);
#endif
    if (e != cudaSuccess || found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      f = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// A bf16 tensor [d2][d1][128] (row strides s1, s2 bytes) as a 3-d map with boxes of 64 x b1 x b2
// elements, 128-byte swizzle; elements out of range read as zeros.
bool encode3d(CUtensorMap* map, const void* base, uint64_t d1, uint64_t d2, uint64_t s1, uint64_t s2, uint32_t b1,
              uint32_t b2) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = encodeFn();
  if (!encode) return false;
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(kD), d1, d2};
  const cuuint64_t strides[2] = {s1, s2};
  const cuuint32_t box[3] = {64, b1, b2};
  const cuuint32_t elem[3] = {1, 1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void*>(base), dims, strides, box, elem,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace

bool attentionPrefillFa3Supported(int D, int hq, int hk, int device) {
  if (!QWEN_FA3_SM90A || D != kD || hk <= 0 || hq % hk != 0 || hq / hk > kRows) return false;
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return major == 9 && minor == 0;
}

bool prepareAttentionPrefillFa3() {
  if (!QWEN_FA3_SM90A || !encodeFn()) return false;
  return cudaFuncSetAttribute(attnPrefillFa3Kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes) ==
             cudaSuccess &&
         cudaFuncSetAttribute(attnPrefillFa3Kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes) ==
             cudaSuccess;
}

bool attentionPrefillFa3Variant(Fa3Variant v, const __nv_bfloat16* q, const __nv_bfloat16* kCache,
                                const __nv_bfloat16* vCache, const int32_t* pos, int n, int hq, int hk, int D, int ctx,
                                __nv_bfloat16* out, cudaStream_t s) {
  if (n <= 0) return true;
  if (D != kD || hk <= 0 || hq % hk != 0 || hq / hk > kRows || ctx < 1) return false;
  const int G = hq / hk, tokPerTile = kRows / G, numTiles = (n + tokPerTile - 1) / tokPerTile;
  const uint64_t row = kD * 2;
  CUtensorMap tmQ, tmK, tmV;
  if (!encode3d(&tmQ, q, hq, n, row, row * hq, G, tokPerTile) ||
      !encode3d(&tmK, kCache, hk, ctx, row, row * hk, 1, kKeys) ||
      !encode3d(&tmV, vCache, hk, ctx, row, row * hk, 1, kKeys))
    return false;
  const float scaleLog2 = 1.4426950408889634f / sqrtf(static_cast<float>(kD));
  const dim3 grid(numTiles * hk), block(kThreads);
  if (v == Fa3Variant::kNoPingPong)
    launchSmem(attnPrefillFa3Kernel<false>, grid, block, kSmemBytes, s, tmQ, tmK, tmV, pos, n, hq, hk, G, tokPerTile,
               numTiles, scaleLog2, out);
  else
    launchSmem(attnPrefillFa3Kernel<true>, grid, block, kSmemBytes, s, tmQ, tmK, tmV, pos, n, hq, hk, G, tokPerTile,
               numTiles, scaleLog2, out);
  return true;
}

bool attentionPrefillFa3(const __nv_bfloat16* q, const __nv_bfloat16* kCache, const __nv_bfloat16* vCache,
                         const int32_t* pos, int n, int hq, int hk, int D, int ctx, __nv_bfloat16* out,
                         cudaStream_t s) {
  return attentionPrefillFa3Variant(Fa3Variant::kDefault, q, kCache, vCache, pos, n, hq, hk, D, ctx, out, s);
}

}  // namespace gpu
}  // namespace qwen
