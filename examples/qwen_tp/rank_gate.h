// rank_gate.h: where the rank threads of one process wait for each other, and what each rank's
// host is doing when a collective times out.
//
// Why: ranks in one process share the CUDA driver (and, sharing a GPU, one context). Some host
// calls wait for the whole device or a driver lock: module loads, cuBLAS handle creation, pinned
// allocations at init, making a CUDA graph (instantiate, upload), and now and then a
// cublasGemmEx (seen on an H200: every rank's host in it for the whole 10 s timeout). A rank
// that got there first has an all-reduce spinning on the device that waits for this very rank,
// so the call times out ("rank 1 never made this call"). So no rank starts a collective before
// every rank's init is done (pass), no rank launches a newly made graph before every rank has
// made its own (arrive), and in an eager call no rank launches an all-reduce before every rank's
// host has come to it (arrive, GpuModel::collectiveGate): then every all-reduce on the device has
// all its ranks' kernels queued, and the device drains without any host's help. Each costs
// microseconds of host time; graph replays (the decode steps) pass none of them.
//
// Every wait is bounded: arrive() gives up after `bound` with the ranks that did not come and
// where their hosts were; a rank that fails calls leave(), and its peers' waits end at once.
// mark() records each rank's current host step; describe() prints them, and the last step of
// each rank that took over a second, for a timeout's message.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

namespace qwen {

class RankGate {
 public:
  using Clock = std::chrono::steady_clock;

  explicit RankGate(int ranks, std::chrono::milliseconds bound = std::chrono::seconds(120))
      : ranks_(ranks), bound_(bound), seen_(static_cast<size_t>(ranks), 0), steps_(static_cast<size_t>(ranks)) {}

  /// The init agreement: every rank calls this once, with whether its init succeeded (also on
  /// its failure paths, so no rank waits for one that gave up). Returns true when all ranks
  /// succeeded. Not bounded by `bound` (init loads weights: minutes for a large checkpoint); a
  /// rank whose init fails says so here instead of leaving its peers waiting.
  bool pass(bool ok) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!ok) initFailed_ = true;
    if (++initArrived_ == ranks_) cv_.notify_all();
    cv_.wait(lock, [this] { return initArrived_ >= ranks_; });
    return !initFailed_;
  }

  /// A reusable barrier: returns when every rank has called arrive() as often as this one (true),
  /// or false with *error set when a rank left or `bound` passed first (the missing ranks and
  /// their current host steps named). `what` names the point in the message.
  bool arrive(int rank, const char* what, std::string* error) {
    std::unique_lock<std::mutex> lock(mu_);
    const long long round = ++seen_[static_cast<size_t>(rank)];
    auto all = [&] {
      for (long long s : seen_)
        if (s < round) return false;
      return true;
    };
    if (all()) cv_.notify_all();
    const bool met = cv_.wait_for(lock, bound_, [&] { return all() || left_ >= 0; });
    if (met && all()) return true;
    std::string missing;
    for (int r = 0; r < ranks_; ++r)
      if (seen_[static_cast<size_t>(r)] < round) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    if (left_ >= 0)
      *error = std::string(what) + ": rank " + std::to_string(left_) + " gave up (its own error says why)";
    else
    {
      char waited[32];
      std::snprintf(waited, sizeof waited, "%.1f", static_cast<double>(bound_.count()) / 1e3);
      *error = std::string(what) + ": rank " + std::to_string(rank) + " waited " + waited + " s for rank(s) " +
               missing + "; " + describeLocked();
    }
    return false;
  }

  /// A rank that fails: peers waiting in arrive() now or later return false at once.
  void leave(int rank) {
    std::lock_guard<std::mutex> lock(mu_);
    if (left_ < 0) left_ = rank;
    cv_.notify_all();
  }

  /// Rank `rank`'s host now does `step` (a string literal). The step it leaves is remembered
  /// when it took over a second.
  void mark(int rank, const char* step) {
    Step& s = steps_[static_cast<size_t>(rank)];
    const auto now = Clock::now();
    const char* prev = s.now.load(std::memory_order_relaxed);
    const auto since = Clock::time_point(Clock::duration(s.since.load(std::memory_order_relaxed)));
    if (prev && now - since > std::chrono::seconds(1)) {
      s.slow.store(prev, std::memory_order_relaxed);
      s.slowMs.store(std::chrono::duration_cast<std::chrono::milliseconds>(now - since).count(),
                     std::memory_order_relaxed);
    }
    s.since.store(now.time_since_epoch().count(), std::memory_order_relaxed);
    s.now.store(step, std::memory_order_release);
  }

  /// "where the ranks' hosts were: rank 0 <step> for 10.0 s, ...; rank 1's last step over 1 s:
  /// <step> (10.0 s)".
  std::string describe() const {
    std::lock_guard<std::mutex> lock(mu_);
    return describeLocked();
  }

 private:
  struct Step {
    std::atomic<const char*> now{nullptr};
    std::atomic<Clock::rep> since{0};
    std::atomic<const char*> slow{nullptr};
    std::atomic<long long> slowMs{0};
  };

  std::string describeLocked() const {
    const auto now = Clock::now();
    std::string out = "where the ranks' hosts were:";
    for (int r = 0; r < ranks_; ++r) {
      const Step& s = steps_[static_cast<size_t>(r)];
      const char* step = s.now.load(std::memory_order_acquire);
      char line[256];
      if (!step) {
        std::snprintf(line, sizeof line, " rank %d no step marked;", r);
      } else {
        const auto since = Clock::time_point(Clock::duration(s.since.load(std::memory_order_relaxed)));
        std::snprintf(line, sizeof line, " rank %d %s for %.1f s;", r, step,
                      std::chrono::duration<double>(now - since).count());
      }
      out += line;
      if (const char* slow = s.slow.load(std::memory_order_relaxed)) {
        std::snprintf(line, sizeof line, " its last step over 1 s: %s (%.1f s);", slow,
                      static_cast<double>(s.slowMs.load(std::memory_order_relaxed)) / 1e3);
        out += line;
      }
    }
    out.pop_back();
    return out;
  }

  mutable std::mutex mu_;
  std::condition_variable cv_;
  const int ranks_;
  const std::chrono::milliseconds bound_;
  int initArrived_ = 0;
  bool initFailed_ = false;
  std::vector<long long> seen_;  // arrive() calls per rank
  int left_ = -1;                // the first rank that left, or -1
  std::vector<Step> steps_;
};

}  // namespace qwen
