// Communicator internals shared by the files that implement it: communicator.cc (the API),
// call_path.cc (selection and the candidate loop), init_table.cc. Not installed.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#ifdef TPCOMM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "algos/common/algorithm.h"
#include "collectives/algo_override.h"
#include "collectives/bring_up.h"
#include "collectives/selector.h"
#include "collectives/tuning_load.h"
#include "common/error.h"
#include "tpcomm/communicator.h"

namespace tpcomm {

struct Communicator::Impl {
  std::unique_ptr<Bootstrap> ownedBootstrap;  // createGroup's thread bootstraps
  Bootstrap* bootstrap = nullptr;
  // Config::setupTimeoutMs, else Config::timeoutMs (0: none): bounds the bootstrap's exchanges in
  // create and destroy (bootstrap/bootstrap_timeout.h); the source names it in messages.
  int setupTimeoutMs = 0;
  const char* setupTimeoutSource = "";
  std::unique_ptr<AlgoContext> ctx = std::make_unique<AlgoContext>();
  std::vector<std::unique_ptr<Algorithm>> algos;
  std::vector<Algorithm*> algoList;
  AlgoOverride override;
  TransportReport transports;
  TuningState tuning;                  // the measured table the selector uses (null: the cost model only)
  const char* lastAlgorithm = "none";  // an algorithm's name() (static storage)
  bool destroyed = false;
  // Set while a thread is inside an entry point (communicator.cc, CallScope): a communicator takes
  // one caller at a time, like an NCCL communicator, and a second one is refused, not let in.
  std::atomic<bool> inCall{false};
  bool compressionFallbackSaid = false;  // the INFO line "compression on, this call ran uncompressed", once
  // The stream of the previous GPU call (compared, never used: the caller may have destroyed it)
  // and the event recorded at the end of every eager GPU call, which orders a call on another
  // stream after it (call_path.cc, followPreviousStream, recordCallEnd).
  bool haveLastStream = false;
  cudaStream_t lastStream = nullptr;
  void* streamOrderEvent = nullptr;  // cudaEvent_t, made at the first eager GPU call
  bool orderStreams = true;  // false only where no CUDA runs (bench/micro's stubbed launches)

  // Selections already made, by call shape (kind, dtype, op, bytes, per-call compression or -1),
  // for both stream modes: the selector is pure, so a decode loop that repeats the same few sizes
  // pays for it once.
  using ShapeKey = std::tuple<int, int, int, size_t, int>;
  struct CachedSelection {
    ShapeSelection sel;
    // Both modes start with the same algorithm, one that only refuses by call shape or enqueues
    // a kernel on the stream (Algorithm::launchesOnly): the capture query is needed only if it
    // declines (the rest of the list may depend on the mode) or fails.
    bool deferCaptureQuery = false;
  };
  std::map<ShapeKey, CachedSelection> selectionCache;
  // The last shape looked up. Safe: std::map never moves its entries, and the pointer is reset
  // whenever the map is cleared (the only removal).
  ShapeKey lastShape{-1, -1, -1, 0, -1};
  const CachedSelection* lastSelection = nullptr;

  ~Impl();
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

/// Selects and runs the collective `a` (fills nRanks, and capturing when queried), falling back
/// to the next candidate on kNotSupported; records lastAlgorithm. With `norm`, the call is
/// allReduceResidualRmsNorm: each candidate's fused kernel where it has one, else its all-reduce
/// then the separate norm. `what` names the API call in messages.
Status runCollective(Communicator::Impl& impl, CollArgs& a, const NormArgs* norm, const char* what);

/// Group bookkeeping (Communicator::groupStart / groupEnd). Inside a group NCCL defers its
/// all-reduce to the outermost ncclGroupEnd, so a norm that must follow such an all-reduce is
/// queued on this thread and launched right after that groupEnd.
void normGroupStarted();
/// Returns `groupEndStatus`, or the first failure of a queued norm launch.
Status normGroupEnded(Status groupEndStatus);

/// The INFO table of a new communicator: ranks, link matrix, transports and why not,
/// the algorithm per size bucket.
std::string initTable(const Communicator::Impl& impl);

}  // namespace tpcomm
