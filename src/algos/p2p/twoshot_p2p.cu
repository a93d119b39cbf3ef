// twoshot_p2p.cu: all-reduce as reduce-scatter then all-gather over peer-mapped buffers,
// both phases by push (NCCL's RSxST_AGxST shape; TensorRT-LLM's two-shot / MultiShot without
// multicast). The message is processed in chunks of the gather area's bytes (TPCOMM_TWOSHOT_CHUNK_BYTES); each chunk is
// cut into n slices (slice j is owned by rank j) and each slice into one part per block.
//   Phase 1 (reduce-scatter): block b pushes part b of slice j of its input into rank j's inbox
//     (slot = own rank), for every j != me. Barrier (flag value 2e).
//   Reduce: block b reduces part b of its own slice from its input and the n-1 inbox slots, rank
//     order 0..n-1 in fp32, writes it to its output and pushes it into every peer's gather area.
//     Barrier (flag value 2e+1).
//   Phase 2 (all-gather): block b copies part b of every other slice from its gather area to its
//     output.
// e is the block's epoch, one per chunk, kept in device memory so CUDA-graph replays continue
// the sequence. Inbox and gather area are double-buffered by e's parity: a peer writes parity
// e%2 again only after passing the first barrier of chunk e+1, which needs this rank's block to
// have finished chunk e-1 (same parity) entirely. Each rank sends and receives 2(n-1)/n of the
// message, all as posted stores.
//
// The fused twin (all-reduce + residual add + RMSNorm):
// two-shot all-reduce + residual add + RMSNorm in one kernel
// (NCCL's RSxST_AGxST with the norm between the phases; TensorRT-LLM's two-shot fused norm).
// The norm of a row needs the whole row, so the reduce-scatter is by rows, not by elements:
// each chunk of rows is cut into n contiguous shares of rowsPerRank rows (rank j owns chunk rows
// [j * rowsPerRank, (j+1) * rowsPerRank)), and row k of a share belongs to block k % blocks.
//   Phase 1 (reduce-scatter): block b pushes each row k (k % blocks == b) of rank j's share of
//     its input into rank j's inbox (slot = own rank, row k at k * hidden), for every j != me.
//     Barrier (flag value 2e).
//   Reduce + norm: block b reduces each row k of its own share from its input and the n-1 inbox
//     slots, rank order in fp32 (allReduce's bits), adds its residual, normalises
//     (fused_rmsnorm_common.cuh), writes out and residual locally, and pushes both rows into
//     every peer's gather area (chunk row q at 2q * hidden normalised, (2q+1) * hidden residual).
//     Barrier (flag value 2e+1).
//   Phase 2 (all-gather): block b copies the normalised and residual rows of every other rank's
//     share (its rows k) from its gather area into out and residual.
// The epochs, flags, inbox and gather buffers are twoshot_p2p's (same grid, TPCOMM_TWOSHOT_BLOCKS,
// one epoch per chunk, values 2e / 2e+1, parity e%2), so plain and fused calls interleave freely.
// Within a kernel, which bytes a block reads and its peers' same-index block writes is a fixed
// function of (share, k) for every chunk (rowsPerRank is fixed per call; a last, shorter chunk
// only drops rows), so the plain kernel's parity argument holds per block: a peer's block b
// writes parity e%2 again only after the first barrier of chunk e+1 with this rank's block b,
// which has then finished chunk e-1. Each rank's residual for a row is taken from the row's
// owner, so all ranks end with the same bits (residual is expected equal on every rank, as in
// tensor parallelism). Rows are whole units per rank: with few rows (rows < n) some ranks own
// none and only gather; two-shot is selected for large messages, where rows >> n.
// `out` may equal `in`: a row is read (pushed or reduced) and written by the same block.
#include <cuda_runtime.h>

#include "algos/fused/fused_rmsnorm_common.cuh"
#include "algos/p2p/p2p_common.cuh"
#include "algos/p2p/twoshot_p2p.h"

