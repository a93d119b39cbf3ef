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
  // Selections already made, by call shape: the selector is pure, so a decode loop that repeats
  // the same few sizes pays for it once.
  std::map<std::tuple<int, int, int, size_t, bool>, std::vector<Candidate>> selectionCache;
};

#ifdef TPCOMM_HAVE_CUDA
// Switches to `device` for the scope of a call and restores the caller's device.
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

/// Fills a.nRanks and a.capturing and checks the stream (a CUDA stream on GPU ranks, null on
/// host ranks).
Status prepareCall(Communicator::Impl& impl, CollArgs& a, const char* what);
/// The candidate algorithms for a prepared call, best first (cached per call shape);
/// kNotSupported when none supports it.
Status candidatesFor(Communicator::Impl& impl, const CollArgs& a, const char* what, const std::vector<Candidate>** out);
/// Selects and runs the collective `a` (fills nRanks and capturing), falling back to the next
/// candidate on kNotSupported; records lastAlgorithm. `what` names the API call in messages.
Status runCollective(Communicator::Impl& impl, CollArgs& a, const char* what);

}  // namespace tpcomm
