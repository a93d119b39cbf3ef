// cuda_p2p: one device buffer per rank, mapped into every peer of the node, holding the flags and
// scratch areas the P2P algorithms push into. Across processes the buffer is shared with CUDA IPC
// handles (cudaIpcGetMemHandle / cudaIpcOpenMemHandle): the handle is 64 plain bytes that the
// bootstrap already knows how to gather, it needs no socket or fd passing, and every driver that
// has P2P supports it; the cost (one mapping per cudaMalloc, no sub-range export) does not matter
// for one long-lived buffer. Inside one process (createGroup) peers use peer access and raw
// pointers. Kernels only ever *write* to peers (stores are posted over NVLink/PCIe and need no
// round trip) and read their own memory.
//
// The transport knows bytes, not algorithms: each algorithm declares the region it needs
// (P2pScratchRequest, from Algorithm::needs()), the communicator hands every request to create(),
// and an algorithm finds its region again by the request's key. Requests under one key share one
// region (a schedule and its compressed or fused forms). Layout of each rank's buffer (identical
// on every rank, offsets in P2pLayout; a region's channel is its index among the distinct keys):
//   flags    [channel][from rank][block] u64, written by peers with st.release.sys
//   epochs   [channel][block] u64, this rank's own per-block call counters (never read by peers),
//            then each region's local words (never read by peers), then the poison word (u32: set
//            by any rank's kernel whose bounded wait expired, in every rank's buffer;
//            algos/p2p/p2p_common.cuh), then the arrival word (u64: the call number of this
//            rank's latest P2P kernel, marked started or done; read by a peer only when its wait
//            for this rank expires, to say why this rank was late)
//   sigs     [channel][from rank][block][3] u64 call signatures (TPCOMM_CHECK_CALLS;
//            algos/p2p/p2p_common.cuh)
//   regions  one per key, in the order first asked: `buffers` x ([from rank][slotBytes] +
//            sharedBytes), each region 4096-aligned
// Everything starts zeroed; an algorithm that needs other initial contents writes them in its
// setUp() (lamport_p2p's sentinels).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/host_device.h"  // layout accessors are used by host code and kernels alike
#include "tpcomm/status.h"
#include "transports/transport_env.h"

namespace tpcomm {

/// One algorithm's region of every rank's buffer, as it declares it.
struct P2pScratchRequest {
  std::string key;         ///< names the region; requests under one key share it and must be equal
  int blocks = 0;          ///< its largest grid: flag, epoch and signature slots per rank (1..1024)
  size_t slotBytes = 0;    ///< bytes each sending rank has in one buffer
  size_t sharedBytes = 0;  ///< bytes of one buffer after the n slots (e.g. a gather area)
  int buffers = 1;         ///< buffers (2: alternate by epoch parity; 3: Lamport's rotation)
  size_t localWords = 0;   ///< u64 words beside its epochs that no peer addresses

  bool operator==(const P2pScratchRequest& o) const {
    return key == o.key && blocks == o.blocks && slotBytes == o.slotBytes && sharedBytes == o.sharedBytes &&
           buffers == o.buffers && localWords == o.localWords;
  }
};

/// Where a request landed: identical on every rank, plain data (kernels take it by value).
struct P2pRegion {
  int channel = -1;  ///< its row of the flag, epoch and signature tables
  int buffers = 0;
  size_t offset = 0;       ///< its first buffer, from the start of every rank's allocation
  size_t slotBytes = 0;    ///< one sending rank's slot
  size_t sharedBytes = 0;  ///< after the n slots
  size_t bufferBytes = 0;  ///< one buffer: n x slotBytes + sharedBytes
  size_t wordsOffset = 0;  ///< its local words

  /// Offset of buffer b (b < buffers).
  TPCOMM_HD size_t bufferAt(uint64_t b) const { return offset + b * bufferBytes; }
};

struct P2pLayout {
  int nRanks = 0;
  int maxBlocks = 0;  ///< flag, epoch and signature slots per (channel, rank)
  int channels = 0;   ///< regions
  size_t flagsOffset = 0, epochsOffset = 0, poisonOffset = 0, arrivalOffset = 0, signaturesOffset = 0;
  size_t totalBytes = 0;

  /// Call signatures (TPCOMM_CHECK_CALLS): [channel][from rank][block][3] u64, written by peers.
  TPCOMM_HD size_t signatureIndex(int channel, int from, int block, int slot) const {
    return ((static_cast<size_t>(channel) * nRanks + from) * maxBlocks + block) * 3 + slot;
  }
  TPCOMM_HD size_t flagIndex(int channel, int from, int block) const {
    return (static_cast<size_t>(channel) * nRanks + from) * maxBlocks + block;
  }
  TPCOMM_HD size_t epochIndex(int channel, int block) const { return static_cast<size_t>(channel) * maxBlocks + block; }
};

/// The buffer for a set of requests: the layout, and each distinct key's region.
struct P2pPlan {
  P2pLayout layout;
  std::vector<std::string> keys;
  std::vector<P2pRegion> regions;  ///< regions[i] is keys[i]'s
  /// keys' region, nullptr when nobody asked for it.
  const P2pRegion* find(const std::string& key) const;
};

/// Lays out `asks` for nRanks ranks (pure: the same on every rank for the same requests).
/// kInvalidArgument when two requests under one key differ or a grid is outside 1..1024.
Status planP2pBuffer(int nRanks, const std::vector<P2pScratchRequest>& asks, P2pPlan* out);

/// Lamport sentinel: a 32-bit word no payload word can equal (payload -0.0 halves/floats are
/// rewritten to +0.0 before sending).
constexpr uint32_t kLamportSentinel = 0x80000000u;

/// Most ranks a P2P kernel addresses (peer bases travel in the kernel's parameters).
constexpr int kMaxP2pRanks = 16;

class CudaP2pTransport {
 public:
  /// Collective. Allocates and maps the regions `asks` describe (planP2pBuffer). kNotSupported
  /// when some pair lacks verified P2P or this is not one node.
  static Status create(const TransportEnv& env, const std::vector<P2pScratchRequest>& asks,
                       std::unique_ptr<CudaP2pTransport>* out);
  ~CudaP2pTransport();

  const P2pLayout& layout() const { return plan_.layout; }
  /// The region asked for under `key`, nullptr when nobody asked for it.
  const P2pRegion* region(const std::string& key) const { return plan_.find(key); }
  int rank() const { return rank_; }
  int nRanks() const { return nRanks_; }
  /// Base of rank r's buffer as mapped in this process (r == rank(): the local buffer).
  char* base(int r) const { return peers_[r]; }

 private:
  CudaP2pTransport() = default;
  P2pPlan plan_;
  int rank_ = 0, nRanks_ = 1, device_ = -1;
  bool ipc_ = false;
  char* local_ = nullptr;
  std::vector<char*> peers_;
};

}  // namespace tpcomm
