// staged_host_compressed.cu: staged_host+fp8 / staged_host+int8 on GPU ranks (no P2P): the
// compressed all-reduce (sums) through pinned host memory, one kernel per call, no host thread.
// staged_host.cu's schedule and protocol (in NCCL's terms a one-shot all-reduce over the SHM
// transport) with block-scaled one-byte codes in the staging slots instead of the elements:
// half (bf16/f16) or a quarter (f32) of the bytes cross PCIe (docs/compression.md).
//
// Who writes what where. The message is cut into chunks of blocks x Q quantization blocks of
// B = kQuantBlockElems elements (Q = StagedDeviceLaunch::quantBlocks, what the smallest piece
// holds); chunk c uses slot (seqBase + c) % S of every rank. CUDA blocks [0, blocks) publish,
// [blocks, 2 blocks) reduce; block b owns elements [b Q B, (b + 1) Q B) of every chunk (clipped
// to its length) and piece b of every slot: the same bytes as staged_host's piece b
// (staged_pieces.h), so plain and compressed calls share slots, flags and sequence numbers.
// A piece holds Q B code bytes, then Q fp32 scales.
//   Publisher b (each warp 8 quantization blocks at a time, 16 elements per lane:
//   quantize_warp.cuh) quantizes its elements of the chunk from device memory into piece b of
//   its own slot in host memory and of the slot's device twin (StagedDeviceLaunch::twin, the
//   same layout in this GPU's memory; plain stores), then publishes: __threadfence_system +
//   __syncthreads (blockReleaseFence), then thread 0 st.release.sys ready[me][slot][b] = seq.
//   Reducer b acquires ready[r][slot][b] >= seq for every r (ld.acquire.sys, one thread per
//   rank; r = me orders the twin's codes before its reads, which go to L2 with ld.global.cg),
//   then for each of its blocks: reads its own codes from the twin (what it published: one
//   quantization per element fewer: 4-6% faster, docs/compression.md), reads every
//   other rank's codes and scale with ld.global.cv (host memory another
//   GPU rewrote over PCIe since this one may have cached it; 16 codes per lane per load), sums
//   the read-back values in fp32 in rank order 0..n-1 (quantAdd: never an FMA), quantizes the
//   sum once and writes its output from those codes read back. Every rank computes the same sum
//   from the same codes, so every rank writes the same bits, equal to the host form and
//   twoshot_p2p+fp8 (the definition in docs/compression.md); nothing is sent back. Then
//   blockReleaseFence and thread 0 st.release.sys consumed[me][slot][b] = seq.
// When a slot is free: publisher b rewrites piece b of slot s (and of its twin) for sequence seq
// only after every rank's consumed[r][slot][b] >= seq - S (its last reader of the previous use,
// this rank's reducer b for the twin, is done). Sequence
// numbers grow across calls (the host's takeSequence), so no flag is ever reset and a stale flag
// can never satisfy a wait.
// Failures, as staged_host.cu's (staged_device.cuh): block 0 sets this rank's arrival word as the
// kernel starts; every wait is bounded by TPCOMM_TIMEOUT_MS and polls the segment's failure word
// and this rank's error word; on expiry the waiting block publishes kTimeout, the missing rank
// and why it was late into the failure word, then into its error word, and leaves, and every
// other block of every rank leaves at its next poll. Every reducer reads both words before its
// first chunk reads a peer's codes, so a rank that starts after its peers gave up writes no
// output. Outputs are then untouched or written up to the chunk each reducer reached (every
// written element right), the slots' flags stay at the last published sequence, and every rank's
// host reports kTimeout on this and every later call. TPCOMM_CHECK_CALLS: publisher b writes the
// call's signature beside ready[me][slot][b] before releasing it, reducer b compares every
// peer's with its own before reading its codes (a mismatch: kInvalidArgument naming the peer, no
// output written).
// In place is safe: reducer b writes elements of chunk c only after publisher b of its own rank
// read them (ready[me][slot][b]), and the reducer never reads the input.
// Alignment: code addresses are 16-byte aligned, so whole blocks move as 16-byte loads and stores:
// the staging area is page-aligned (host_staged.cc), slots start at multiples of chunkBytes (a
// multiple of 4096), pieces at multiples of kStagedUnitBytes = 16, and a block's codes at a
// multiple of B = 64 in its piece (quantize_warp.cuh checks, and falls back to bytes otherwise).
// Not CUDA-graph capturable (the sequence numbers are taken on the host per call), as staged_host.
#include <cuda_runtime.h>

#include "algos/common/device_common.cuh"
#include "algos/common/launch.cuh"
#include "algos/compressed/quantize.h"
#include "algos/compressed/quantize_warp.cuh"
#include "algos/staged_host/staged_device.cuh"
#include "algos/staged_host/staged_host.h"
#include "algos/staged_host/staged_pieces.h"
#include "common/error.h"

