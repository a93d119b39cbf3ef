// staged_device.cuh: what staged_host's kernels (staged_host.cu, staged_host_compressed.cu,
// staged_host_ce.cu) share on the device: failures every rank sees, bounded waits on the
// segment's flags, the kernel's arrival word, and the call signatures of TPCOMM_CHECK_CALLS.
//
// Failures. The host segment holds one failure word for all ranks (StagedDeviceLaunch::poison,
// host memory mapped by every rank's GPU). A kernel that fails (a wait past its bound, a peer
// whose call differs) publishes the failure's code there first, with a system-scope CAS (first
// failure wins), then, after a system fence, into its own error word; so by the time this rank's
// host can see its own failure, every rank's host and GPU can see the failure word. Every wait
// polls both words, and a reducer reads them before it reads any peer's data (stagedFailed), so a
// late rank whose peers gave up does nothing; its host reports the failure word in any case
// (AsyncError::shared), so every rank reports the failure and refuses later calls. A wait's
// timeout code says why the rank waited for was late (common/async_error.h): its host call
// counter against this call's number, and its arrival word, which its kernel sets as it starts.
#pragma once

#include <cstdint>

#include "algos/common/device_common.cuh"
#include "algos/staged_host/staged_host.h"
#include "common/async_error.h"

namespace tpcomm {
namespace dev {

// Records a failure for every rank: the failure word, then this rank's error word.
__device__ __forceinline__ void stagedFail(const StagedDeviceLaunch& p, uint32_t code) {
  atomicCAS_system(p.poison, 0u, code);
  __threadfence_system();
  atomicCAS_system(p.errorWord, 0u, code);
}

// Whether the call must stop: any rank published a failure (copied into this rank's error word,
// so its host reports it), or this rank's own error word is set. One thread.
__device__ __forceinline__ bool stagedFailed(const StagedDeviceLaunch& p) {
  const uint32_t shared = loadVolatile(p.poison);
  const uint32_t mine = loadVolatile(p.errorWord);
  if (shared != 0 && mine == 0) atomicCAS_system(p.errorWord, 0u, shared);
  return shared != 0 || mine != 0;
}

// This rank's kernel of the call has started (one thread per rank and kernel: a plain store into
// host memory that nothing waits for; peers read it only when a wait for this rank expires).
__device__ __forceinline__ void stagedArrive(const StagedDeviceLaunch& p) {
  if (p.callNumber != 0) *reinterpret_cast<volatile uint64_t*>(p.arrivals + p.rank) = arrivalStarted(p.callNumber);
}

// The code of a timeout waiting for `peer`: why it was late, from its call counter and arrival word.
__device__ __forceinline__ uint32_t stagedTimeoutCode(const StagedDeviceLaunch& p, int peer) {
  return timeoutCode(peer, p.callNumber,
                     *reinterpret_cast<const volatile uint64_t*>(p.hostCalls + peer * kCallCounterWords),
                     *reinterpret_cast<const volatile uint64_t*>(p.arrivals + peer), true);
}

// Spins until *flag >= target (acquire, system scope). false once a failure is seen
// (stagedFailed) or, past the deadline, after publishing a timeout naming `peer`. One thread per flag.
__device__ __forceinline__ bool stagedWait(const StagedDeviceLaunch& p, const uint64_t* flag, uint64_t target,
                                           uint64_t deadlineNs, int peer) {
  return spinFlagAtLeast(
      flag, target, deadlineNs, [&] { return stagedFailed(p); }, [&] { stagedFail(p, stagedTimeoutCode(p, peer)); });
}

// TPCOMM_CHECK_CALLS. A publisher writes its call's signature, tagged with the chunk's sequence
// number, into signatures[i] (i: its ready flag's index) before it releases ready[i] = seq, which
// orders the two for the reducers' acquire; a reducer that acquired ready[i] >= seq of a peer
// compares the peer's word with its own before it reads that peer's data. Ranks whose calls
// differ in shape (callSignature) or in their sequence numbers (a call ahead or behind) fail with
// kInvalidArgument naming the peer; the block then leaves, so no output is written from the
// chunk. Off (p.signature 0): one branch.
__device__ __forceinline__ uint64_t stagedSignatureWord(const StagedDeviceLaunch& p, uint64_t seq) {
  return static_cast<uint64_t>(static_cast<uint32_t>(seq)) << 32 | p.signature;
}
__device__ __forceinline__ void stagedSignaturePublish(const StagedDeviceLaunch& p, size_t i, uint64_t seq) {
  if (p.signature) *reinterpret_cast<volatile uint64_t*>(p.signatures + i) = stagedSignatureWord(p, seq);
}
__device__ __forceinline__ bool stagedSignatureCheck(const StagedDeviceLaunch& p, size_t i, uint64_t seq, int peer) {
  if (!p.signature) return true;
  if (*reinterpret_cast<const volatile uint64_t*>(p.signatures + i) == stagedSignatureWord(p, seq)) return true;
  stagedFail(p, asyncErrorCode(Status::kInvalidArgument, peer));
  return false;
}

// The SM kernels' steps (staged_host.cu, staged_host_compressed.cu) for the piece at flag index
// i = slot * blocks + b of rank r (r * perRank + i), whole block.
// Publisher b, before it writes its piece of chunk `seq`: piece b of the slot is free once every
// rank's reducer b released consumed[r][slot][b] >= seq - S (one thread per rank: each poll is a
// PCIe round trip). false: the call failed.
__device__ __forceinline__ bool stagedPieceFree(const StagedDeviceLaunch& p, size_t perRank, size_t i, uint64_t seq,
                                                uint64_t deadline) {
  bool mine = true;
  if (seq > static_cast<uint64_t>(p.nSlots))
    for (int r = threadIdx.x; r < p.nRanks && mine; r += blockDim.x)
      mine = stagedWait(p, p.consumed + r * perRank + i, seq - p.nSlots, deadline, r);
  return __syncthreads_and(mine);
}
// Publisher b, after blockReleaseFence: (checks on) its signature, then ready[me][slot][b] = seq.
__device__ __forceinline__ void stagedPublish(const StagedDeviceLaunch& p, size_t perRank, size_t i, uint64_t seq) {
  if (threadIdx.x != 0) return;
  stagedSignaturePublish(p, p.rank * perRank + i, seq);
  storeReleaseSys(p.ready + p.rank * perRank + i, seq);
}
// Reducer b, before it reads chunk `seq` of any rank: every rank's ready[r][slot][b] >= seq and
// (checks on) its signature; in the call's first chunk also no failure of any rank (read by the
// block's last thread, which waits on no flag, so its two host reads overlap the flag polls).
// false: the call failed.
__device__ __forceinline__ bool stagedChunkReady(const StagedDeviceLaunch& p, size_t perRank, size_t i, uint64_t seq,
                                                 uint64_t deadline, bool firstChunk) {
  bool mine = true;
  for (int r = threadIdx.x; r < p.nRanks && mine; r += blockDim.x) {
    mine = stagedWait(p, p.ready + r * perRank + i, seq, deadline, r);
    if (mine && r != p.rank) mine = stagedSignatureCheck(p, r * perRank + i, seq, r);
  }
  if (firstChunk && threadIdx.x == blockDim.x - 1 && stagedFailed(p)) mine = false;
  return __syncthreads_and(mine);
}
// Reducer b, after blockReleaseFence: consumed[me][slot][b] = seq.
__device__ __forceinline__ void stagedConsumed(const StagedDeviceLaunch& p, size_t perRank, size_t i, uint64_t seq) {
  if (threadIdx.x == 0) storeReleaseSys(p.consumed + p.rank * perRank + i, seq);
}

// Chunk c of a call: its sequence number, its slot, and its elements [c0, c0 + len) of a
// message of `count` elements cut into chunks of chunkElems.
struct StagedChunk {
  uint64_t seq;
  int slot;
  size_t c0, len;
};
__device__ __forceinline__ StagedChunk stagedChunk(const StagedDeviceLaunch& p, size_t c, size_t chunkElems) {
  const size_t c0 = c * chunkElems;
  return {p.seqBase + c + 1, static_cast<int>((p.seqBase + c) % p.nSlots), c0,
          p.count - c0 < chunkElems ? p.count - c0 : chunkElems};
}

}  // namespace dev
}  // namespace tpcomm
