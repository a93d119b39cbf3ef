// twoshot_p2p_compressed.cu: twoshot_p2p+fp8 / twoshot_p2p+int8, the compressed all-reduce
// (sums) over peer-mapped buffers: twoshot_p2p.cu's schedule (NCCL's RSxST_AGxST, both phases by
// push) with block-scaled one-byte codes on the wire (algos/compressed/quantize.h, docs/compression.md).
// Who writes what where, per chunk (the message is cut into chunks of `per` elements, a multiple
// of the quantization block B = kQuantBlockElems; slice j of a chunk, whole blocks, is owned by
// rank j; part b of each slice, whole blocks, belongs to CUDA block b; warp w of a CUDA block
// handles every kWarps-th run of 8 quantization blocks of its part, 16 elements per lane:
// quantize_warp.cuh):
//   Phase 1: block b quantizes part b of slice j of its input (j != me) and stores the codes
//     and each block's fp32 scale into rank j's inbox slot `me` (plain stores into peer memory).
//     Barrier (flag value 2e).
//   Reduce: block b reads back, for each quantization block of part b of its own slice, every
//     rank's codes in rank order 0..n-1 (its own quantized locally, bit-identical to what it
//     would have sent), sums them in fp32 (quantAdd: never an FMA), quantizes the sum once,
//     stores those codes and scale into every peer's gather area, and writes its own output
//     from the same codes read back. Barrier (flag value 2e+1).
//   Phase 2: block b reads back part b of every other slice from its gather area into its output.
// So every rank's output block is decode(quantize(sum_r decode(quantize(x_r)))): the same bits
// on every rank and from run to run, and the same bits as the host form (staged_host_compressed.cc),
// since blocks start at multiples of B of the message whatever the chunking.
// Publication, freedom, timeouts: exactly twoshot_p2p's. The barriers are p2p_common.cuh's
// peerBarrier (block release fence, __threadfence_system, then st.release.sys of the flag; the
// waiter's ld.acquire.sys), on twoshot_p2p's flags, per-block epochs and parity-buffered inbox and
// gather areas (its region and channel: one key, the same grid TPCOMM_TWOSHOT_BLOCKS), so plain, fused and compressed
// two-shot calls interleave freely: each call is one kernel, and within it a peer's block b
// rewrites parity e%2 only after the first barrier of chunk e+1 with this rank's block b, which
// has then finished chunk e-1. Which bytes block b reads and writes is a fixed function of (slice,
// part) for every chunk of a call (a shorter last chunk only clips the parts). Every wait is
// bounded (TPCOMM_TIMEOUT_MS); on expiry the block poisons the communicator (every rank's poison
// word and its error word) and leaves; outputs are then partly written, and every later P2P call
// does nothing and reports kTimeout (p2pBegin). Peer-written codes and scales are read with
// ld.global.cg (past L1: peers rewrite them between calls). `recv` may equal `send`: an input
// element is read by the block that later writes the same output element, before it writes it.
// Wire layout: an inbox slot holds sliceCap code bytes, then the slice's scales (fp32); the
// gather area maxChunk code bytes, then the chunk's scales. Both fit twoshot_p2p's areas because
// maxChunk keeps (B + 4) / B bytes per element within the chunk less n x 256 bytes.
// Alignment: code addresses are 16-byte aligned, so whole blocks move as 16-byte loads and
// stores: the peer buffers are allocations (256-byte aligned), its region starts at a multiple of
// 4096, and the buffer size, the slot size and so every inbox and gather area start are
// multiples of 256 (twoshotScratch, planP2pBuffer); a block's codes sit at a multiple of B = 64 in its area
// (slices and parts are whole blocks). quantize_warp.cuh checks, and falls back to bytes otherwise.
#include <cuda_runtime.h>

#include "algos/compressed/quantize.h"
#include "algos/compressed/quantize_warp.cuh"
#include "algos/p2p/p2p_common.cuh"
#include "algos/p2p/twoshot_p2p_compressed.h"

