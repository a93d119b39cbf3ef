// tune_timer.h: one rank's side of `tpcomm-doctor --tune`: its buffers (and, on a GPU rank, its
// stream and events) and one timed batch of warm all-reduces on a communicator. GPU ranks time
// with CUDA events around the batch on the rank's stream; host ranks (device -1) with
// steady_clock around the synchronous calls.
#pragma once

#include <cstddef>
#include <memory>

#include "tpcomm/communicator.h"

namespace tpcomm {

class RankTimer {
 public:
  /// Buffers of `maxBytes` (send and recv) on `device` (-1: host memory). kCudaError /
  /// kSystemError with a message when they cannot be had.
  static Status create(int device, size_t maxBytes, std::unique_ptr<RankTimer>* out);
  /// CUDA devices this process sees (CUDA_VISIBLE_DEVICES applies); 0 without CUDA or a driver.
  static int visibleDevices();
  ~RankTimer();
  RankTimer(const RankTimer&) = delete;
  RankTimer& operator=(const RankTimer&) = delete;

  /// `calls` out-of-place all-reduces (sum) of `count` elements of `dtype` on `comm`, back to
  /// back; *us = the batch's time, complete when this returns (GPU: the stream was waited for).
  Status timeBatch(Communicator& comm, size_t count, DataType dtype, int calls, double* us);

 private:
  RankTimer() = default;
  int device_ = -1;
  void* send_ = nullptr;
  void* recv_ = nullptr;
  void* stream_ = nullptr;  // cudaStream_t
  void* start_ = nullptr;   // cudaEvent_t
  void* stop_ = nullptr;
};

}  // namespace tpcomm
