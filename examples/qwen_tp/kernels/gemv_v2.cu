// gemv_v2.cu: the small-n GEMV ("v2"; gemv.cuh) as a persistent pipeline fed by the copy engine.
// A tile is 16 rows of W (kSwiglu: 8 gate rows and their 8 up rows) times all of `in`; tiles go
// to the blocks round robin (tile b, b + grid, ...), the grid sized so that every block gets the
// same number of tiles, give or take one, and at most one block per SM (the ring below takes most
// of its shared memory). A block's work is a sequence of stages, one per (tile, 512 columns):
// the 16 W rows' 1 KB pieces, the n tokens' X pieces and (normed products) the norm weight's
// piece, each one cp.async.bulk into a ring of `stages` slots, completing on the slot's "full"
// mbarrier (tx bytes). Warp 8 is the producer: it arms a slot and issues its copies (a lane a
// row) once the 8 consumer warps have released it (one arrive each on the slot's "empty" mbarrier).
// W and the norm weight are constant, so the first `stages` slots' W copies go out before the
// PDL wait (they stream while the previous kernel finishes); X only after it.
// Consumers: in every stage warp w takes the 32-column units w and w + 8 (lane g, c: 16 bytes at
// column 8 c of W rows g and g + 8 and of X row g, as gemv.cu's v1; rows padded to 1088 bytes so
// that the two rows of a quarter warp fall in different banks) and accumulates m16n8k16 MMAs
// (tokens 8..15 in a second tile of 8 columns). At a tile's end the 8 warps' sums are added in
// warp order by warp 0, which stores them (gemv_parts.cuh's epilogues); the others go on.
// Every sum's order is a function of `in` only: not of n, the grid, the ring depth or the run.
#include <algorithm>
#include <atomic>
#include <cstdint>

#include "kernels/common.cuh"
#include "kernels/gemv.cuh"
#include "kernels/gemv_parts.cuh"
#include "kernels/gemv_v2.cuh"

namespace qwen {
namespace gpu {
namespace {

constexpr int kCols = 512;                       // columns of a stage (fixes the sums' order)
constexpr int kPitchBytes = (kCols + 32) * 2;    // a stage row in shared memory (1088 bytes)
constexpr int kConsumers = 8;                    // consumer warps
constexpr int kThreads = (kConsumers + 1) * 32;  // + the producer warp
constexpr int kMaxStages = 12;
constexpr int kRingBytes = 196 * 1024;  // dynamic shared memory a block may ask for

struct V2Args {
  const __nv_bfloat16* W;
  const __nv_bfloat16* X;
  const __nv_bfloat16* normW;  // normed products: the RMSNorm weight [in]
  void* Y;
  int out, in, n, tiles, stages;
  uint32_t stageBytes, normOff;  // a slot's bytes; the norm weight's offset in it
  float eps;
};

__device__ __forceinline__ uint32_t smemU32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbarInit(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbarArmTx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbarArrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// Until the phase of parity `parity` of the barrier has completed.
__device__ __forceinline__ void mbarWait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done)
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                 : "=r"(done)
                 : "r"(bar), "r"(parity)
                 : "memory");
}
// bytes (a multiple of 16, both addresses 16-byte aligned) global -> shared by the copy engine,
// completing as tx bytes on `bar`. kStream: W, read once: evict first from L2.
template <bool kStream>
__device__ __forceinline__ void bulkCopy(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar, uint64_t policy) {
  if (kStream)
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::
            "r"(dst),
        "l"(src), "r"(bytes), "r"(bar), "l"(policy)
        : "memory");
  else
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}
__device__ __forceinline__ void consumersSync() { asm volatile("bar.sync 1, %0;" ::"n"(kConsumers * 32) : "memory"); }