namespace tpcomm {
namespace {

using dev::Codes;
using dev::kPerLane;
using dev::loadBlock;
using dev::storeBlock;
using dev::Wire;
using dev::wireAt;

constexpr int kB = kQuantBlockElems;

// Elements per chunk: whole blocks, n whole-block slices, codes and scales within twoshot_p2p's
// areas (0: the chunk is too small for n ranks).
__host__ __device__ size_t twoshotCompressedChunkElems(const P2pRegion& R, int n) {
  const size_t unit = static_cast<size_t>(n) * kB, reserve = static_cast<size_t>(n) * 256;
  if (R.sharedBytes <= reserve) return 0;
  return (R.sharedBytes - reserve) / (kB + sizeof(float)) * kB / unit * unit;
}

template <typename T, int F>
__global__ void __launch_bounds__(kThreads) twoshotCompressedKernel(P2pLaunch p) {
  const int me = p.rank, n = p.nRanks, warp = threadIdx.x / 32;
  dev::P2pOpening o;
  if (!dev::p2pOpen(p, &o)) return;  // poisoned: do nothing (p2p_common.cuh)
  uint64_t epoch = o.epoch;          // + 1 per chunk; the first chunk's names this call
  const T* src = static_cast<const T*>(p.send);
  T* dst = static_cast<T*>(p.recv);
  const size_t maxChunk = twoshotCompressedChunkElems(p.region, n);  // > 0: checked at launch
  const size_t sliceCap = maxChunk / n;
  const size_t per = dev::twoshotChunkElems(p.count, maxChunk, kB);

  for (size_t c0 = 0; c0 < p.count; c0 += per) {
    ++epoch;
    const size_t len = p.count - c0 < per ? p.count - c0 : per;
    const size_t bufOff = p.region.bufferAt(epoch & 1);
    auto inbox = [&](int owner, int from) {
      return wireAt(p.peers[owner] + bufOff + static_cast<size_t>(from) * p.region.slotBytes, sliceCap);
    };
    auto gather = [&](int owner) {
      return wireAt(p.peers[owner] + bufOff + static_cast<size_t>(n) * p.region.slotBytes, maxChunk);
    };
    // Part b of slice j, slice-relative [lo, hi) from slice start s, clipped to this chunk.
    auto part = [&](int j, size_t* s, size_t* lo, size_t* hi) { dev::twoshotPart(per, len, n, j, kB, s, lo, hi); };
    // Calls fn(k, m) for each quantization block [k, k + m) of [lo, hi) this lane's group handles
    // (m = 0: none this step).
    auto forBlocks = [&](size_t lo, size_t hi, auto fn) { dev::forWarpBlocks(lo, hi, warp, kWarpsPerBlock, fn); };

    for (int j = 0; j < n; ++j) {
      if (j == me) continue;
      size_t s, lo, hi;
      part(j, &s, &lo, &hi);
      const Wire to = inbox(j, me);
      forBlocks(lo, hi, [&](size_t k, int m) {
        float x[kPerLane];
        loadBlock(src + c0 + s + k, m, x);
        dev::storeCodes(dev::quantizeGroup<F>(x), m, to, k, k / kB);
      });
    }
    if (!dev::peerBarrier(p, 2 * epoch, o.deadline)) return;
    if (!dev::firstChunkSignatureCheck(p, o, epoch)) return;

    {
      size_t s, lo, hi;
      part(me, &s, &lo, &hi);
      forBlocks(lo, hi, [&](size_t k, int m) {
        float x[kPerLane], acc[kPerLane];
        loadBlock(src + c0 + s + k, m, x);
        dev::sumReadBack<F>(
            x, m, n, me, [&](int r) -> Codes { return dev::loadCodes<false>(inbox(me, r), k, k / kB, m); }, acc);
        const Codes sum = dev::quantizeGroup<F>(acc);
        for (int r = 0; r < n; ++r)
          if (r != me) dev::storeCodes(sum, m, gather(r), s + k, (s + k) / kB);
        float back[kPerLane];
        dev::decodeCodes<F>(sum, m, back);
        storeBlock(dst + c0 + s + k, m, back);
      });
    }
    if (!dev::peerBarrier(p, 2 * epoch + 1, o.deadline)) return;

    for (int j = 0; j < n; ++j) {
      if (j == me) continue;
      size_t s, lo, hi;
      part(j, &s, &lo, &hi);
      const Wire from = gather(me);
      forBlocks(lo, hi, [&](size_t k, int m) {
        float v[kPerLane];
        dev::readBack<F, false>(from, s + k, (s + k) / kB, m, v);
        storeBlock(dst + c0 + s + k, m, v);
      });
    }
  }
  __syncthreads();
  dev::p2pFinish(p, o.epochPtr, epoch);
}

constexpr auto kKernel = [](auto t, auto f) {
  return twoshotCompressedKernel<typename decltype(t)::type, decltype(f)::value>;
};

Status launch(const P2pLaunch& p, QuantFormat format, cudaStream_t stream) {
  if (twoshotCompressedChunkElems(p.region, p.nRanks) == 0)
    return TPCOMM_ERROR(kNotSupported, "twoshot_p2p compressed: a %zu-byte chunk is too small for %d ranks",
                        p.region.sharedBytes, p.nRanks);
  return dev::dispatchCompressed(p.dtype, static_cast<int>(format), [&](auto t, auto f) {
    return dev::launch("twoshot_p2p compressed launch", kKernel(t, f), dev::p2pShape(p), stream, p);
  });
}

Status preload() { return dev::preloadCompressed("twoshot_p2p compressed", kKernel); }

}  // namespace

const P2pKernels kTwoshotFp8Kernels = {
    preload, [](const P2pLaunch& p, cudaStream_t s) { return launch(p, QuantFormat::kFp8E4m3, s); }, nullptr};
const P2pKernels kTwoshotInt8Kernels = {
    preload, [](const P2pLaunch& p, cudaStream_t s) { return launch(p, QuantFormat::kInt8, s); }, nullptr};

}  // namespace tpcomm