namespace tpcomm {
namespace {

using dev::Pack;
using dev::PackOf;

template <typename T, int Op, bool kVec>
__global__ void __launch_bounds__(kThreads) twoshotKernel(P2pLaunch p) {
  constexpr int kEpp = PackOf<T>::kElems;
  const int me = p.rank, n = p.nRanks;
  dev::P2pOpening o;
  if (!dev::p2pOpen(p, &o)) return;  // poisoned: do nothing (p2p_common.cuh)
  uint64_t epoch = o.epoch;          // + 1 per chunk; the first chunk's names this call
  const T* src = static_cast<const T*>(p.send);
  T* dst = static_cast<T*>(p.recv);
  // Equal chunks of `per` elements (whole packs, at most the scratch's chunk), the last one
  // possibly shorter.
  const size_t per = dev::twoshotChunkElems(p.count, p.region.sharedBytes / sizeof(T), kEpp);

  for (size_t c0 = 0; c0 < p.count; c0 += per) {
    ++epoch;
    const size_t len = p.count - c0 < per ? p.count - c0 : per;
    const size_t bufOff = p.region.bufferAt(epoch & 1);
    auto inbox = [&](int owner, int from) { return dev::slotAt<T>(p, bufOff, owner, from); };
    auto gather = [&](int owner) { return dev::slotAt<T>(p, bufOff, owner, n); };
    // Part b of slice j, chunk-relative: [s + lo, s + hi) (the full chunk's split, clipped).
    auto part = [&](int j, size_t* s, size_t* lo, size_t* hi) { dev::twoshotPart(per, len, n, j, kEpp, s, lo, hi); };

    for (int j = 0; j < n; ++j) {
      if (j == me) continue;
      size_t s, lo, hi;
      part(j, &s, &lo, &hi);
      T* out = inbox(j, me);
      const T* in = src + c0 + s;
      dev::forRange<T, kVec>(
          lo, hi, [&](size_t i) { return *reinterpret_cast<const Pack*>(in + i); },
          [&](size_t i, const Pack& v) { *reinterpret_cast<Pack*>(out + i) = v; }, [&](size_t i) { out[i] = in[i]; });
    }
    if (!dev::peerBarrier(p, 2 * epoch, o.deadline)) return;
    if (!dev::firstChunkSignatureCheck(p, o, epoch)) return;

    {
      size_t s, lo, hi;
      part(me, &s, &lo, &hi);
      const T* own = src + c0 + s;
      T* out = dst + c0 + s;
      auto from = [&](int r) { return inbox(me, r); };
      dev::forRange<T, kVec>(
          lo, hi, [&](size_t i) { return dev::reduceRanksPack<T, Op>(n, me, own, from, i); },
          [&](size_t i, const Pack& v) {
            *reinterpret_cast<Pack*>(out + i) = v;
            for (int r = 0; r < n; ++r)
              if (r != me) *reinterpret_cast<Pack*>(gather(r) + s + i) = v;
          },
          [&](size_t i) {
            T v = dev::reduceRanksElem<T, Op>(n, me, own, from, i);
            out[i] = v;
            for (int r = 0; r < n; ++r)
              if (r != me) gather(r)[s + i] = v;
          });
    }
    if (!dev::peerBarrier(p, 2 * epoch + 1, o.deadline)) return;

    for (int j = 0; j < n; ++j) {
      if (j == me) continue;
      size_t s, lo, hi;
      part(j, &s, &lo, &hi);
      const T* in = gather(me) + s;
      T* out = dst + c0 + s;
      dev::forRange<T, kVec>(
          lo, hi, [&](size_t i) { return __ldcg(reinterpret_cast<const Pack*>(in + i)); },
          [&](size_t i, const Pack& v) { *reinterpret_cast<Pack*>(out + i) = v; },
          [&](size_t i) { out[i] = dev::loadUncached(in + i); });
    }
  }
  __syncthreads();
  dev::p2pFinish(p, o.epochPtr, epoch);
}

}  // namespace

namespace {

template <typename T, bool kVec>
__global__ void __launch_bounds__(kThreads) fusedTwoshotKernel(FusedP2pLaunch f) {
  constexpr int kUnit = dev::NormShape<T>::kUnit;
  const P2pLaunch& p = f.p2p;
  const int me = p.rank, n = p.nRanks, b = blockIdx.x, nb = gridDim.x;
  dev::P2pOpening o;
  if (!dev::p2pOpen(p, &o)) return;  // poisoned: do nothing (p2p_common.cuh)
  uint64_t epoch = o.epoch;          // + 1 per chunk; the first chunk's names this call
  const T* src = static_cast<const T*>(p.send);
  T* dst = static_cast<T*>(p.recv);
  T* residual = static_cast<T*>(f.residual);
  const T* weight = static_cast<const T*>(f.weight);
  const size_t H = f.hidden, share = f.rowsPerRank;

  for (size_t c0 = 0; c0 < f.rows; c0 += f.rowsPerChunk) {
    ++epoch;
    const size_t len = f.rows - c0 < f.rowsPerChunk ? f.rows - c0 : f.rowsPerChunk;
    const size_t bufOff = p.region.bufferAt(epoch & 1);
    auto inbox = [&](int owner, int from) { return dev::slotAt<T>(p, bufOff, owner, from); };
    auto gather = [&](int owner) { return dev::slotAt<T>(p, bufOff, owner, n); };
    // Rows of rank j's share in this chunk.
    auto shareRows = [&](int j) -> size_t {
      const size_t first = static_cast<size_t>(j) * share;
      return first >= len ? 0 : (len - first < share ? len - first : share);
    };

    for (int j = 0; j < n; ++j) {
      if (j == me) continue;
      for (size_t k = b; k < shareRows(j); k += nb)
        dev::copyRow<T, kVec, false>(inbox(j, me) + k * H, src + (c0 + j * share + k) * H, H);
    }
    if (!dev::peerBarrier(p, 2 * epoch, o.deadline)) return;
    if (!dev::firstChunkSignatureCheck(p, o, epoch)) return;

    for (size_t k = b; k < shareRows(me); k += nb) {
      const size_t q = me * share + k, row = c0 + q;
      auto srcAt = [&](int r) -> const T* { return r == me ? src + row * H : inbox(me, r) + k * H; };
      auto push = [&](size_t offset, size_t u, int cnt, const T(&v)[kUnit]) {
        for (int r = 0; r < n; ++r)
          if (r != me) dev::storeUnit<T, kVec>(gather(r) + offset, u, cnt, v);
      };
      dev::residualRmsNormRow<T, kVec>(
          H, residual + row * H, weight, dst + row * H, f.eps,
          [&](size_t u, int cnt, float(&x)[kUnit]) { dev::reduceUnit<T, kVec>(me, n, srcAt, u, cnt, x); },
          [&](size_t u, int cnt, const T(&v)[kUnit]) { push((2 * q + 1) * H, u, cnt, v); },
          [&](size_t u, int cnt, const T(&v)[kUnit]) { push(2 * q * H, u, cnt, v); });
    }
    if (!dev::peerBarrier(p, 2 * epoch + 1, o.deadline)) return;

    for (int j = 0; j < n; ++j) {
      if (j == me) continue;
      for (size_t k = b; k < shareRows(j); k += nb) {
        const size_t q = j * share + k, row = c0 + q;
        dev::copyRow<T, kVec, true>(dst + row * H, gather(me) + 2 * q * H, H);
        dev::copyRow<T, kVec, true>(residual + row * H, gather(me) + (2 * q + 1) * H, H);
      }
    }
  }
  __syncthreads();
  dev::p2pFinish(p, o.epochPtr, epoch);
}

constexpr auto kPlainKernel = [](auto t, auto op, auto v) {
  return twoshotKernel<typename decltype(t)::type, decltype(op)::value, decltype(v)::value != 0>;
};
constexpr auto kFusedKernel = [](auto t, auto v) {
  return fusedTwoshotKernel<typename decltype(t)::type, decltype(v)::value != 0>;
};

Status preload() {
  TPCOMM_TRY(dev::preloadP2pAndFused("twoshot_p2p", kPlainKernel, kFusedKernel));
  return preloadTwoshotHalvesKernels();
}

// The all-reduce, or the halves (twoshot_p2p_halves.cu) on the same region.
Status launch(const P2pLaunch& p, cudaStream_t stream) {
  if (p.kind != static_cast<int>(CollKind::kAllReduce)) return launchTwoshotHalves(p, stream);
  return dev::launchP2p("twoshot_p2p launch", p, stream, kPlainKernel);
}

// Rows per chunk and per rank first (fusedTwoshotGeometry): a row larger than a share declines.
Status launchFused(const FusedP2pLaunch& call, cudaStream_t stream) {
  FusedP2pLaunch f = call;
  const size_t rowBytes = f.hidden * dataTypeSize(static_cast<DataType>(f.p2p.dtype));
  if (!fusedTwoshotGeometry(f.p2p.region, f.p2p.nRanks, f.rows, rowBytes, &f.rowsPerChunk, &f.rowsPerRank))
    return TPCOMM_ERROR(kNotSupported, "fused twoshot_p2p: a %zu-byte row does not fit the two-shot chunk", rowBytes);
  if (f.rowsPerChunk == 0 || f.rowsPerRank == 0 || f.rowsPerRank * rowBytes > f.p2p.region.slotBytes ||
      2 * f.rowsPerChunk * rowBytes > f.p2p.region.sharedBytes || f.rowsPerChunk > f.rowsPerRank * f.p2p.nRanks)
    return TPCOMM_ERROR(kNotSupported, "fused twoshot_p2p: %zu-byte rows do not fit the two-shot chunk", rowBytes);
  return dev::launchFused("fused twoshot_p2p launch", f, fusedVectorizable(f), stream, kFusedKernel);
}

}  // namespace

const P2pKernels kTwoshotKernels = {preload, launch, launchFused};

}  // namespace tpcomm
