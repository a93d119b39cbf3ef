// attention_decode_tc.cu: flash-decoding (split-KV) GQA attention on the tensor cores for calls
// of 1..16 tokens at head_dim 128. One CTA of 4 warps per (token, chunk, KV head): the group's G
// query heads are the rows of m16n8k16 MMAs (padded to 16), and K/V tiles of 64 cache slots
// stream through a 3-stage cp.async ring in shared memory (the first stages prefetched into L2
// before the PDL wait). Per tile, S = Q K^T and O += P V run on the tensor cores (fp32
// accumulation) and the online softmax runs once, in exp2 with log2(e) / sqrt(D) folded into one
// FFMA. Warp w owns slots 16w..16w+15 of every tile and keeps its own (m, l, O); the CTA merges
// its 4 warps in shared memory, in warp order. A query of len slots is cut into
// ceil(len / decodeTcChunk(len)) chunks, a function of len only (so a verify call gives each
// query the bits of a one-token decode). A CTA writes its chunk's partial (m, l, O) and takes a
// ticket; the last CTA of a (token, KV head) merges the partials in chunk order and writes the
// output (one chunk: the CTA writes it directly). No second kernel.
// Memory: K and V of slots 0..pos+t read once per (token, KV head) (the tokens of a verify call
// are adjacent in the grid, so L2 serves the repeats), G x (D + 2) floats of partial per chunk.
// With an L2Ahead plan, before the PDL wait every CTA also asks L2 for its share of the next
// product's weights (kernels/l2_ahead.h): requests only, nothing written, no bits changed.
#include <algorithm>
#include <cstdint>

#include "kernels/attention_decode_tc.cuh"
#include "kernels/common.cuh"
#include "kernels/smem_mma.cuh"

namespace qwen {
namespace gpu {
namespace {

constexpr int D = kDecodeTcHeadDim;
constexpr int kKeys = 64;              // cache slots per tile (16 per warp)
constexpr int kStages = 3;             // tiles in flight per CTA
constexpr int kWarps = 4;
constexpr int SD = D + 8;              // shared row stride (elements): ldmatrix rows hit distinct banks
constexpr int kRingBytes = kStages * 2 * kKeys * SD * 2;  // 104448: two CTAs fit an SM
constexpr int SO = D + 8;              // row stride (floats) of the warps' O in the merge

// grid (n, maxSplits, hk), block 128, kRingBytes of dynamic shared memory. G query heads per KV
// head; rows g + 8 of the MMAs carry heads only when G > 8.
// One warp: a head row src[0, D) of the qkv projection -> per-head RMSNorm (weight nw; lane l
// sums the squares of dims l, l + 32, l + 64, l + 96 in that order, then the butterfly), rounded
// to bf16 as Hugging Face does, then rotate-half rotary at position p (dims d and d + 64 paired)
// -> lane l's rotated pairs: r[k] = (dim l + 32k, dim l + 32k + 64), k < 2. qkNormRopeStore's
// math up to the order of the sum of squares; every product and sum is an _rn intrinsic (nothing
// left to contraction), so every CTA that computes a row gets the same bits.
__device__ __forceinline__ void normRopeHead(const __nv_bfloat16* src, const __nv_bfloat16* nw, float eps, float theta,
                                             int p, __nv_bfloat162 (&r)[2]) {
  const int lane = threadIdx.x & 31;
  float x[4], ss = 0.f;
#pragma unroll
  for (int k = 0; k < 4; ++k) x[k] = __bfloat162float(src[lane + 32 * k]), ss = __fmaf_rn(x[k], x[k], ss);
  const float inv = rsqrtf(__fadd_rn(__fmul_rn(warpSum(ss), 1.f / D), eps));
#pragma unroll
  for (int k = 0; k < 4; ++k)
    x[k] = __bfloat162float(__float2bfloat16_rn(__fmul_rn(__bfloat162float(nw[lane + 32 * k]), __fmul_rn(x[k], inv))));
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const int d = lane + 32 * k;
    const float invFreq = 1.0f / powf(theta, static_cast<float>(2 * d) / static_cast<float>(D));
    float sn, cs;
    sincosf(static_cast<float>(p) * invFreq, &sn, &cs);
    r[k] = __halves2bfloat162(__float2bfloat16_rn(__fsub_rn(__fmul_rn(x[k], cs), __fmul_rn(x[k + 2], sn))),
                              __float2bfloat16_rn(__fadd_rn(__fmul_rn(x[k + 2], cs), __fmul_rn(x[k], sn))));
  }
}

// A head row held as normRopeHead leaves it (lane l: dims l + 32k and l + 32k + 64) -> dst[0, D).
__device__ __forceinline__ void storeRotated(const __nv_bfloat162 (&r)[2], __nv_bfloat16* dst) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int k = 0; k < 2; ++k) dst[lane + 32 * k] = r[k].x, dst[lane + 32 * k + D / 2] = r[k].y;
}

