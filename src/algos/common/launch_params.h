// The parameters tpcomm's kernels are launched with, one struct per kernel family, each filled
// in one place from the algorithm context and the call: P2pLaunch for oneshot_p2p, twoshot_p2p,
// lamport_p2p (P2pAlgorithm::launchParams) and FusedP2pLaunch for their fused twins;
// StagedDeviceLaunch for staged_host on GPU ranks; MulticastLaunch for twoshot_multicast.
#pragma once

#include <cstddef>
#include <cstdint>

#include "algos/common/coll_args.h"
#include "tpcomm/status.h"
#include "tpcomm/types.h"
#include "transports/cuda_p2p.h"
#include "transports/multicast.h"

namespace tpcomm {

struct P2pLaunch {
  const void* send;
  void* recv;
  size_t count;
  int dtype;  // DataType
  int op;     // ReduceOp
  int rank, nRanks;
  int blocks;
  char* peers[kMaxP2pRanks];  // every rank's buffer base as mapped here (peers[rank]: local)
  P2pLayout layout;
  uint32_t* errorWord;
  uint64_t timeoutNs;
  int pdl;  // launched with programmatic dependent launch (sm_90+)
  uint32_t signature;  // the call's signature (TPCOMM_CHECK_CALLS), 0: not checked
  int kind;            // CollKind: all-reduce, or (twoshot_p2p only) reduce-scatter / all-gather
};

/// Whether the kernels can use 16-byte vectors for these buffers.
inline bool p2pVectorizable(const void* send, const void* recv) {
  return (reinterpret_cast<uintptr_t>(send) % 16) == 0 && (reinterpret_cast<uintptr_t>(recv) % 16) == 0;
}

/// A fused P2P all-reduce + residual + norm: the plain kernel's parameters (send = in, recv =
/// out, count = rows * hidden, op sum, blocks = the plain kernel's grid) plus the norm's.
struct FusedP2pLaunch {
  P2pLaunch p2p;
  void* residual;
  const void* weight;
  float eps;
  size_t rows, hidden;
  // two-shot only: rows per chunk and rows each rank owns per chunk (fusedTwoshotGeometry).
  size_t rowsPerChunk, rowsPerRank;
};

/// Whether the fused kernels may use 16-byte vectors: every buffer aligned, rows whole units.
bool fusedVectorizable(const FusedP2pLaunch& f);

/// Two-shot geometry: rows per chunk such that the chunk's rows (normalised + residual, 2 x
/// rowBytes each) fit the gather area and each rank's share fits its inbox slice. false when one
/// row does not fit (the caller falls back to the unfused path).
bool fusedTwoshotGeometry(const P2pLayout& layout, size_t rows, size_t rowBytes, size_t* rowsPerChunk,
                          size_t* rowsPerRank);

/// Parameters of one GPU staged all-reduce (staged_host.cu).
struct StagedDeviceLaunch {
  const void* send;
  void* recv;
  size_t count;
  int dtype;  // DataType
  int op;     // ReduceOp
  int rank, nRanks;
  char* slots;  // rank 0's slot 0; rank r slot s at slots + (r*nSlots + s)*chunkBytes
  int nSlots;
  size_t chunkBytes;
  int blocks;           // per role
  uint64_t* ready;      // [rank][slot][block]
  uint64_t* consumed;   // [rank][slot][block]
  uint64_t seqBase;     // chunk c has sequence seqBase + c + 1
  uint32_t* errorWord;  // device view of the communicator's async error word
  uint64_t timeoutNs;
  // Compressed calls only (staged_host_compressed.cu): the QuantFormat, and quantization blocks
  // per CUDA block per chunk (stagedQuantBlocksPerPiece).
  int format;
  size_t quantBlocks;
  char* twin;  // this rank's slots in device memory (HostStagedTransport::deviceTwin): its own codes
  uint32_t* poison;  // copy-engine mode: the segment's shared failure word (HostStagedTransport::poisonWord)
};

/// Parameters of one multicast all-reduce (twoshot_multicast.cu).
struct MulticastLaunch {
  const void* send;
  void* recv;
  size_t count;
  int dtype;  // DataType
  int op;     // ReduceOp
  int rank, nRanks;
  int blocks;
  char* uc;  // this rank's allocation (unicast view)
  char* mc;  // the multicast view of the same offsets
  MulticastLayout layout;
  uint32_t* errorWord;
  uint64_t timeoutNs;
};

/// Whether multimem.ld_reduce can reduce this type with this op: add for f32/f16/bf16 (16-bit
/// types accumulated in fp32 by .acc::f32); max/min for f16/bf16 only (PTX has no f32 max/min).
bool multicastReducible(DataType dtype, ReduceOp op);

}  // namespace tpcomm
