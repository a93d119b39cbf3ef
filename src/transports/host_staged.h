// host_staged: ranks meet in host memory. Across processes of one node the segment is POSIX
// shared memory (created 0600 under a unique name by rank 0, unlinked as soon as every rank has
// mapped it); between threads of one process it is plain memory. GPU ranks register the segment
// with CUDA (pinned, device-mapped) so kernels stream straight to and from it.
//
// Segment layout (every region 128-byte aligned):
//   Header        barrier words, refcount, per-rank pointer table (threads mode), the failure
//                 word, every rank's host call counter and arrival word
//   flags         ready[rank][slot][block], consumed[rank][slot][block] (u64 sequence numbers),
//                 signature[rank][slot][block] (u64: sequence << 32 | call signature)
//   slots         [rank][slot][chunkBytes] staging data
//   result        [slots * chunkBytes] shared result area (host ranks across processes)
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "tpcomm/status.h"
#include "transports/transport_env.h"

// The CUDA runtime's handle types, without its headers (host-only builds have none).
typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;

namespace tpcomm {

class HostStagedTransport {
 public:
  struct Geometry {
    size_t chunkBytes = 1 << 20;  ///< bytes per slot
    int slots = 4;                ///< pipeline depth
    int blocks = 16;              ///< GPU blocks per role; one flag per (rank, slot, block)
    bool copyEngines = false;     ///< GPU ranks: make the copy-engine mode's streams and inbox
    int ceSplit = 4;              ///< copy-engine mode: chunks a call is split into, at least (stagedCeChunkElems)
  };

  /// Removes the POSIX shared-memory segments of this user that a tpcomm process left behind when
  /// it died between creating and unlinking one (/dev/shm/tpcomm-<pid>-*, that pid gone). Returns
  /// how many it removed; `report` (optional) gets one line per segment. Rank 0 calls it before
  /// it creates a segment; tpcomm-doctor --clean calls it on demand.
  static int removeStaleSegments(std::string* report);

  /// Collective over env.bootstrap. Requires all ranks on one node.
  static Status create(const TransportEnv& env, const Geometry& g, std::unique_ptr<HostStagedTransport>* out);
  ~HostStagedTransport();

  const Geometry& geometry() const { return geo_; }
  bool sameProcess() const { return sameProcess_; }
  int rank() const { return rank_; }
  int nRanks() const { return nRanks_; }

  /// Staging slot `slot` of rank `r` (host address; on GPU ranks also the device address:
  /// with unified addressing a mapped host allocation has the same pointer on the device).
  char* slot(int r, int slot) const;
  /// All of rank r's slots as one contiguous buffer of slots * chunkBytes.
  char* slots(int r) const { return slot(r, 0); }
  size_t slotsBytes() const { return geo_.chunkBytes * geo_.slots; }
  /// Shared result area of slots * chunkBytes bytes.
  char* result() const;
  /// GPU ranks: this rank's slots' device twin (slots * chunkBytes of device memory, null on host
  /// ranks). The compressed staged_host kernel's publisher writes its codes there as well as into
  /// its host slot, so its own reducer reads them back from HBM instead of quantizing the input
  /// a second time (staged_host_compressed.cu).
  char* deviceTwin() const { return deviceTwin_; }
  /// GPU ranks with Geometry::copyEngines (staged_host_ce.cu): 2 * nRanks * chunkBytes of device
  /// memory (two inboxes, chunk c's in inbox c % 2; its part r holds a copy of rank r's host
  /// slot), the quantize, publish, fetch and reduce streams, and their events. Null otherwise.
  struct CopyEngineResources {
    char* inbox = nullptr;
    cudaStream_t quantize = nullptr, publish = nullptr, fetch = nullptr, reduce = nullptr;
    cudaEvent_t fork = nullptr;                           // the call's stream, forked to all four
    cudaEvent_t joined[4] = {nullptr, nullptr, nullptr, nullptr};  // each stream's end, joined back
    cudaEvent_t quantized = nullptr, fetched = nullptr;  // a chunk's codes ready; its copies in done
    cudaEvent_t reduced[2] = {nullptr, nullptr};         // inbox i free again
    int sms = 0;  // the device's SMs, read once at create (the compressed kernels' grid, per chunk)
    std::array<cudaStream_t*, 4> streams() { return {&quantize, &publish, &fetch, &reduce}; }
    std::array<cudaEvent_t*, 9> events() {
      return {&fork, &joined[0], &joined[1], &joined[2], &joined[3], &quantized, &fetched, &reduced[0], &reduced[1]};
    }
  };
  const CopyEngineResources* copyEngines() const { return ce_.inbox ? &ce_ : nullptr; }
  /// The segment's failure word, readable and writable by every rank's host and GPU at this
  /// address: zero until a rank's wait expires (a staged_host kernel's, or a host barrier's) or a
  /// staged_host kernel finds that the ranks' calls differ; then that first failure's error code
  /// (common/async_error.h). Every staged_host kernel reads it before it reads a peer's data, and
  /// GPU ranks' hosts report it (AsyncError::shared).
  uint32_t* poisonWord() const;
  /// The failure word's value now (0: none).
  uint32_t failureCode() const;
  /// Flag arrays for the GPU pipeline: index [(rank * slots + slot) * blocks + block].
  uint64_t* readyFlags() const;
  uint64_t* consumedFlags() const;
  /// TPCOMM_CHECK_CALLS: the word each publisher writes beside its ready flag before releasing it
  /// (same index): (sequence & 0xffffffff) << 32 | the call's signature.
  uint64_t* signatureFlags() const;

