// staged_host.cu: GPU all-reduce through pinned host memory, for GPUs without P2P. One
// kernel per call and no host thread: the GPU streams its data to host memory with SM stores and
// reads its peers' data back with uncached loads. In NCCL's terms it is a one-shot all-reduce
// over the SHM transport (each rank reads every peer's full input).
//
// Blocks [0, B) publish, blocks [B, 2B) reduce. The message is cut into chunks of chunkBytes,
// chunk c lives in slot (seqBase + c) % S of every rank, and each slot is split into B fixed
// pieces (clipped to the chunk's length):
// publisher b copies piece b of its input into its slot, then releases ready[me][slot][b] = seq;
// reducer b acquires ready[r][slot][b] >= seq for every r, reduces piece b in rank order 0..n-1
// in fp32 (own data read from device memory), writes it, then releases
// consumed[me][slot][b] = seq. Pieces split the whole slot (chunkBytes), not the chunk, so block
// b owns the same bytes of a slot in every use whatever the call's size; publisher b reuses its
// piece after every rank's consumed[r][slot][b] reached seq - S. (Splitting each chunk by its
// own length made a shorter chunk's pieces overlap other blocks' earlier pieces, and waiting
// for every block's flag instead cost 4.7-5.4x the copy bound on 2x H200.) Sequence numbers grow
// across calls, so no flag is ever reset and a stale flag can never satisfy a wait. Peer data is
// read with ld.global.cv: the slot was rewritten over PCIe since this GPU may last have cached it.
//
// Failures (staged_device.cuh). Block 0 first sets this rank's arrival word (host memory) to
// arrivalStarted(call). Every wait is bounded by TPCOMM_TIMEOUT_MS and polls the segment's failure
// word and this rank's error word. A wait that expires publishes kTimeout, the missing rank and
// why it was late (its host call counter and arrival word) into the failure word, then into the
// error word, and its block leaves; every other block of every rank leaves at its next poll, and
// every reducer reads both words before its first chunk reads a peer's slot, so a rank that
// starts after its peers gave up writes no output and reports their failure. What a timeout
// leaves: outputs untouched, or (a failure in the middle of a call) written piece by piece up to
// the chunk each reducer reached, every written element right (a reducer reads a slot only after
// its ready flag, and a publisher rewrites a piece only after every rank's consumed flag); the
// flags stay at the last published sequence; every rank's host reports kTimeout on this and every
// later call (the error word or, where this rank's kernel never saw it, the failure word).
// TPCOMM_CHECK_CALLS: publisher b writes the call's signature beside ready[me][slot][b] before
// releasing it; reducer b compares every peer's with its own after acquiring that peer's flag and
// before reading its data; a mismatch is published as kInvalidArgument naming the peer, and no
// output is written.
#include <cuda_runtime.h>

#include "algos/common/device_common.cuh"
#include "algos/common/launch.cuh"
#include "algos/host/host_reduce.h"
#include "algos/staged_host/staged_device.cuh"
#include "algos/staged_host/staged_host.h"
#include "algos/staged_host/staged_pieces.h"