template <bool kF32, bool kNorm, int kEpi, int kNT>
__global__ void __launch_bounds__(kThreads, 1) gemvV2Kernel(V2Args a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) unsigned char ring[];
  __shared__ __align__(8) uint64_t full[kMaxStages], empty[kMaxStages];
  __shared__ float part[2][kConsumers][32][4 * kNT];  // a tile's per-warp sums, by tile parity
  __shared__ float shInv[kGemvFusedMaxTokens];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int S = a.stages, in = a.in, n = a.n;
  const int nk = (in + kCols - 1) / kCols;  // stages per tile
  const int myTiles = static_cast<int>(blockIdx.x) < a.tiles ? (a.tiles - 1 - blockIdx.x) / gridDim.x + 1 : 0;
  const int total = myTiles * nk;
  const uint32_t ring0 = smemU32(ring);
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      mbarInit(smemU32(&full[s]), 1);
      mbarInit(smemU32(&empty[s]), kConsumers);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();
  pdlLaunch();

  if (warp == kConsumers) {
    // ---- producer: lane r < 16 copies W row r of the tile, lane 16 + t token t's X row, lane 0
    // also the norm weight; slot row = lane for both (the copies of one instruction issue lane
    // after lane, their addresses computed by all lanes at once) ----
    uint64_t policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    const bool wLane = lane < 16, xLane = lane >= 16 && lane - 16 < n;
    // Stage i: arm its full barrier and copy W (and the norm weight) when w; X when x.
    auto issue = [&](int i, bool w, bool x) {
      const int tile = blockIdx.x + (i / nk) * gridDim.x, k0 = (i % nk) * kCols;
      const uint32_t bytes = static_cast<uint32_t>(min(kCols, in - k0)) * 2u;
      const uint32_t slot = ring0 + (i % S) * a.stageBytes, bar = smemU32(&full[i % S]);
      if (w && lane == 0) mbarArmTx(bar, bytes * (16 + n + (kNorm ? 1 : 0)));
      __syncwarp();
      if (w && wLane) {
        // Rows past the end read the last valid row; their sums are never stored.
        const int row = kEpi == kSwiglu
                            ? (lane < 8 ? min(tile * 8 + lane, a.out - 1) : a.out + min(tile * 8 + lane - 8, a.out - 1))
                            : min(tile * 16 + lane, a.out - 1);
        bulkCopy<true>(slot + lane * kPitchBytes, a.W + static_cast<int64_t>(row) * in + k0, bytes, bar, policy);
      }
      if (kNorm && w && lane == 0) bulkCopy<false>(slot + a.normOff, a.normW + k0, bytes, bar, policy);
      if (x && xLane)
        bulkCopy<false>(slot + lane * kPitchBytes, a.X + static_cast<int64_t>(lane - 16) * in + k0, bytes, bar, policy);
    };
    const int pre = min(S, total);
    for (int i = 0; i < pre; ++i) issue(i, true, false);  // W is constant: before the PDL wait
    pdlWait();
    for (int i = 0; i < pre; ++i) issue(i, false, true);
    for (int i = pre; i < total; ++i) {
      mbarWait(smemU32(&empty[i % S]), ((i / S) - 1) & 1);  // its previous use released
      issue(i, true, true);
    }
    return;
  }

  // ---- consumers ----
  pdlWait();
  const int g = lane >> 2, c = lane & 3;
  float inv[kNT];
#pragma unroll
  for (int j = 0; j < kNT; ++j) inv[j] = 1.f;
  if (kNorm) {
    // Token t's 1 / rms by warp t % 8, gemv.cu's order: lane l adds the chunk sums l, l + 32, ...
    // in order, then the butterfly.
    const int chunks = in / 8;
    for (int t = warp; t < n; t += kConsumers) {
      const uint4* xr = reinterpret_cast<const uint4*>(a.X + static_cast<int64_t>(t) * in);
      float ss = 0.f;
#pragma unroll 4
      for (int ch = lane; ch < chunks; ch += 32) ss = __fadd_rn(ss, sumSq8(__ldg(xr + ch)));
      ss = warpSum(ss);
      if (lane == 0) shInv[t] = invRms(ss, in, a.eps);
    }
    consumersSync();
#pragma unroll
    for (int j = 0; j < kNT; ++j) inv[j] = shInv[min(8 * j + g, n - 1)];
  }
  int xRow[kNT];  // this lane's X row in a slot (tokens past n: the last token, never stored)