  /// This rank's host begins a collective call: its call counter, which every rank's host and GPU
  /// can read, advances. Returns the call's number (1, 2, ...); every rank numbers the same call
  /// alike, since every rank makes the same calls in the same order. A waiter whose bound expires
  /// compares the late rank's counter with its own call's number: behind means its host never
  /// made the call (common/async_error.h, timeoutCode).
  uint64_t beginCall();
  /// Every rank's call counter, [rank * kCallCounterWords] (device-mapped on GPU ranks).
  const uint64_t* callCounters() const;
  /// Every rank's arrival word, [rank] (device-mapped): its staged_host kernels write
  /// arrivalStarted(call) when they start.
  uint64_t* arrivalWords() const;

  /// Host-side barrier over the segment (spin, then yield), bounded by timeoutMs. A rank whose
  /// wait expires breaks it for good: every rank's later barrier (a late arrival included)
  /// fails at once with kTimeout, and none passes a round the expired rank left. The expired rank
  /// says of each missing rank whether its host had made the call (callCounters()) and publishes
  /// the first one's timeout code in the failure word.
  Status barrier();
  /// A call's signature as opaque words (the algorithm decides what they hold), exchanged so
  /// every rank can check that all ranks make the same call.
  struct CallWords {
    uint64_t w[4];
  };
  /// Threads mode only: publishes this rank's (send, recv) pointers and call words for the
  /// current call and returns every rank's. Includes a barrier.
  Status exchangePointers(const void* send, void* recv, const CallWords& words, const void** sends, void** recvs,
                          CallWords* allWords);
  /// Threads mode: brackets a phase in which this rank reads or writes its peers' own buffers
  /// (the zero-copy paths). A rank whose barrier wait expires breaks the barrier and then waits
  /// for every such phase to end before it returns, and a phase stops at its next check
  /// (accessBroken()), so no peer touches that rank's buffers after its call returned.
  /// beginPeerAccess() is false when the barrier is already broken (do not touch anything).
  bool beginPeerAccess();
  /// The first rank this rank's expired barrier found missing, or -1.
  int firstMissing() const { return firstMissing_; }
  void endPeerAccess();
  bool accessBroken() const;

  /// Publishes this rank's call words and returns every rank's (any mode). Includes a barrier.
  Status exchangeWords(const CallWords& words, CallWords* allWords);

  /// Next sequence number base for a GPU pipeline of `chunks` chunks (same on every rank
  /// because every rank runs the same calls in the same order).
  uint64_t takeSequence(uint64_t chunks) {
    uint64_t base = sequence_;
    sequence_ += chunks;
    return base;
  }

 private:
  HostStagedTransport() = default;
  struct Header;
  Header* header() const { return reinterpret_cast<Header*>(base_); }
  Status brokenBarrier() const;

  Geometry geo_;
  int rank_ = 0, nRanks_ = 1, timeoutMs_ = 10000;
  bool sameProcess_ = false;
  bool cudaRegistered_ = false;
  bool counted_ = false;  // this rank holds one of the segment header's references
  char* base_ = nullptr;
  char* deviceTwin_ = nullptr;
  int twinDevice_ = -1;  // the CUDA device deviceTwin_ (and ce_) live on
  CopyEngineResources ce_;
  size_t bytes_ = 0;
  size_t flagsOffset_ = 0, slotsOffset_ = 0, resultOffset_ = 0;
  uint64_t sequence_ = 0;
  int firstMissing_ = -1;
  uint32_t spinsBeforeYield_ = 2000;  // 0 when ranks outnumber cores: the awaited rank needs this core
};

}  // namespace tpcomm