// A V head row, lane l's dims l + 32k (k < 4) as two pairs: load from src, store to dst.
__device__ __forceinline__ void loadVRow(const __nv_bfloat16* src, __nv_bfloat162 (&v)[2]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int h = 0; h < 2; ++h) v[h] = __halves2bfloat162(src[lane + 64 * h], src[lane + 64 * h + 32]);
}
__device__ __forceinline__ void storeVRow(const __nv_bfloat162 (&v)[2], __nv_bfloat16* dst) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int h = 0; h < 2; ++h) dst[lane + 64 * h] = v[h].x, dst[lane + 64 * h + 32] = v[h].y;
}

// grid (n, maxSplits, hk), block 128, kRingBytes of dynamic shared memory. G query heads per KV
// head; rows g + 8 of the MMAs carry heads only when G > 8. kRope (n <= kDecodeTcMaxTokens): q
// comes from rope.qkv (normed and rotated here); the K/V rows of the call's own slots
// (pos..pos+t) in the CTA's chunk are made from rope.qkv while the first tiles load, held in
// registers (at most n of them, kOwn a warp) and written over the stale cache rows of their tile
// once it is in; the CTA holding slot pos + t stores that slot into the cache as soon as it is made.
template <int G, bool kRope>
__global__ void __launch_bounds__(kWarps * 32, 2)
    attnDecodeTcKernel(const __nv_bfloat16* q, __nv_bfloat16* kCache, __nv_bfloat16* vCache, const int32_t* pos, int hq,
                       int hk, int maxSplits, float scaleLog2, float* part, int* tickets, __nv_bfloat16* out,
                       DecodeRope rope, L2Ahead ahead) {
  constexpr bool kHi = G > 8;
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ __align__(16) __nv_bfloat16 shQ[kRope ? G : 1][D];  // kRope: the normed, rotated q
  __nv_bfloat16* Ks = reinterpret_cast<__nv_bfloat16*>(smem);  // [kStages][kKeys][SD]
  __nv_bfloat16* Vs = Ks + kStages * kKeys * SD;                // [kStages][kKeys][SD]
  pdlLaunch();
  const int t = blockIdx.x, sp = blockIdx.y, kvh = blockIdx.z;
  const int p0 = *pos, len = p0 + t + 1;  // slots 0..pos+t
  const int chunk = decodeTcChunk(len, maxSplits), active = (len + chunk - 1) / chunk;
  const int s0 = sp * chunk, s1 = min(s0 + chunk, len), tiles = (s1 - s0 + kKeys - 1) / kKeys;
  const int64_t rowStride = static_cast<int64_t>(hk) * D;
  const __nv_bfloat16* kHead = kCache + static_cast<int64_t>(kvh) * D;
  const __nv_bfloat16* vHead = vCache + static_cast<int64_t>(kvh) * D;
  // The first stages' rows into L2 while the previous kernel finishes (two 128-byte lines a row).
  if (sp < active)
    for (int i = threadIdx.x; i < 2 * (min(s1, s0 + kStages * kKeys) - s0); i += kWarps * 32) {
      const int64_t off = (s0 + i / 2) * rowStride + (i & 1) * 64;
      prefetchL2(kHead + off);
      prefetchL2(vHead + off);
    }
  // Then a prefix of every row of the next product's weights (kernels/l2_ahead.h), spread over
  // every CTA of the grid, idle ones too: row r from CTA r % ctas. The call's longest query
  // decides whether, so every CTA agrees.
  if (ahead.base && p0 + static_cast<int>(gridDim.x) <= ahead.maxLen) {
    const int ctas = gridDim.x * gridDim.y * gridDim.z;
    const int cta = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    for (int r = cta + ctas * threadIdx.x; r < ahead.rows; r += ctas * blockDim.x)
      prefetchL2Bulk(static_cast<const char*>(ahead.base) + r * ahead.rowBytes, ahead.bytesPerRow);
  }
  if (sp >= active) return;
  pdlWait();

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, tig = lane & 3;
  const int li = lane >> 3, lr = lane & 7;  // ldmatrix: matrix index, row within it
  // Tile `it` of the chunk into ring slot it % kStages; every call commits one group.
  auto loadTile = [&](int it) {
    if (it < tiles) {
      const int base = s0 + it * kKeys, buf = it % kStages;
      for (int c = threadIdx.x; c < kKeys * (D / 8); c += kWarps * 32) {
        const int r = c / (D / 8), col = (c % (D / 8)) * 8, s = base + r;
        const bool valid = s < s1;  // rows past the chunk: zeros (V must not hold NaN garbage)
        const int64_t off = (valid ? s : s0) * rowStride + col;
        const int so = (buf * kKeys + r) * SD + col;
        cpAsync16(smemAddr(Ks + so), kHead + off, valid);
        cpAsync16(smemAddr(Vs + so), vHead + off, valid);
      }
    }
    cpAsyncCommit();
  };

#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) loadTile(i);  // in flight while Q loads
  const int64_t qkvRow = static_cast<int64_t>(hq + 2 * hk) * D;  // kRope: rope.qkv's row length
  // kRope: own slot own0 + warp + i kWarps (i < kOwn) of the chunk, while below s1, in ownK[i] and
  // ownV[i]; the chunk holds at most t + 1 <= kDecodeTcMaxTokens of them.
  constexpr int kOwn = kRope ? kDecodeTcMaxTokens / kWarps : 1;
  __nv_bfloat162 ownK[kOwn][2], ownV[kOwn][2];
  const int own0 = max(s0, p0);
  if (kRope) {
    for (int r = warp; r < G; r += kWarps) {
      __nv_bfloat162 qr[2];
      normRopeHead(rope.qkv + t * qkvRow + (kvh * G + r) * D, rope.qNorm, rope.eps, rope.theta, p0 + rope.ropeOffset + t,
                   qr);
      storeRotated(qr, shQ[r]);
    }
#pragma unroll
    for (int i = 0; i < kOwn; ++i) {
      const int s = own0 + warp + i * kWarps;
      if (s >= s1) continue;
      const int j = s - p0;  // the call's token that owns slot s
      const __nv_bfloat16* row = rope.qkv + j * qkvRow;
      normRopeHead(row + (hq + kvh) * D, rope.kNorm, rope.eps, rope.theta, p0 + rope.ropeOffset + j, ownK[i]);
      loadVRow(row + (hq + hk + kvh) * D, ownV[i]);
      if (s == p0 + t) {  // one CTA per (token, KV head) holds it: the cache row, written once
        const int64_t cacheOff = s * rowStride + static_cast<int64_t>(kvh) * D;
        storeRotated(ownK[i], kCache + cacheOff);
        storeVRow(ownV[i], vCache + cacheOff);
      }
    }
    __syncthreads();
  }
  // Q as A fragments (row r = query head kvh G + r of token t; rows >= G are zero).
  uint32_t qa[D / 16][4];
  {
    const __nv_bfloat16* qt = kRope ? &shQ[0][0] : q + (static_cast<int64_t>(t) * hq + kvh * G) * D;
    auto ld = [&](int r, int c) { return r < G ? *reinterpret_cast<const uint32_t*>(qt + r * D + c) : 0u; };
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const int c = kk * 16 + 2 * tig;
      qa[kk][0] = ld(g, c), qa[kk][1] = kHi ? ld(g + 8, c) : 0u;
      qa[kk][2] = ld(g, c + 8), qa[kk][3] = kHi ? ld(g + 8, c + 8) : 0u;
    }
  }
  float o[D / 8][4];
