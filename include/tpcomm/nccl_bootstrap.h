// Bootstrap over an existing NCCL communicator: tpcomm's set-up exchange (allGather, barrier)
// carried by NCCL's own AllGather on a small device buffer, so an engine that already has an
// NCCL communicator needs no MPI and no second rendezvous. Used by libtpcomm_nccl.so (the
// NCCL-API drop-in), usable by any engine that links NCCL.
//
// Every exchange is bounded by the timeout: the host polls the stream and
// ncclCommGetAsyncError; on expiry it calls ncclCommAbort on the communicator (the only way
// to free a GPU spinning on a peer that never arrives) and reports kTimeout. Hand it a
// communicator you can afford to lose, e.g. one made with ncclCommSplit for the purpose (the
// shim does this), not the engine's working communicator.
#pragma once

#include <nccl.h>

#include <memory>

#include "tpcomm/bootstrap.h"

namespace tpcomm {

/// The NCCL entry points the bootstrap calls. A program that links NCCL passes
/// linkedNcclFunctions(); the shim passes the real NCCL's, resolved with dlsym.
struct NcclFunctions {
  decltype(&ncclAllGather) allGather = nullptr;
  decltype(&ncclCommGetAsyncError) commGetAsyncError = nullptr;
  decltype(&ncclCommAbort) commAbort = nullptr;
  decltype(&ncclGetErrorString) getErrorString = nullptr;
  decltype(&ncclCommCount) commCount = nullptr;
  decltype(&ncclCommUserRank) commUserRank = nullptr;
  decltype(&ncclCommCuDevice) commCuDevice = nullptr;
};

/// The functions of the NCCL this program links (inline: references NCCL only where used).
inline NcclFunctions linkedNcclFunctions() {
  NcclFunctions f;
  f.allGather = &ncclAllGather;
  f.commGetAsyncError = &ncclCommGetAsyncError;
  f.commAbort = &ncclCommAbort;
  f.getErrorString = &ncclGetErrorString;
  f.commCount = &ncclCommCount;
  f.commUserRank = &ncclCommUserRank;
  f.commCuDevice = &ncclCommCuDevice;
  return f;
}

/// A Bootstrap whose rank and size are those of `comm` (ncclCommUserRank, ncclCommCount) and
/// whose exchanges run on `comm`'s device, on a stream of its own. `comm` must be initialized
/// (for a non-blocking communicator: ncclCommGetAsyncError reports ncclSuccess) and outlive
/// the bootstrap. `timeoutMs` bounds each exchange (0: TPCOMM_TIMEOUT_MS). Collective calls
/// on it follow NCCL's rules: every rank makes them in the same order.
/// kInvalidArgument for a null comm or a function missing from `nccl`.
Status makeNcclBootstrap(ncclComm_t comm, const NcclFunctions& nccl, int timeoutMs, std::unique_ptr<Bootstrap>* out);

/// Makes every later exchange of an NCCL bootstrap fail at once with kRemoteError, touching
/// neither NCCL nor the GPU (for a teardown that must not wait for peers, e.g. ncclCommAbort).
/// No-op for other bootstraps.
void abandonNcclBootstrap(Bootstrap* bootstrap);

/// Whether an NCCL bootstrap aborted its communicator after a timeout (the communicator must
/// then not be used or destroyed again). False for other bootstraps.
bool ncclBootstrapAborted(const Bootstrap* bootstrap);

}  // namespace tpcomm
