// attention_prefill.cu: causal GQA attention for prefill chunks on the tensor cores, in the
// FlashAttention-2 schedule (Dao, 2023): a block owns a tile of 128 query rows and streams the
// K/V tiles of 64 cache slots it needs through shared memory (cp.async, double-buffered), with
// S = Q K^T and O += P V as mma.sync m16n8k16 bf16 products (fp32 accumulation) and an online
// softmax in fp32 (exp2 with log2(e) folded into the scale). GQA: the rows of a tile are the
// (token, query head) pairs of one KV head's group, token-major ("packed GQA"), so each K/V tile
// is read once for the whole group. Each of the 4 warps owns 32 rows (two MMA row tiles sharing
// every K/V fragment); Q, K and V fragments come from ldmatrix (V: .trans); P is converted
// from the S accumulators to A fragments in registers (the C and A layouts of m16n8k16 line up).
// Shared rows are padded by 16 bytes so ldmatrix reads are free of bank conflicts. The causal
// mask is applied only to tiles that reach past the block's first query position. Blocks are
// issued longest-first (the last query tiles attend to the most keys).
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "kernels/attention_prefill.cuh"
#include "kernels/common.cuh"
#include "kernels/smem_mma.cuh"

namespace qwen {
namespace gpu {
namespace {

constexpr int kPfWarps = 4;
// MT: 16-row MMA tiles per warp (2 by default; QWEN_PREFILL_MTILES=1 in the environment selects
// 1, for comparison); a block holds 16 MT kPfWarps query rows (token, head).
constexpr int kPfKeys = 64;  // cache slots per K/V tile

template <int D, int MT>
constexpr int smemBytes() {
  return (2 /* K, V */ * 2 /* buffers */ * kPfKeys + 16 * MT * kPfWarps /* Q */) * (D + 8) * 2;
}

// grid (ceil(n * group / (16 MT kPfWarps)), hk), block 128, smemBytes<D, MT>() of dynamic shared
// memory. Each warp owns MT 16-row tiles: a K or V fragment read from shared memory feeds every
// one of them (FlashAttention-2's 128-row blocks of 4 warps); Q sits in shared memory and its
// fragments are read per k-step (registers hold O and S, not Q).
template <int D, int MT>
__global__ void __launch_bounds__(kPfWarps * 32)
    attnPrefillKernel(const __nv_bfloat16* q, const __nv_bfloat16* kCache, const __nv_bfloat16* vCache,
                      const int32_t* pos, int n, int hq, int hk, float scaleLog2, __nv_bfloat16* out) {
  constexpr int SD = D + 8;   // shared row stride in elements
  constexpr int KS = D / 16;  // k-steps of Q K^T
  constexpr int NT = D / 8;   // 8-column tiles of O
  constexpr int ST = kPfKeys / 8;
  constexpr int kPfRows = 16 * MT * kPfWarps;
  extern __shared__ __align__(16) unsigned char smemRaw[];
  __nv_bfloat16* Ks = reinterpret_cast<__nv_bfloat16*>(smemRaw);  // [2][kPfKeys][SD]
  __nv_bfloat16* Vs = Ks + 2 * kPfKeys * SD;                      // [2][kPfKeys][SD]
  __nv_bfloat16* Qs = Vs + 2 * kPfKeys * SD;                      // [kPfRows][SD]
  pdlLaunch();
  pdlWait();
  const int G = hq / hk, kvh = blockIdx.y, rowsTotal = n * G;
  const int tileRow0 = (gridDim.x - 1 - blockIdx.x) * kPfRows;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, tig = lane & 3;
  const int p0 = *pos;
  // Row f of the block -> (token, query head); rows past the call read the last row (never stored).
  auto rowOffset = [&](int f, int* qp) {
    const int fc = min(f, rowsTotal - 1), t = fc / G;
    if (qp) *qp = p0 + t;
    return (static_cast<int64_t>(t) * hq + kvh * G + fc % G) * D;
  };
  {  // Q tile -> shared (its own cp.async group, waited for with the first K/V tile)
    constexpr int CH = D / 8;
    for (int c = threadIdx.x; c < kPfRows * CH; c += kPfWarps * 32) {
      const int r = c / CH, col = (c % CH) * 8;
      cpAsync16(smemAddr(Qs + r * SD + col), q + rowOffset(tileRow0 + r, nullptr) + col, true);
    }
    cpAsyncCommit();
  }
  // This thread's rows: g and g + 8 of each of the warp's 16-row tiles.
  int qpos[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) rowOffset(tileRow0 + warp * 16 * MT + mt * 16 + g + 8 * r, &qpos[mt][r]);
  float o[MT][NT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int j = 0; j < NT; ++j) o[mt][j][0] = o[mt][j][1] = o[mt][j][2] = o[mt][j][3] = 0.f;
  float m[MT][2], l[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) m[mt][0] = m[mt][1] = -INFINITY, l[mt][0] = l[mt][1] = 0.f;

  const int lastRow = min(tileRow0 + kPfRows, rowsTotal) - 1;
  const int kvEnd = p0 + lastRow / G + 1;      // the block reads slots [0, kvEnd)
  const int maskFrom = p0 + tileRow0 / G + 1;  // slots below are visible to every row
  const int tiles = (kvEnd + kPfKeys - 1) / kPfKeys;
  const int64_t slotStride = static_cast<int64_t>(hk) * D;

  auto loadTile = [&](int tile, int buf) {
    constexpr int CH = D / 8;  // 16-byte chunks per row
    const int s0 = tile * kPfKeys;
    for (int c = threadIdx.x; c < kPfKeys * CH; c += kPfWarps * 32) {
      const int r = c / CH, col = (c % CH) * 8, s = s0 + r;
      const bool valid = s < kvEnd;
      const int64_t off = static_cast<int64_t>(valid ? s : 0) * slotStride + static_cast<int64_t>(kvh) * D + col;
      const int so = (buf * kPfKeys + r) * SD + col;
      cpAsync16(smemAddr(Ks + so), kCache + off, valid);
      cpAsync16(smemAddr(Vs + so), vCache + off, valid);
    }
    cpAsyncCommit();
  };

  const int li = lane >> 3, lr = lane & 7;  // ldmatrix: matrix index, row within it
  const __nv_bfloat16* Qw = Qs + warp * 16 * MT * SD;
  loadTile(0, 0);
  for (int it = 0; it < tiles; ++it) {
    const int buf = it & 1;
    if (it + 1 < tiles) {
      loadTile(it + 1, buf ^ 1);
      cpAsyncWait<1>();
    } else {
      cpAsyncWait<0>();
    }
    __syncthreads();
    const __nv_bfloat16* Kb = Ks + buf * kPfKeys * SD;
    const __nv_bfloat16* Vb = Vs + buf * kPfKeys * SD;

    // S = Q K^T for the warp's 16 MT rows x 64 slots.
    float sc[MT][ST][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int j = 0; j < ST; ++j) sc[mt][j][0] = sc[mt][j][1] = sc[mt][j][2] = sc[mt][j][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) {
      uint32_t a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
        ldsm4(a[mt], smemAddr(Qw + (mt * 16 + (li & 1) * 8 + lr) * SD + kk * 16 + (li >> 1) * 8));
#pragma unroll
      for (int j = 0; j < ST; j += 2) {
        uint32_t b[4];  // b0, b1 of slot tiles j and j + 1
        ldsm4(b, smemAddr(Kb + (j * 8 + (li >> 1) * 8 + lr) * SD + kk * 16 + (li & 1) * 8));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mmaBf16(sc[mt][j], a[mt][0], a[mt][1], a[mt][2], a[mt][3], b[0], b[1]);
          mmaBf16(sc[mt][j + 1], a[mt][0], a[mt][1], a[mt][2], a[mt][3], b[2], b[3]);
        }
      }
    }
    // Causal mask, online softmax (base 2). A row's 64 scores are spread over its 4 lanes.
    const int s0 = it * kPfKeys;
    const bool needMask = s0 + kPfKeys > maskFrom;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      float mx[2] = {m[mt][0], m[mt][1]};
#pragma unroll
      for (int j = 0; j < ST; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = e >> 1, slot = s0 + j * 8 + 2 * tig + (e & 1);
          float v = sc[mt][j][e] * scaleLog2;
          if (needMask && slot > qpos[mt][r]) v = -INFINITY;
          sc[mt][j][e] = v;
          mx[r] = fmaxf(mx[r], v);
        }
      float corr[2], rs[2] = {0.f, 0.f};
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        corr[r] = fastExp2(m[mt][r] - mx[r]);  // slot 0 is in the first tile: mx is finite
        m[mt][r] = mx[r];
      }
#pragma unroll
      for (int j = 0; j < ST; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float p = fastExp2(sc[mt][j][e] - m[mt][e >> 1]);
          sc[mt][j][e] = p;
          rs[e >> 1] += p;
        }
#pragma unroll
      for (int r = 0; r < 2; ++r) l[mt][r] = l[mt][r] * corr[r] + rs[r];
#pragma unroll
      for (int j = 0; j < NT; ++j)
        o[mt][j][0] *= corr[0], o[mt][j][1] *= corr[0], o[mt][j][2] *= corr[1], o[mt][j][3] *= corr[1];
    }
    // O += P V: P's A fragments are the S accumulators of slot tiles 2kk and 2kk + 1, in bf16.
#pragma unroll
    for (int kk = 0; kk < kPfKeys / 16; ++kk) {
      uint32_t a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        a[mt][0] = packBf16(sc[mt][2 * kk][0], sc[mt][2 * kk][1]);
        a[mt][1] = packBf16(sc[mt][2 * kk][2], sc[mt][2 * kk][3]);
        a[mt][2] = packBf16(sc[mt][2 * kk + 1][0], sc[mt][2 * kk + 1][1]);
        a[mt][3] = packBf16(sc[mt][2 * kk + 1][2], sc[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int j = 0; j < NT; j += 2) {
        uint32_t b[4];  // b0, b1 of column tiles j and j + 1
        ldsm4T(b, smemAddr(Vb + (kk * 16 + (li & 1) * 8 + lr) * SD + j * 8 + (li >> 1) * 8));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mmaBf16(o[mt][j], a[mt][0], a[mt][1], a[mt][2], a[mt][3], b[0], b[1]);
          mmaBf16(o[mt][j + 1], a[mt][0], a[mt][1], a[mt][2], a[mt][3], b[2], b[3]);
        }
      }
    }
    __syncthreads();  // the buffer is refilled by the next iteration's load
  }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float lr2 = l[mt][r];
      lr2 += __shfl_xor_sync(0xffffffffu, lr2, 1);
      lr2 += __shfl_xor_sync(0xffffffffu, lr2, 2);
      const int f = tileRow0 + warp * 16 * MT + mt * 16 + g + 8 * r;
      if (f >= rowsTotal) continue;
      const float inv = 1.f / lr2;
      __nv_bfloat16* dst = out + rowOffset(f, nullptr);
#pragma unroll
      for (int j = 0; j < NT; ++j)
        *reinterpret_cast<uint32_t*>(dst + j * 8 + 2 * tig) =
            packBf16(o[mt][j][2 * r] * inv, o[mt][j][2 * r + 1] * inv);
    }
}