#pragma unroll
  for (int j = 0; j < D / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // rows g, g + 8 (scaled by scaleLog2)

  for (int it = 0; it < tiles; ++it) {
    cpAsyncWait<kStages - 2>();
    __syncthreads();  // tile it is in; every warp is done with tile it - 1, whose slot refills now
    const int buf = it % kStages, base = s0 + it * kKeys, kb = base + warp * 16;  // kb: the warp's first slot
    if (kRope && base + kKeys > p0) {
      // Slots p0.. are this call's: the tile holds stale cache rows there; the rows made above
      // replace them (each by the warp that made it).
#pragma unroll
      for (int i = 0; i < kOwn; ++i) {
        const int s = own0 + warp + i * kWarps;
        if (s < base || s >= min(base + kKeys, s1)) continue;
        storeRotated(ownK[i], Ks + (buf * kKeys + s - base) * SD);
        storeVRow(ownV[i], Vs + (buf * kKeys + s - base) * SD);
      }
      __syncthreads();
    }
    loadTile(it + kStages - 1);
    const __nv_bfloat16* Kw = Ks + (buf * kKeys + warp * 16) * SD;
    const __nv_bfloat16* Vw = Vs + (buf * kKeys + warp * 16) * SD;
    // S = Q K^T: 16 rows x the warp's 16 slots (two 8-slot tiles).
    float sc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t b[4];
      ldsm4(b, smemAddr(Kw + ((li >> 1) * 8 + lr) * SD + kk * 16 + (li & 1) * 8));
      mmaBf16(sc[0], qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3], b[0], b[1]);
      mmaBf16(sc[1], qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3], b[2], b[3]);
    }
    // Online softmax, base 2. A row's 16 scores sit on the 4 lanes of a quad.
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (kb + j * 8 + 2 * tig + (e & 1) >= s1) sc[j][e] = -INFINITY;  // past the chunk
        mx[e >> 1] = fmaxf(mx[e >> 1], sc[j][e]);
      }
    float corr[2] = {1.f, 1.f}, rs[2] = {0.f, 0.f};
