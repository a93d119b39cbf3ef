// staged_host: what its class (staged_host.cc), its kernels (staged_host.cu,
// staged_host_compressed.cu, staged_host_ce.cu) and its host schedules (staged_host.cc,
// staged_host_compressed.cc) share.
#pragma once

#include <cstddef>
#include <cstdint>

#include "algos/common/launch_params.h"
#include "algos/common/launch_shape.h"
#include "algos/compressed/quantize.h"
#include "tpcomm/status.h"

namespace tpcomm {

class HostStagedTransport;

/// Parameters of one GPU staged all-reduce (staged_host.cu, staged_host_compressed.cu, and the
/// copy-engine mode's kernels).
struct StagedDeviceLaunch : CallParams {
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
  char* twin;        // this rank's slots in device memory (HostStagedTransport::deviceTwin): its own codes
  uint32_t* poison;  // the segment's failure word, every rank's (HostStagedTransport::poisonWord)
  // Why a peer was late when a wait for it expires (common/async_error.h): this call's number
  // (CollArgs::callNumber), every rank's host call counter (rank r's at r * kCallCounterWords) and
  // every rank's arrival word, which this rank's kernel sets to arrivalStarted(callNumber) as it
  // starts (the segment's).
  uint64_t callNumber;
  const uint64_t* hostCalls;
  uint64_t* arrivals;
  // TPCOMM_CHECK_CALLS: the call's signature (callSignature; 0: not checked) and the words beside
  // the ready flags where publishers put it (HostStagedTransport::signatureFlags, same index).
  uint32_t signature;
  uint64_t* signatures;
};

/// The SM kernels' grid: p.blocks publishers, then p.blocks reducers; no PDL (not graph-capturable
/// anyway, and each call's flags are in host memory).
inline LaunchShape stagedShape(const StagedDeviceLaunch& p) {
  return LaunchShape{2u * static_cast<unsigned>(p.blocks), static_cast<unsigned>(kThreads), false};
}

/// Enqueue the SM kernel, plain (staged_host.cu) or compressed (staged_host_compressed.cu).
Status launchStagedDevice(const StagedDeviceLaunch& p, cudaStream_t stream);
Status launchStagedCompressed(const StagedDeviceLaunch& p, cudaStream_t stream);
/// Loads their kernels.
Status preloadStagedDevice();
Status preloadStagedCompressedKernels();

/// The compressed all-reduce on host ranks (staged_host_compressed.cc); the caller has checked the
/// call's signature on every rank.
Status stagedHostCompressedAllReduce(HostStagedTransport& t, const CollArgs& a, QuantFormat f);

}  // namespace tpcomm
