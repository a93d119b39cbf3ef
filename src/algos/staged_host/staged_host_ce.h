// staged_host_ce.h: staged_host's copy-engine mode on GPU ranks (TPCOMM_STAGED_COPY_ENGINES=1,
// experimental; staged_host_ce.cu says who writes what where).
#pragma once

#include <cstddef>
#include <cstdint>

#include "algos/staged_host/staged_host.h"
#include "tpcomm/status.h"

typedef struct CUstream_st* cudaStream_t;

namespace tpcomm {

class HostStagedTransport;

/// The most chunks one call runs in this mode; a longer call runs the SM kernel (same slots,
/// flags and sequence numbers). Each chunk is ~13 + n stream operations (kernels, copies, event
/// records and waits on four streams): a thread that enqueues every rank's call (createGroup,
/// group calls) must not fill the launch queue with one rank's call while that call waits for
/// a rank not yet enqueued. 32 chunks is 128 MiB plain at the mode's 4 MiB chunks.
constexpr size_t kCeMaxChunks = 32;

/// Enqueues one all-reduce of p.count elements of es bytes, chunks of chunkElems, on `stream`.
Status runStagedCopyEngines(HostStagedTransport& t, const StagedDeviceLaunch& p, size_t es, bool compressed,
                            size_t chunkElems, cudaStream_t stream);
/// Loads every kernel of the mode (create, before any rank may spin).
Status preloadStagedCe();
/// Calls this process ran in the mode so far (tests: the mode really ran).
uint64_t stagedCopyEngineCalls();

}  // namespace tpcomm