#pragma unroll
    for (int r = 0; r < (kHi ? 2 : 1); ++r) {  // rows g + 8 hold no head when G <= 8
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      const float mNew = fmaxf(m[r], mx[r] * scaleLog2);
      const float mUse = mNew == -INFINITY ? 0.f : mNew;  // no slot of this warp yet: nothing to scale
      corr[r] = fastExp2(m[r] - mUse);
      m[r] = mNew;
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int e = 2 * r; e < 2 * r + 2; ++e) {
          sc[j][e] = fastExp2(fmaf(sc[j][e], scaleLog2, -mUse));
          rs[r] += sc[j][e];
        }
      l[r] = l[r] * corr[r] + rs[r];
    }
#pragma unroll
    for (int j = 0; j < D / 8; ++j) o[j][0] *= corr[0], o[j][1] *= corr[0], o[j][2] *= corr[1], o[j][3] *= corr[1];
    // O += P V: P's A fragments are the two slot tiles' accumulators, in bf16.
    const uint32_t pa0 = packBf16(sc[0][0], sc[0][1]), pa1 = kHi ? packBf16(sc[0][2], sc[0][3]) : 0u;
    const uint32_t pa2 = packBf16(sc[1][0], sc[1][1]), pa3 = kHi ? packBf16(sc[1][2], sc[1][3]) : 0u;
#pragma unroll
    for (int j = 0; j < D / 8; j += 2) {
      uint32_t b[4];
      ldsm4T(b, smemAddr(Vw + ((li & 1) * 8 + lr) * SD + j * 8 + (li >> 1) * 8));
      mmaBf16(o[j], pa0, pa1, pa2, pa3, b[0], b[1]);
      mmaBf16(o[j + 1], pa0, pa1, pa2, pa3, b[2], b[3]);
    }
  }
  cpAsyncWait<0>();
  __syncthreads();  // the ring is free: it holds the warps' (m, l, O) from here

  // The CTA's partial: the 4 warps merged in warp order.
  float* shO = reinterpret_cast<float*>(smem);  // [kWarps][16][SO]
  float* shM = shO + kWarps * 16 * SO;          // [kWarps][16]
  float* shL = shM + kWarps * 16;               // [kWarps][16]
