// setup: the lazy set-up of tpcomm under a real NCCL communicator, and its teardown. Set-up
// runs at the first ncclAllReduce whose shape could go to tpcomm, outside any group (else after
// the outermost ncclGroupEnd) and never while the call's stream is capturing; a communicator
// still initializing (non-blocking: ncclCommGetAsyncError says ncclInProgress) stays pending
// and is tried again at a later call. Shapes:
//   - one rank in this process: ncclCommSplit a private non-blocking communicator off the real
//     one, run tpcomm's NCCL bootstrap over it and Communicator::create; every rank then agrees
//     on the outcome, so all use tpcomm or none does. A timeout aborts only the private split.
//   - all ranks made by one creation in this process (ncclCommInitAll, or InitRank/Split calls
//     in one group): Communicator::createGroup over the same devices, rank for rank.
//   - anything else (some but not all ranks in this process): tpcomm stays off for it.
// Set-up failures turn tpcomm off for that communicator (the real NCCL runs everything) and
// are logged once at WARN; they never fail the engine's call.
#pragma once

#include <memory>

#include "shim/comm_table.h"
#include "shim/real_nccl.h"

namespace tpcomm {
namespace shim {

/// Reads rank, size and device once the real communicator is ready. Caller holds c.mu. False
/// while it is still initializing.
bool refreshInfo(ShimComm& c, const RealNccl& real);

/// Sets up tpcomm for `c` (and, for a clique, for all its ranks) if it is still pending and
/// ready. `stream` is the triggering call's stream (drained, bounded, before the exchange) or
/// null. Takes the entries' locks itself.
void runSetup(const std::shared_ptr<ShimComm>& c, const RealNccl& real, cudaStream_t stream);

/// Releases tpcomm's state for `c` before the real ncclCommDestroy/Finalize (`abort` false:
/// collective, peers are tearing down too) or ncclCommAbort (`abort` true: never waits on a
/// peer). Leaves c disabled.
void teardown(ShimComm& c, const RealNccl& real, bool abort);

}  // namespace shim
}  // namespace tpcomm
