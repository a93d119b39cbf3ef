// cuda_p2p: one device buffer per rank, mapped into every peer of the node, holding the flags and
// scratch areas the P2P algorithms push into. Across processes the buffer is shared with CUDA IPC
// handles (cudaIpcGetMemHandle / cudaIpcOpenMemHandle): the handle is 64 plain bytes that the
// bootstrap already knows how to gather, it needs no socket or fd passing, and every driver that
// has P2P supports it; the cost (one mapping per cudaMalloc, no sub-range export) does not matter
// for one long-lived buffer. Inside one process (createGroup) peers use peer access and raw
// pointers. Kernels only ever *write* to peers (stores are posted over NVLink/PCIe and need no
// round trip) and read their own memory.
//
// Layout of each rank's buffer (identical on every rank, offsets in P2pLayout):
//   flags    [algo][from rank][block] u64, written by peers with st.release.sys
//   epochs   [algo][block] u64, this rank's own per-block call counters (never read by peers),
//            then 3 u64 (bytes each Lamport buffer carried) and the poison word (u32: set by any
//            rank's kernel whose bounded wait expired, in every rank's buffer; algos/p2p/p2p_common.cuh)
//   sigs     [algo][from rank][block][3] u64 call signatures (TPCOMM_CHECK_CALLS; algos/p2p/p2p_common.cuh)
//   lamport  3 buffers x [from rank][lamportBytes] (zero here; lamport_p2p's setUp() fills
//            them with its sentinel before any peer can write)
//   oneshot  2 buffers x [from rank][oneshotBytes]
//   twoshot  2 buffers x ([from rank][sliceCap] reduce-scatter inbox + [chunkBytes] gather area)
//   ll       2 buffers x [from rank][llSlotBytes] 16-byte lines of ll_p2p (two 4-byte data words
//            each beside the call's flag; zero here, and no flag is ever 0)
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "tpcomm/status.h"
#include "transports/transport_env.h"

#include "common/host_device.h"  // layout accessors are used by host code and kernels alike

namespace tpcomm {

enum P2pAlgo : int { kP2pLamport = 0, kP2pOneshot = 1, kP2pTwoshot = 2, kP2pLl = 3, kP2pAlgoCount = 4 };

struct P2pLayout {
  int nRanks = 0;
  int maxBlocks = 0;           ///< flag slots per (algo, rank)
  size_t lamportBytes = 0;     ///< largest lamport message
  size_t oneshotBytes = 0;     ///< largest one-shot message
  size_t twoshotChunk = 0;     ///< two-shot bytes per chunk (messages loop over chunks)
  size_t twoshotSliceCap = 0;  ///< bytes of one rank's inbox slice per chunk
  size_t llBytes = 0;          ///< largest ll_p2p message (reduce-scatter input, all-gather output)
  size_t llSlotBytes = 0;      ///< one rank's piece as 16-byte lines (8 payload bytes each)
  size_t flagsOffset = 0, epochsOffset = 0, poisonOffset = 0, signaturesOffset = 0;
  size_t lamportOffset = 0, oneshotOffset = 0, twoshotOffset = 0, llOffset = 0;
  size_t totalBytes = 0;

  static P2pLayout make(int nRanks, int maxBlocks, size_t lamportBytes, size_t oneshotBytes, size_t twoshotChunk,
                        size_t llBytes = 0);
  /// Call signatures (TPCOMM_CHECK_CALLS): [algo][from rank][block][3] u64, written by peers.
  TPCOMM_HD size_t signatureIndex(int algo, int from, int block, int slot) const {
    return ((static_cast<size_t>(algo) * nRanks + from) * maxBlocks + block) * 3 + slot;
  }
  TPCOMM_HD size_t flagIndex(int algo, int from, int block) const {
    return (static_cast<size_t>(algo) * nRanks + from) * maxBlocks + block;
  }
  TPCOMM_HD size_t lamportBufferBytes() const { return lamportBytes * nRanks; }
  TPCOMM_HD size_t oneshotBufferBytes() const { return oneshotBytes * nRanks; }
  TPCOMM_HD size_t twoshotBufferBytes() const { return twoshotSliceCap * nRanks + twoshotChunk; }
  TPCOMM_HD size_t llBufferBytes() const { return llSlotBytes * nRanks; }
};

/// Lamport sentinel: a 32-bit word no payload word can equal (payload -0.0 halves/floats are
/// rewritten to +0.0 before sending).
constexpr uint32_t kLamportSentinel = 0x80000000u;

/// Most ranks a P2P kernel addresses (peer bases travel in the kernel's parameters).
constexpr int kMaxP2pRanks = 16;

class CudaP2pTransport {
 public:
  /// What the buffer must hold (rounded up by P2pLayout::make).
  struct Sizes {
    int maxBlocks = 0;  ///< flag and epoch slots per (algorithm, rank): the largest grid
    size_t lamportBytes = 0, oneshotBytes = 0, twoshotChunk = 0, llBytes = 0;
  };
  /// Collective. kNotSupported when some pair lacks verified P2P or this is not one node.
  static Status create(const TransportEnv& env, const Sizes& sizes, std::unique_ptr<CudaP2pTransport>* out);
  ~CudaP2pTransport();

  const P2pLayout& layout() const { return layout_; }
  int rank() const { return rank_; }
  int nRanks() const { return nRanks_; }
  /// Base of rank r's buffer as mapped in this process (r == rank(): the local buffer).
  char* base(int r) const { return peers_[r]; }

 private:
  CudaP2pTransport() = default;
  P2pLayout layout_;
  int rank_ = 0, nRanks_ = 1, device_ = -1;
  bool ipc_ = false;
  char* local_ = nullptr;
  std::vector<char*> peers_;
};

}  // namespace tpcomm
