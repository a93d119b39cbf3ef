// The parameters of the P2P kernels: P2pLaunch for every plain kernel over the cuda_p2p buffer
// (filled by P2pAlgorithm::launchParams) and FusedP2pLaunch for the fused all-reduce + residual +
// RMSNorm twins.
#pragma once

#include <cstddef>
#include <cstdint>

#include "algos/common/launch_params.h"
#include "transports/cuda_p2p.h"

namespace tpcomm {

struct P2pLaunch : CallParams {
  int blocks;
  char* peers[kMaxP2pRanks];  // every rank's buffer base as mapped here (peers[rank]: local)
  P2pLayout layout;
  P2pRegion region;  // the launching algorithm's region of every rank's buffer
  uint32_t* errorWord;
  uint64_t timeoutNs;
  int pdl;             // launched with programmatic dependent launch (sm_90+)
  uint32_t signature;  // the call's signature (TPCOMM_CHECK_CALLS), 0: not checked
  int kind;            // CollKind: all-reduce, or (twoshot_p2p, ll_p2p) reduce-scatter / all-gather
  // Why a peer was late, when a wait for it expires (common/async_error.h): this call's number
  // (CollArgs::callNumber; 0: unknown) and every rank's host call counter, rank r's at
  // hostCalls[r * kCallCounterWords] (the host segment's, HostStagedTransport::callCounters; null
  // without one).
  uint64_t callNumber;
  const uint64_t* hostCalls;
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

/// A P2P algorithm's kernels as its class calls them (P2pAlgorithm): the algorithm's header
/// declares its set, its .cu defines it. launchFused nullptr: no fused kernel.
struct P2pKernels {
  Status (*preload)();  ///< loads every kernel the launchers may launch (Algorithm::preload)
  Status (*launch)(const P2pLaunch& p, cudaStream_t stream);
  Status (*launchFused)(const FusedP2pLaunch& f, cudaStream_t stream);
};

/// An algorithm's kernel set as its class holds it: the .cu's in a build with CUDA, none
/// without (no kernel is built, and create refuses GPU ranks before any launch).
#ifdef TPCOMM_HAVE_CUDA
#define TPCOMM_P2P_KERNELS(kernels) (&(kernels))
#else
#define TPCOMM_P2P_KERNELS(kernels) nullptr
#endif

}  // namespace tpcomm