#pragma unroll
  for (int j = 0; j < kNT; ++j) xRow[j] = 16 + min(8 * j + g, n - 1);
  int i = 0;  // stage counter
  for (int tl = 0; tl < myTiles; ++tl) {
    const int tile = blockIdx.x + tl * gridDim.x;
    const int rLo = kEpi == kSwiglu ? tile * 8 + g : tile * 16 + g, rHi = kEpi == kSwiglu ? rLo : rLo + 8;
    float res[kNT][4];  // kResidual: warp 0 reads the tile's residual values now, adds at the end
    if (warp == 0)
#pragma unroll
      for (int j = 0; j < kNT; ++j) gemvLoadResidual<kEpi>(rLo, rHi, 8 * j + 2 * c, n, a.out, a.Y, res[j]);
    float d[kNT][4];
#pragma unroll
    for (int j = 0; j < kNT; ++j) d[j][0] = d[j][1] = d[j][2] = d[j][3] = 0.f;
    for (int kc = 0; kc < nk; ++kc, ++i) {
      const int s = i % S;
      mbarWait(smemU32(&full[s]), (i / S) & 1);
      const unsigned char* slot = ring + s * a.stageBytes;
      const int cols = min(kCols, in - kc * kCols);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int k = (warp + h * kConsumers) * 32 + c * 8;  // column in the stage
        if ((warp + h * kConsumers) * 32 >= cols) break;     // the unit is past `in` (warp-uniform)
        uint4 w0 = make_uint4(0u, 0u, 0u, 0u), w1 = w0, x[kNT];
#pragma unroll
        for (int j = 0; j < kNT; ++j) x[j] = w0;
        if (k < cols) {  // columns past `in` (in % 32 != 0) stay 0: stale bytes may be NaN
          w0 = *reinterpret_cast<const uint4*>(slot + g * kPitchBytes + 2 * k);
          w1 = *reinterpret_cast<const uint4*>(slot + (g + 8) * kPitchBytes + 2 * k);
          uint4 nw = w0;
          if (kNorm) nw = *reinterpret_cast<const uint4*>(slot + a.normOff + 2 * k);
#pragma unroll
          for (int j = 0; j < kNT; ++j) {
            x[j] = *reinterpret_cast<const uint4*>(slot + xRow[j] * kPitchBytes + 2 * k);
            if (kNorm) x[j] = normScale8(x[j], nw, inv[j]);
          }
        }
#pragma unroll
        for (int j = 0; j < kNT; ++j) {
          mmaBf16(d[j], w0.x, w1.x, w0.y, w1.y, x[j].x, x[j].y);
          mmaBf16(d[j], w0.z, w1.z, w0.w, w1.w, x[j].z, x[j].w);
        }
      }
      __syncwarp();
      if (lane == 0) mbarArrive(smemU32(&empty[s]));
    }
    // The tile's sums: warp 0 adds the 8 warps' in warp order and stores.
    float* mine = part[tl & 1][warp][lane];
#pragma unroll
    for (int j = 0; j < kNT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) mine[4 * j + e] = d[j][e];
    consumersSync();
    if (warp == 0) {
#pragma unroll
      for (int j = 0; j < kNT; ++j) {
        float sum[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float v = part[tl & 1][0][lane][4 * j + e];
          for (int w = 1; w < kConsumers; ++w) v += part[tl & 1][w][lane][4 * j + e];
          sum[e] = v;
        }
        gemvStoreTile<kEpi, kF32>(sum, res[j], rLo, rHi, 8 * j + 2 * c, n, a.out, a.Y);
      }
    }
  }
#else
  __trap();  // gemvV2Launch runs it on sm_90+ only
#endif
}

template <bool kF32, bool kNorm, int kEpi, int kNT>
cudaError_t allowRing() {
  return cudaFuncSetAttribute(gemvV2Kernel<kF32, kNorm, kEpi, kNT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              kRingBytes);
}

// Devices whose kernels have the raised limit (bit d: device d < 64).
std::atomic<uint64_t> gPrepared{0};
// setGemvV2Limits: bounds on the grid and the ring depth (0: none).
std::atomic<int> gMaxBlocks{0}, gMaxStages{0};