namespace tpcomm {
namespace {

using dev::Pack;
using dev::PackOf;

template <typename T, int Op, bool kVec>
__global__ void __launch_bounds__(kThreads) stagedAllReduceKernel(StagedDeviceLaunch p) {
  const bool publisher = blockIdx.x < static_cast<unsigned>(p.blocks);
  const int b = publisher ? blockIdx.x : blockIdx.x - p.blocks;
  const int me = p.rank, n = p.nRanks;
  const size_t chunkElems = p.chunkBytes / sizeof(T);
  const size_t chunks = (p.count + chunkElems - 1) / chunkElems;
  const uint64_t deadline = dev::globalTimerNs() + p.timeoutNs;
  constexpr int kEpp = PackOf<T>::kElems;
  const T* src = static_cast<const T*>(p.send);
  T* dst = static_cast<T*>(p.recv);
  if (blockIdx.x == 0 && threadIdx.x == 0) dev::stagedArrive(p);

  for (size_t c = 0; c < chunks; ++c) {
    const dev::StagedChunk ch = dev::stagedChunk(p, c, chunkElems);
    const uint64_t seq = ch.seq;
    const int slot = ch.slot;
    const size_t c0 = ch.c0, len = ch.len;
    size_t pb, pe;  // this block's piece of the chunk, in elements relative to c0
    {
      // Split the full slot, not this chunk: block b owns the same bytes of a slot in every use
      // (any call size or dtype; a 16-byte unit is kEpp elements of every T), clipped to len.
      static_assert(kStagedUnitBytes == dev::kPackBytes, "a piece unit is one vector");
      size_t ub, ue;
      stagedPiece(p.chunkBytes, p.blocks, b, &ub, &ue);
      pb = ub * kEpp < len ? ub * kEpp : len;
      pe = ue * kEpp < len ? ue * kEpp : len;
    }
    auto slotOf = [&](int r) {
      return reinterpret_cast<T*>(p.slots + (static_cast<size_t>(r) * p.nSlots + slot) * p.chunkBytes);
    };
    const size_t flagIdx = static_cast<size_t>(slot) * p.blocks + b;
    const size_t perRank = static_cast<size_t>(p.nSlots) * p.blocks;

    if (publisher) {
      if (!dev::stagedPieceFree(p, perRank, flagIdx, seq, deadline)) return;
      T* out = slotOf(me);
      if (kVec) {
        size_t vend = pb + (pe - pb) / kEpp * kEpp;
        for (size_t i = pb + threadIdx.x * kEpp; i < vend; i += kThreads * kEpp)
          *reinterpret_cast<Pack*>(out + i) = *reinterpret_cast<const Pack*>(src + c0 + i);
        for (size_t i = vend + threadIdx.x; i < pe; i += kThreads) out[i] = src[c0 + i];
      } else {
        for (size_t i = pb + threadIdx.x; i < pe; i += kThreads) out[i] = src[c0 + i];
      }
      dev::blockReleaseFence();
      dev::stagedPublish(p, perRank, flagIdx, seq);
    } else {
      if (!dev::stagedChunkReady(p, perRank, flagIdx, seq, deadline, c == 0)) return;
      size_t vend = kVec ? pb + (pe - pb) / kEpp * kEpp : pb;
      for (size_t i = pb + threadIdx.x * kEpp; i < vend; i += kThreads * kEpp) {
        float acc[kEpp];
        Pack first = me == 0 ? *reinterpret_cast<const Pack*>(src + c0 + i)
                             : __ldcv(reinterpret_cast<const Pack*>(slotOf(0) + i));
        PackOf<T>::toFloatsForReduce(first, acc);
        for (int r = 1; r < n; ++r) {
          Pack v = r == me ? *reinterpret_cast<const Pack*>(src + c0 + i)
                           : __ldcv(reinterpret_cast<const Pack*>(slotOf(r) + i));
          PackOf<T>::template accumulate<Op>(acc, v);
        }
        *reinterpret_cast<Pack*>(dst + c0 + i) = PackOf<T>::fromFloats(acc);
      }
      for (size_t i = vend + threadIdx.x; i < pe; i += kThreads) {
        auto load = [&](int r) {
          return __fadd_rn(dev::Elem<T>::toFloat(r == me ? src[c0 + i] : dev::loadUncached(slotOf(r) + i)), 0.0f);
        };
        float acc = load(0);
        for (int r = 1; r < n; ++r) acc = dev::combine<Op>(acc, load(r));
        dst[c0 + i] = dev::Elem<T>::fromFloat(acc);
      }
      dev::blockReleaseFence();
      dev::stagedConsumed(p, perRank, flagIdx, seq);
    }
  }
}

constexpr auto kKernel = [](auto t, auto op, auto v) {
  return stagedAllReduceKernel<typename decltype(t)::type, decltype(op)::value, decltype(v)::value != 0>;
};

}  // namespace

Status preloadStagedDevice() {
  return dev::toStatus(
      dev::forEachKernelVariant([](auto t, auto op, auto v) { return dev::preload(kKernel(t, op, v)); }),
      "loading the staged_host kernels");
}

Status launchStagedDevice(const StagedDeviceLaunch& p, cudaStream_t stream) {
  const bool vec = (reinterpret_cast<uintptr_t>(p.send) % dev::kPackBytes) == 0 &&
                   (reinterpret_cast<uintptr_t>(p.recv) % dev::kPackBytes) == 0;
  return dev::dispatchKernel(p.dtype, p.op, vec, [&](auto t, auto op, auto v) {
    return dev::launch("staged_host kernel launch", kKernel(t, op, v), stagedShape(p), stream, p);
  });
}

}  // namespace tpcomm
