// rank_gate.h: the point after model init where the rank threads of one process wait for each
// other before the first collective.
//
// Why: when ranks share a GPU, one rank's init (module loads, cuBLAS handle creation, pinned
// allocations) can wait for the whole device to go idle, and a rank that finished init first
// has a spinning all-reduce on that device that waits for this very rank: the call times out
// (seen in QwenPrefillGpu.OverlappedPrefillEqualsSerialTp2). With one GPU per rank the wait
// costs nothing measurable (init takes seconds; the gate microseconds).
#pragma once

#include <condition_variable>
#include <mutex>

namespace qwen {

class RankGate {
 public:
  explicit RankGate(int ranks) : ranks_(ranks) {}

  /// Every rank calls this once, with whether its init succeeded (also on its failure paths, so
  /// no rank waits for one that gave up). Returns true when all ranks succeeded.
  bool pass(bool ok) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!ok) failed_ = true;
    if (++arrived_ == ranks_) cv_.notify_all();
    cv_.wait(lock, [this] { return arrived_ >= ranks_; });
    return !failed_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  const int ranks_;
  int arrived_ = 0;
  bool failed_ = false;
};

}  // namespace qwen
