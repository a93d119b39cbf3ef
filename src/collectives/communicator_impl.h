// Communicator internals shared by the files that implement its methods (communicator.cc and
// one file per further API family). Not installed.
#pragma once

#include <map>
#include <memory>
#include <tuple>
#include <vector>

#ifdef TPCOMM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "collectives/algo_override.h"
#include "collectives/comm_context.h"
#include "collectives/selector.h"
#include "common/error.h"
#include "tpcomm/communicator.h"

namespace tpcomm {

struct Communicator::Impl {
  std::unique_ptr<Bootstrap> ownedBootstrap;  // createGroup's thread bootstraps
  std::unique_ptr<CommContext> ctx;
  std::vector<std::unique_ptr<Algorithm>> algos;
  std::vector<Algorithm*> algoList;
  AlgoOverride override;
  const char* lastAlgorithm = "none";       // an algorithm's name() (static storage)
  std::unique_ptr<uint32_t> hostErrorWord;  // host ranks' async error word
  bool destroyed = false;
  // Read once at create, like P2pAlgorithm's own copies: the fused kernels share the plain
  // kernels' per-block epochs, so they must use the same grid for the communicator's lifetime.
  int p2pBlocks = 0, twoshotBlocks = 0;
  int fusedBlocksPerRow = 0;  ///< TPCOMM_FUSED_BLOCKS_PER_ROW, read at create
  bool pdl = false;  // programmatic dependent launch (sm_90+, TPCOMM_PDL)

  // Selections already made, by call shape (kind, dtype, op, bytes), for both stream modes: the
  // selector is pure, so a decode loop that repeats the same few sizes pays for it once.
  using ShapeKey = std::tuple<int, int, int, size_t>;
  struct CachedSelection {
    ShapeSelection sel;
    // Both modes start with the same P2P algorithm on a GPU rank. Its run() only refuses by call
    // shape (kNotSupported, before touching the stream) or enqueues a kernel on the stream, so
    // the capture query is needed only if it declines (the rest of the list may depend on the
    // mode) or fails (an invalid stream is then reported as the query reports it).
    bool deferCaptureQuery = false;
  };
  std::map<ShapeKey, CachedSelection> selectionCache;
  // The last shape looked up. Safe: std::map never moves its entries, and the pointer is reset
  // whenever the map is cleared (the only removal).
  ShapeKey lastShape{-1, -1, -1, 0};
  const CachedSelection* lastSelection = nullptr;
};

#ifdef TPCOMM_HAVE_CUDA
// Switches to `device` for the scope of a call and restores the caller's device. Per call:
// one cudaGetDevice (a thread-local read in the runtime); cudaSetDevice only when the caller's
// current device differs (twice then: switch and restore). The current device is not cached
// here: the caller may change it between calls with cudaSetDevice.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (device < 0) return;
    if (cudaGetDevice(&prev_) != cudaSuccess) prev_ = -1;
    if (prev_ != device)
      cudaSetDevice(device);
    else
      prev_ = -1;
  }
  ~DeviceGuard() {
    if (prev_ >= 0) cudaSetDevice(prev_);
  }

 private:
  int prev_ = -1;
};
#else
struct DeviceGuard {
  explicit DeviceGuard(int) {}
};
#endif

// Opening of every collective entry point (inside a Communicator member): clears the thread's
// error, rejects use after destroy(), reports an earlier asynchronous failure, switches device.
#define TPCOMM_API_ENTRY(what)                                                                       \
  clearError();                                                                                      \
  if (!impl_ || impl_->destroyed) return TPCOMM_INVALID("%s: the communicator was destroyed", what); \
  TPCOMM_TRY(checkError());                                                                          \
  DeviceGuard guard(impl_->ctx->device)

/// Fills a.nRanks and checks that host ranks pass a null stream. No CUDA call: the stream's
/// capture status is left to candidatesFor().
Status prepareCall(Communicator::Impl& impl, CollArgs& a, const char* what);

/// The candidates of one prepared call. `list` is walked in order; while `captureKnown` is false,
/// a.capturing is not yet known (left false) and only list[0], which is the same algorithm in
/// both modes, may run: an algorithm's run() must not depend on a.capturing.
struct CallCandidates {
  const Communicator::Impl::CachedSelection* entry = nullptr;
  const std::vector<Candidate>* list = nullptr;
  bool captureKnown = false;
};
/// Looks the call shape up (cached) and, unless the entry defers it, queries the stream's capture
/// status (kInvalidArgument for an invalid stream) to pick the list. kNotSupported when no
/// algorithm supports the call.
Status candidatesFor(Communicator::Impl& impl, CollArgs& a, const char* what, CallCandidates* out);
/// To call when candidate 0 returned anything but kOk while !captureKnown: queries the capture
/// status (kInvalidArgument for an invalid stream, as candidatesFor would have) and switches to
/// that mode's list, which also starts with candidate 0, so the walk goes on at index 1.
Status resolveCapture(Communicator::Impl& impl, CollArgs& a, const char* what, CallCandidates* c);
/// Selects and runs the collective `a` (fills nRanks, and capturing when queried), falling back
/// to the next candidate on kNotSupported; records lastAlgorithm. `what` names the API call in
/// messages.
Status runCollective(Communicator::Impl& impl, CollArgs& a, const char* what);

}  // namespace tpcomm