namespace tpcomm {
namespace {

using dev::Codes;
using dev::kPerLane;
using dev::Wire;

constexpr int kB = kQuantBlockElems;

template <typename T, int F>
__global__ void __launch_bounds__(kThreads) stagedCompressedKernel(StagedDeviceLaunch p) {
  const bool publisher = blockIdx.x < static_cast<unsigned>(p.blocks);
  const int b = publisher ? blockIdx.x : blockIdx.x - p.blocks;
  const int me = p.rank, n = p.nRanks, warp = threadIdx.x / 32;
  const size_t perBlock = p.quantBlocks * kB;  // elements of a chunk per CUDA block
  const size_t chunkElems = perBlock * p.blocks;
  const size_t chunks = (p.count + chunkElems - 1) / chunkElems;
  const uint64_t deadline = dev::globalTimerNs() + p.timeoutNs;
  if (blockIdx.x == 0 && threadIdx.x == 0) dev::stagedArrive(p);
  const T* src = static_cast<const T*>(p.send);
  T* dst = static_cast<T*>(p.recv);
  size_t ub, ue;
  stagedPiece(p.chunkBytes, p.blocks, b, &ub, &ue);
  const size_t pieceOff = ub * kStagedUnitBytes;
  const size_t perRank = static_cast<size_t>(p.nSlots) * p.blocks;

  for (size_t c = 0; c < chunks; ++c) {
    const dev::StagedChunk ch = dev::stagedChunk(p, c, chunkElems);
    const uint64_t seq = ch.seq;
    const int slot = ch.slot;
    const size_t c0 = ch.c0, len = ch.len;
    const size_t lo = b * perBlock < len ? b * perBlock : len;  // this block's elements [lo, hi) of the chunk
    const size_t hi = lo + perBlock < len ? lo + perBlock : len;
    auto wireOf = [&](int r) {
      return dev::wireAt(p.slots + (static_cast<size_t>(r) * p.nSlots + slot) * p.chunkBytes + pieceOff, perBlock);
    };
    auto twinWire = [&] { return dev::wireAt(p.twin + static_cast<size_t>(slot) * p.chunkBytes + pieceOff, perBlock); };
    // Calls fn(k, m) for each quantization block [k, k + m) of [lo, hi) this lane's group handles
    // (m = 0: none this step).
    auto forBlocks = [&](auto fn) { dev::forWarpBlocks(lo, hi, warp, kWarpsPerBlock, fn); };
    const size_t flagIdx = static_cast<size_t>(slot) * p.blocks + b;

    if (publisher) {
      if (!dev::stagedPieceFree(p, perRank, flagIdx, seq, deadline)) return;
      const Wire to = wireOf(me), twin = twinWire();
      forBlocks([&](size_t k, int m) {
        float x[kPerLane];
        dev::loadBlock(src + c0 + k, m, x);
        const Codes codes = dev::quantizeGroup<F>(x);
        dev::storeCodes(codes, m, to, k - lo, (k - lo) / kB);
        dev::storeCodes(codes, m, twin, k - lo, (k - lo) / kB);
      });
      dev::blockReleaseFence();
      dev::stagedPublish(p, perRank, flagIdx, seq);
    } else {
      if (!dev::stagedChunkReady(p, perRank, flagIdx, seq, deadline, c == 0)) return;
      const Wire twin = twinWire();
      forBlocks([&](size_t k, int m) {
        float acc[kPerLane];
        dev::sumCodes<F>([&] { return dev::loadCodes<false>(twin, k - lo, (k - lo) / kB, m); }, m, n, me,
                         [&](int r) -> Codes { return dev::loadCodes<true>(wireOf(r), k - lo, (k - lo) / kB, m); },
                         acc);
        float back[kPerLane];
        dev::decodeCodes<F>(dev::quantizeGroup<F>(acc), m, back);  // quantized once, stored nowhere
        dev::storeBlock(dst + c0 + k, m, back);
      });
      dev::blockReleaseFence();
      dev::stagedConsumed(p, perRank, flagIdx, seq);
    }
  }
}

constexpr auto kKernel = [](auto t, auto fm) {
  return stagedCompressedKernel<typename decltype(t)::type, decltype(fm)::value>;
};

}  // namespace

Status preloadStagedCompressedKernels() {
  return dev::preloadCompressed("loading the staged_host compressed kernels", kKernel);
}

Status launchStagedCompressed(const StagedDeviceLaunch& p, cudaStream_t stream) {
  if (p.quantBlocks == 0) return TPCOMM_ERROR(kInternal, "staged_host compressed: no quantization block fits a piece");
  return dev::dispatchCompressed(p.dtype, p.format, [&](auto t, auto fm) {
    return dev::launch("staged_host compressed kernel launch", kKernel(t, fm), stagedShape(p), stream, p);
  });
}

}  // namespace tpcomm