// sm_90+ with room for the ring and the static arrays (not, e.g., sm_120's 99 KB a block).
bool usable(int dev) {
  int major = 0, optin = 0;
  return cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess && major >= 9 &&
         cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) == cudaSuccess &&
         optin >= kRingBytes + static_cast<int>(sizeof(float)) * 2 * kConsumers * 32 * 8 + 1024;
}

}  // namespace

void setGemvV2Limits(int maxBlocks, int maxStages) {
  gMaxBlocks.store(std::max(0, maxBlocks));
  gMaxStages.store(std::max(0, maxStages));
}

bool gemvV2Prepare() {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  if (!usable(dev)) return true;  // nothing to prepare: gemvV2Launch refuses the device
  const cudaError_t e[] = {allowRing<false, false, kStore, 1>(),    allowRing<true, false, kStore, 1>(),
                           allowRing<false, true, kStore, 1>(),     allowRing<false, true, kStore, 2>(),
                           allowRing<false, true, kSwiglu, 1>(),    allowRing<false, true, kSwiglu, 2>(),
                           allowRing<false, false, kResidual, 1>(), allowRing<false, false, kResidual, 2>()};
  for (cudaError_t x : e)
    if (x != cudaSuccess) return false;
  if (dev < 64) gPrepared.fetch_or(uint64_t(1) << dev);
  return true;
}

bool gemvV2Launch(const __nv_bfloat16* W, int out, int in, const __nv_bfloat16* X, int n, void* Y, bool yF32,
                  const __nv_bfloat16* normW, float eps, int epi, cudaStream_t s) {
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || !usable(dev)) return false;
  if ((dev >= 64 || !(gPrepared.load() >> dev & 1)) && !gemvV2Prepare()) return false;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms <= 0) sms = 132;
  const bool norm = normW != nullptr;
  V2Args a;
  a.W = W, a.X = X, a.normW = normW, a.Y = Y, a.out = out, a.in = in, a.n = n, a.eps = eps;
  a.tiles = epi == kSwiglu ? (out + 7) / 8 : (out + 15) / 16;
  // Slot: 16 W rows, n X rows, the norm weight; stages: as many as the ring holds (>= 5).
  a.normOff = static_cast<uint32_t>((16 + n) * kPitchBytes);
  a.stageBytes = (a.normOff + (norm ? kCols * 2 : 0) + 127) / 128 * 128;
  a.stages = std::min<int>(kMaxStages, kRingBytes / a.stageBytes);
  if (gMaxStages.load() > 0) a.stages = std::min(a.stages, gMaxStages.load());
  if (gMaxBlocks.load() > 0) sms = std::min(sms, gMaxBlocks.load());
  // Whole rounds: the fewest blocks (<= one per SM) that take ceil(tiles / SMs) tiles each.
  const int rounds = (a.tiles + sms - 1) / sms, grid = (a.tiles + rounds - 1) / rounds;
  const size_t smem = static_cast<size_t>(a.stages) * a.stageBytes;
  const bool two = n > kGemvMaxTokens;
  const dim3 gr(grid), bl(kThreads);
  if (epi == kSwiglu)
    two ? launchSmem(gemvV2Kernel<false, true, kSwiglu, 2>, gr, bl, smem, s, a)
        : launchSmem(gemvV2Kernel<false, true, kSwiglu, 1>, gr, bl, smem, s, a);
  else if (epi == kResidual)
    two ? launchSmem(gemvV2Kernel<false, false, kResidual, 2>, gr, bl, smem, s, a)
        : launchSmem(gemvV2Kernel<false, false, kResidual, 1>, gr, bl, smem, s, a);
  else if (norm)
    two ? launchSmem(gemvV2Kernel<false, true, kStore, 2>, gr, bl, smem, s, a)
        : launchSmem(gemvV2Kernel<false, true, kStore, 1>, gr, bl, smem, s, a);
  else if (yF32)
    launchSmem(gemvV2Kernel<true, false, kStore, 1>, gr, bl, smem, s, a);
  else
    launchSmem(gemvV2Kernel<false, false, kStore, 1>, gr, bl, smem, s, a);
  return true;
}

}  // namespace gpu
}  // namespace qwen