template <int D, int MT>
void launchPrefill(const __nv_bfloat16* q, const __nv_bfloat16* kCache, const __nv_bfloat16* vCache, const int32_t* pos,
                   int n, int hq, int hk, __nv_bfloat16* out, cudaStream_t s) {
  // The shared memory limit was set by prepareAttentionPrefill() at init, on this device.
  const float scaleLog2 = 1.4426950408889634f / sqrtf(static_cast<float>(D));
  const int rows = n * (hq / hk), blockRows = 16 * MT * kPfWarps;
  launchSmem(attnPrefillKernel<D, MT>, dim3((rows + blockRows - 1) / blockRows, hk), dim3(kPfWarps * 32),
             smemBytes<D, MT>(), s, q, kCache, vCache, pos, n, hq, hk, scaleLog2, out);
}

template <int D>
void launchPrefill(const __nv_bfloat16* q, const __nv_bfloat16* kCache, const __nv_bfloat16* vCache, const int32_t* pos,
                   int n, int hq, int hk, __nv_bfloat16* out, cudaStream_t s) {
  static const bool oneTile = [] {
    const char* e = std::getenv("QWEN_PREFILL_MTILES");
    return e && std::strcmp(e, "1") == 0;
  }();
  if (oneTile)
    launchPrefill<D, 1>(q, kCache, vCache, pos, n, hq, hk, out, s);
  else
    launchPrefill<D, 2>(q, kCache, vCache, pos, n, hq, hk, out, s);
}