#pragma unroll
  for (int r = 0; r < (kHi ? 2 : 1); ++r) {
    float lq = l[r];
    lq += __shfl_xor_sync(0xffffffffu, lq, 1);
    lq += __shfl_xor_sync(0xffffffffu, lq, 2);
    const int row = warp * 16 + g + 8 * r;
    if (tig == 0) shM[row] = m[r], shL[row] = lq;
#pragma unroll
    for (int j = 0; j < D / 8; ++j)
      *reinterpret_cast<float2*>(shO + row * SO + j * 8 + 2 * tig) = make_float2(o[j][2 * r], o[j][2 * r + 1]);
  }
  __syncthreads();
  const int64_t group = static_cast<int64_t>(t) * hk + kvh;  // (token, KV head)
  float* mine = part + (group * maxSplits + sp) * G * (D + 2);  // [G][D + 2]: m, l, O
  for (int i = threadIdx.x; i < G * D; i += kWarps * 32) {
    const int r = i / D, d = i % D;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, shM[w * 16 + r]);  // finite: warp 0 has slot s0
    float acc = 0.f, L = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float wt = shM[w * 16 + r] == -INFINITY ? 0.f : fastExp2(shM[w * 16 + r] - M);
      acc += shO[(w * 16 + r) * SO + d] * wt;
      L += shL[w * 16 + r] * wt;
    }
    if (active == 1) {
      out[(static_cast<int64_t>(t) * hq + kvh * G + r) * D + d] = __float2bfloat16_rn(acc / L);
    } else {
      mine[r * (D + 2) + 2 + d] = acc;
      if (d == 0) mine[r * (D + 2)] = M, mine[r * (D + 2) + 1] = L;
    }
  }
  if (active == 1) return;

  // Ticket: the last CTA of the group to get here merges (threadFenceReduction's pattern: each
  // thread's partial stores are fenced before the ticket, the merger fences before reading).
  __shared__ int shLast;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) shLast = atomicAdd(tickets + group, 1) == active - 1;
  __syncthreads();
  if (!shLast) return;
  __threadfence();
  const float* all = part + group * maxSplits * G * (D + 2);  // [maxSplits][G][D + 2]
  float* shW = reinterpret_cast<float*>(smem);               // [active][G]: chunk weights
  float* shSum = shW + maxSplits * G;                        // [G]: 1 / sum of l weighted
  for (int i = threadIdx.x; i < active * G; i += kWarps * 32) shW[i] = __ldcg(all + i * (D + 2));  // m
  __syncthreads();
  if (threadIdx.x < G) {  // per row: the max, then each chunk's weight and the weighted l, in chunk order
    const int r = threadIdx.x;
    float M = -INFINITY;
    for (int c = 0; c < active; ++c) M = fmaxf(M, shW[c * G + r]);
    float L = 0.f;
    for (int c = 0; c < active; ++c) {
      const float wt = fastExp2(shW[c * G + r] - M);
      shW[c * G + r] = wt;
      L += __ldcg(all + (c * G + r) * (D + 2) + 1) * wt;
    }
    shSum[r] = 1.f / L;
  }
  __syncthreads();
  // G outputs a thread (G x D over 128 threads), summed over the chunks in chunk order as before;
  // the chunk loop outside, so each chunk's G loads are in flight together and no store sits
  // between them (a store per output between the loads cost one L2 round trip an output).
  static_assert(G * D % (kWarps * 32) == 0, "G x D splits evenly over the CTA");
  constexpr int kPer = G * D / (kWarps * 32);
  float acc[kPer];
#pragma unroll
  for (int k = 0; k < kPer; ++k) acc[k] = 0.f;
  for (int c = 0; c < active; ++c) {
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const int i = threadIdx.x + k * kWarps * 32, r = i / D, d = i % D;
      acc[k] += __ldcg(all + (c * G + r) * (D + 2) + 2 + d) * shW[c * G + r];
    }
  }
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int i = threadIdx.x + k * kWarps * 32, r = i / D, d = i % D;
    out[(static_cast<int64_t>(t) * hq + kvh * G + r) * D + d] = __float2bfloat16_rn(acc[k] * shSum[r]);
  }
  if (threadIdx.x == 0) tickets[group] = 0;  // ready for the next call
}

template <int G>
cudaError_t allowRing() {
  const cudaError_t a =
      cudaFuncSetAttribute(attnDecodeTcKernel<G, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, kRingBytes);
  const cudaError_t b =
      cudaFuncSetAttribute(attnDecodeTcKernel<G, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, kRingBytes);
  return a != cudaSuccess ? a : b;
}

