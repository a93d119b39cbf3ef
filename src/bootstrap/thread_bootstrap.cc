// Bootstrap for ranks that are threads of one process: a sequence-numbered rendezvous under one
// mutex. Every wait is bounded by TPCOMM_TIMEOUT_MS so a rank that never arrives yields kTimeout
// instead of a hang.
//
// Fencing: every rank numbers its own calls (exchange 0, 1, 2, ...) and ranks
// meet only in an exchange of the same number. A rank that gives up on exchange k (timeout, or a
// size mismatch) abandons it: k is marked abandoned with the reason, the ranks still waiting in
// it fail at once with kRemoteError, and a rank that arrives at k later fails at once with
// kRemoteError instead of completing k with what the others deposited. Nobody copies out of an
// exchange that one of its ranks left, and the next exchange (k + 1) starts clean, so the ranks
// are in step again.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "bootstrap/bootstrap_timeout.h"
#include "common/error.h"
#include "common/params.h"
#include "tpcomm/bootstrap.h"

namespace tpcomm {
namespace {

// "1, 3" (at most 16 listed, then "and N more").
std::string rankList(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size() && i < 16; ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > 16) s += " and " + std::to_string(ranks.size() - 16) + " more";
  return s;
}

class ThreadGroupImpl : public ThreadGroup {
 public:
  explicit ThreadGroupImpl(int n) : n_(n), nextSeq_(n, 0), in_(n, false) {}
  int size() const override { return n_; }

  // Each rank deposits `bytes` from `mine`; once all have, each copies out the whole table.
  // Two phases (deposit, then depart) so a fast rank's next exchange cannot overwrite the table
  // while a slow rank is still copying out.
  Status exchange(int rank, const void* mine, void* all, size_t bytes) {
    const int64_t timeoutMs = bootstrapTimeoutMs();
    const char* bound = bootstrapTimeoutSource();
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t k = nextSeq_[rank]++;  // this rank's exchange number, taken whatever happens
    // Wait until exchange k is the open one (exchange k-1 has drained) or k was abandoned.
    if (!cv_.wait_until(lock, deadline, [&] { return abandoned(k) || (current_ == k && departing_ == 0); })) {
      // Named: the ranks that hold up the exchange before k (still in it, or never came to it).
      const bool draining = departing_ > 0;
      const std::string late = rankList(draining ? stillDeparting() : missingRanks());
      abandon(k, "rank " + std::to_string(rank) + " timed out waiting for exchange " + std::to_string(k) +
                     " to open; rank(s) " + late + (draining ? " had not left" : " never arrived at") + " exchange " +
                     std::to_string(current_));
      return TPCOMM_ERROR(kTimeout,
                          "thread bootstrap: rank(s) %s %s exchange %llu within %lld ms (%s), so exchange %llu "
                          "could not open (rank %d waited)",
                          late.c_str(), draining ? "did not leave" : "never arrived at",
                          static_cast<unsigned long long>(current_), static_cast<long long>(timeoutMs), bound,
                          static_cast<unsigned long long>(k), rank);
    }
    if (abandoned(k)) return lateArrival(rank, k);
    if (arrived_ == 0) {
      bytes_ = bytes;
      table_.assign(bytes * n_, 0);
    } else if (bytes != bytes_) {
      char why[160];
      std::snprintf(why, sizeof(why), "rank %d passed %zu bytes per rank, the ranks before it %zu", rank, bytes,
                    bytes_);
      abandon(k, why);
      return TPCOMM_INVALID("thread bootstrap: exchange %llu: %s", static_cast<unsigned long long>(k), why);
    }
    if (bytes) std::memcpy(table_.data() + rank * bytes, mine, bytes);
    in_[rank] = true;
    if (++arrived_ == n_) {
      departing_ = n_;
      completed_ = k;
      anyCompleted_ = true;
      cv_.notify_all();
    } else if (!cv_.wait_until(lock, deadline, [&] { return isComplete(k) || abandoned(k); })) {
      std::vector<int> missing = missingRanks();
      std::string why = "rank " + std::to_string(rank) + " timed out after " + std::to_string(timeoutMs) +
                        " ms; missing: rank(s) " + rankList(missing);
      abandon(k, why);
      return TPCOMM_ERROR(kTimeout,
                          "thread bootstrap exchange %llu: rank(s) %s never arrived within %lld ms (%s; rank %d "
                          "waited, %d of %d arrived)",
                          static_cast<unsigned long long>(k), rankList(missing).c_str(),
                          static_cast<long long>(timeoutMs), bound, rank, n_ - static_cast<int>(missing.size()), n_);
    }
    if (!isComplete(k)) {  // another rank abandoned k while this one waited in it
      return TPCOMM_ERROR(kRemoteError, "thread bootstrap: rank %d: exchange %llu was abandoned: %s", rank,
                          static_cast<unsigned long long>(k), reason(k).c_str());
    }
    if (bytes) std::memcpy(all, table_.data(), bytes * n_);
    in_[rank] = false;  // left: what a drain timeout names is the ranks still in
    if (--departing_ == 0) {
      openNext();
      cv_.notify_all();
    }
    return Status::kOk;
  }