template <int D, int MT>
cudaError_t allowSmem() {
  return cudaFuncSetAttribute(attnPrefillKernel<D, MT>, cudaFuncAttributeMaxDynamicSharedMemorySize, smemBytes<D, MT>());
}

}  // namespace

bool prepareAttentionPrefill() {
  const cudaError_t e[] = {allowSmem<16, 1>(),  allowSmem<16, 2>(), allowSmem<32, 1>(),  allowSmem<32, 2>(),
                           allowSmem<64, 1>(),  allowSmem<64, 2>(), allowSmem<128, 1>(), allowSmem<128, 2>()};
  for (cudaError_t x : e)
    if (x != cudaSuccess) return false;
  return true;
}


bool attentionPrefillSupported(int D, int device) {
  int major = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess || major < 8)
    return false;
  return D == 16 || D == 32 || D == 64 || D == 128;
}

void attentionPrefill(const __nv_bfloat16* q, const __nv_bfloat16* kCache, const __nv_bfloat16* vCache,
                      const int32_t* pos, int n, int hq, int hk, int D, __nv_bfloat16* out, cudaStream_t s) {
  if (n <= 0) return;
  switch (D) {
    case 16:
      launchPrefill<16>(q, kCache, vCache, pos, n, hq, hk, out, s);
      break;
    case 32:
      launchPrefill<32>(q, kCache, vCache, pos, n, hq, hk, out, s);
      break;
    case 64:
      launchPrefill<64>(q, kCache, vCache, pos, n, hq, hk, out, s);
      break;
    case 128:
      launchPrefill<128>(q, kCache, vCache, pos, n, hq, hk, out, s);
      break;
    default:
      break;  // attentionPrefillSupported said no; the caller does not get here
  }
}

}  // namespace gpu
}  // namespace qwen