template <int G>
void launchG(const __nv_bfloat16* q, __nv_bfloat16* kCache, __nv_bfloat16* vCache, const int32_t* pos, int n, int hq,
             int hk, int maxSplits, float* part, int* tickets, __nv_bfloat16* out, const DecodeRope* rope,
             const L2Ahead& ahead, cudaStream_t s) {
  // The shared memory limit was raised by prepareAttentionDecodeTc() on this device.
  const float scaleLog2 = 1.4426950408889634f / sqrtf(static_cast<float>(D));
  const dim3 grid(n, maxSplits, hk), block(kWarps * 32);
  if (rope)
    launchSmem(attnDecodeTcKernel<G, true>, grid, block, kRingBytes, s, q, kCache, vCache, pos, hq, hk, maxSplits,
               scaleLog2, part, tickets, out, *rope, ahead);
  else
    launchSmem(attnDecodeTcKernel<G, false>, grid, block, kRingBytes, s, q, kCache, vCache, pos, hq, hk, maxSplits,
               scaleLog2, part, tickets, out, DecodeRope{}, ahead);
}

void launchAny(const __nv_bfloat16* q, __nv_bfloat16* kCache, __nv_bfloat16* vCache, const int32_t* pos, int n, int hq,
               int hk, int maxSplits, float* part, int* tickets, __nv_bfloat16* out, const DecodeRope* rope,
               const L2Ahead& ahead, cudaStream_t s) {
  if (n <= 0) return;
  switch (hq / hk) {
    case 1: launchG<1>(q, kCache, vCache, pos, n, hq, hk, maxSplits, part, tickets, out, rope, ahead, s); break;
    case 2: launchG<2>(q, kCache, vCache, pos, n, hq, hk, maxSplits, part, tickets, out, rope, ahead, s); break;
    case 4: launchG<4>(q, kCache, vCache, pos, n, hq, hk, maxSplits, part, tickets, out, rope, ahead, s); break;
    case 8: launchG<8>(q, kCache, vCache, pos, n, hq, hk, maxSplits, part, tickets, out, rope, ahead, s); break;
    case 16: launchG<16>(q, kCache, vCache, pos, n, hq, hk, maxSplits, part, tickets, out, rope, ahead, s); break;
    default: break;  // attentionDecodeTcSupported said no
  }
}

}  // namespace

bool attentionDecodeTcSupported(int hq, int hk, int D_) {
  if (D_ != D || hk <= 0 || hq % hk != 0) return false;
  const int G = hq / hk;
  return G == 1 || G == 2 || G == 4 || G == 8 || G == 16;
}

bool prepareAttentionDecodeTc() {
  const cudaError_t e[] = {allowRing<1>(), allowRing<2>(), allowRing<4>(), allowRing<8>(), allowRing<16>()};
  for (cudaError_t x : e)
    if (x != cudaSuccess) return false;
  return true;
}

int decodeTcMaxSplits(int device, int hk) {
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms <= 0) sms = 132;
  return std::max(1, std::min(128, (2 * sms + hk - 1) / hk));
}

size_t decodeTcPartialFloats(int n, int hq, int maxSplits) {
  return static_cast<size_t>(n) * hq * maxSplits * (D + 2);
}
size_t decodeTcTickets(int n, int hk) { return static_cast<size_t>(n) * hk; }

void attentionDecodeTc(const __nv_bfloat16* q, const __nv_bfloat16* kCache, const __nv_bfloat16* vCache,
                       const int32_t* pos, int n, int hq, int hk, int maxSplits, float* part, int* tickets,
                       __nv_bfloat16* out, cudaStream_t s, const L2Ahead& ahead) {
  // Without rope the kernel never writes the cache.
  launchAny(q, const_cast<__nv_bfloat16*>(kCache), const_cast<__nv_bfloat16*>(vCache), pos, n, hq, hk, maxSplits, part,
            tickets, out, nullptr, ahead, s);
}

bool attentionDecodeTcRope(const DecodeRope& rope, __nv_bfloat16* kCache, __nv_bfloat16* vCache, const int32_t* pos,
                           int n, int hq, int hk, int maxSplits, float* part, int* tickets, __nv_bfloat16* out,
                           cudaStream_t s, const L2Ahead& ahead) {
  if (n < 1 || n > kDecodeTcMaxTokens || !attentionDecodeTcSupported(hq, hk, D)) return false;
  launchAny(nullptr, kCache, vCache, pos, n, hq, hk, maxSplits, part, tickets, out, &rope, ahead, s);
  return true;
}

}  // namespace gpu
}  // namespace qwen