 private:
  bool abandoned(uint64_t k) const { return abandoned_.count(k) != 0; }
  bool isComplete(uint64_t k) const { return anyCompleted_ && completed_ == k; }
  std::string reason(uint64_t k) const {
    auto it = abandoned_.find(k);
    return it == abandoned_.end() ? std::string("(no reason recorded)") : it->second;
  }

  // The ranks of a completed exchange that have not copied out yet (in_ is cleared as they leave).
  std::vector<int> stillDeparting() const {
    std::vector<int> m;
    for (int r = 0; r < n_; ++r)
      if (in_[r]) m.push_back(r);
    return m;
  }

  std::vector<int> missingRanks() const {
    std::vector<int> m;
    for (int r = 0; r < n_; ++r)
      if (!in_[r]) m.push_back(r);
    return m;
  }

  // Marks exchange k abandoned. If k is the open exchange, its waiters are woken (they fail) and
  // the next exchange opens; a k not yet open is skipped when the exchanges reach it.
  void abandon(uint64_t k, const std::string& why) {
    abandoned_.emplace(k, why);
    if (current_ == k && departing_ == 0) openNext();
    cv_.notify_all();
  }

  Status lateArrival(int rank, uint64_t k) {
    return TPCOMM_ERROR(kRemoteError,
                        "thread bootstrap: rank %d arrived at exchange %llu after it was abandoned (%s); "
                        "it fails instead of completing it with stale data",
                        rank, static_cast<unsigned long long>(k), reason(k).c_str());
  }

  void openNext() {
    ++current_;
    while (abandoned(current_)) ++current_;
    arrived_ = 0;
    std::fill(in_.begin(), in_.end(), false);
    // Forget reasons far behind every rank (they can no longer be asked for).
    uint64_t oldest = *std::min_element(nextSeq_.begin(), nextSeq_.end());
    while (!abandoned_.empty() && abandoned_.begin()->first + 1 < oldest) abandoned_.erase(abandoned_.begin());
  }

  const int n_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<uint64_t> nextSeq_;  // per rank: the number of its next exchange
  std::vector<bool> in_;           // per rank: deposited in the open exchange
  uint64_t current_ = 0;           // the open exchange (or the one draining)
  uint64_t completed_ = 0;         // the last exchange every rank reached
  bool anyCompleted_ = false;
  int arrived_ = 0;
  int departing_ = 0;
  std::map<uint64_t, std::string> abandoned_;  // exchange number -> why it was abandoned
  size_t bytes_ = 0;
  std::vector<char> table_;
};

class ThreadBootstrap : public Bootstrap {
 public:
  ThreadBootstrap(std::shared_ptr<ThreadGroupImpl> g, int rank) : group_(std::move(g)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  Status allGather(const void* mine, void* all, size_t bytesPerRank) override {
    if ((!mine || !all) && bytesPerRank) return TPCOMM_INVALID("allGather: null buffer");
    if (bytesPerRank > SIZE_MAX / static_cast<size_t>(size()))
      return TPCOMM_INVALID("allGather: bytesPerRank %zu x %d ranks overflows a size_t", bytesPerRank, size());
    return group_->exchange(rank_, mine, all, bytesPerRank);
  }
  Status barrier() override { return group_->exchange(rank_, nullptr, nullptr, 0); }

 private:
  std::shared_ptr<ThreadGroupImpl> group_;
  int rank_;
};

thread_local int tScopedTimeoutMs = 0;  // ScopedBootstrapTimeout's bound on this thread; 0: none
thread_local const char* tScopedSource = "";

}  // namespace

ScopedBootstrapTimeout::ScopedBootstrapTimeout(int ms, const char* source)
    : previous_(tScopedTimeoutMs), previousSource_(tScopedSource) {
  if (ms > 0) {
    tScopedTimeoutMs = ms;
    tScopedSource = source;
  }
}
ScopedBootstrapTimeout::~ScopedBootstrapTimeout() {
  tScopedTimeoutMs = previous_;
  tScopedSource = previousSource_;
}

int bootstrapTimeoutMs(int own) {
  if (tScopedTimeoutMs > 0) return tScopedTimeoutMs;
  return own > 0 ? own : static_cast<int>(paramInt(ParamId::kTimeoutMs));
}

const char* bootstrapTimeoutSource(int own) {
  return tScopedTimeoutMs > 0 ? tScopedSource : own > 0 ? "timeoutMs" : "TPCOMM_TIMEOUT_MS";
}

std::shared_ptr<ThreadGroup> ThreadGroup::create(int size) {
  if (size <= 0 || size > (1 << 16)) return nullptr;  // ranks are threads of this process
  return std::make_shared<ThreadGroupImpl>(size);
}

Status makeThreadBootstrap(std::shared_ptr<ThreadGroup> group, int rank, std::unique_ptr<Bootstrap>* out) {
  if (!out) return TPCOMM_INVALID("makeThreadBootstrap: out is null");
  if (!group) return TPCOMM_INVALID("makeThreadBootstrap: group is null (ThreadGroup::create needs a size in 1..65536)");
  if (rank < 0 || rank >= group->size())
    return TPCOMM_INVALID("makeThreadBootstrap: rank %d out of range [0, %d)", rank, group->size());
  auto impl = std::static_pointer_cast<ThreadGroupImpl>(group);
  out->reset(new ThreadBootstrap(std::move(impl), rank));
  return Status::kOk;
}

}  // namespace tpcomm
