// fused_twoshot_p2p_kernel.cu: two-shot all-reduce + residual add + RMSNorm in one kernel
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

#include "algos/fused_rmsnorm_common.cuh"
#include "common/error.h"

namespace tpcomm {
namespace {

template <typename T, bool kVec>
__global__ void __launch_bounds__(kRmsNormThreads) fusedTwoshotKernel(FusedP2pLaunch f) {
  constexpr int kUnit = dev::NormShape<T>::kUnit;
  const P2pLaunch& p = f.p2p;
  const uint64_t deadline = dev::globalTimerNs() + p.timeoutNs;
  const int me = p.rank, n = p.nRanks, b = blockIdx.x, nb = gridDim.x;
  const P2pLayout& L = p.layout;
  dev::pdlLaunchDependents();
  dev::pdlWait();  // inputs, residual and the epoch may come from the previous kernel
  uint64_t* epochPtr = dev::epochAt(p.peers[me], L, kP2pTwoshot, b);
  uint64_t epoch = *epochPtr;
  const T* src = static_cast<const T*>(p.send);
  T* dst = static_cast<T*>(p.recv);
  T* residual = static_cast<T*>(f.residual);
  const T* weight = static_cast<const T*>(f.weight);
  const size_t H = f.hidden, share = f.rowsPerRank;

  for (size_t c0 = 0; c0 < f.rows; c0 += f.rowsPerChunk) {
    ++epoch;
    const size_t len = f.rows - c0 < f.rowsPerChunk ? f.rows - c0 : f.rowsPerChunk;
    const size_t bufOff = L.twoshotOffset + (epoch & 1) * L.twoshotBufferBytes();
    auto inbox = [&](int owner, int from) {
      return reinterpret_cast<T*>(p.peers[owner] + bufOff + static_cast<size_t>(from) * L.twoshotSliceCap);
    };
    auto gather = [&](int owner) {
      return reinterpret_cast<T*>(p.peers[owner] + bufOff + static_cast<size_t>(n) * L.twoshotSliceCap);
    };
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
    if (!dev::peerBarrier(p, kP2pTwoshot, 2 * epoch, deadline)) return;

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
    if (!dev::peerBarrier(p, kP2pTwoshot, 2 * epoch + 1, deadline)) return;

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
  if (threadIdx.x == 0) *epochPtr = epoch;
}

}  // namespace

Status preloadFusedTwoshotKernels() {
  return dev::preloaded(dev::forEachNormVariant([](auto t, auto v) {
                          return dev::preload(fusedTwoshotKernel<typename decltype(t)::type, decltype(v)::value != 0>);
                        }),
                        "fused twoshot_p2p");
}

Status launchFusedTwoshot(const FusedP2pLaunch& f, cudaStream_t stream) {
  const size_t rowBytes = f.hidden * dataTypeSize(static_cast<DataType>(f.p2p.dtype));
  if (f.rowsPerChunk == 0 || f.rowsPerRank == 0 || f.rowsPerRank * rowBytes > f.p2p.layout.twoshotSliceCap ||
      2 * f.rowsPerChunk * rowBytes > f.p2p.layout.twoshotChunk || f.rowsPerChunk > f.rowsPerRank * f.p2p.nRanks)
    return TPCOMM_ERROR(kNotSupported, "fused twoshot_p2p: %zu-byte rows do not fit the two-shot chunk", rowBytes);
  cudaError_t e = dev::dispatchNorm(f.p2p.dtype, fusedVectorizable(f), [&](auto t, auto v) {
    return dev::launchFused(fusedTwoshotKernel<typename decltype(t)::type, decltype(v)::value != 0>, f, stream);
  });
  if (e != cudaSuccess) return TPCOMM_ERROR(kCudaError, "fused twoshot_p2p launch: %s", cudaGetErrorString(e));
  return Status::kOk;
}

}  // namespace tpcomm
