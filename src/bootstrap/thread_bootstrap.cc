// Bootstrap for ranks that are threads of one process: a generation-counted rendezvous under one
// mutex. Every wait is bounded by TPCOMM_TIMEOUT_MS so a rank that never arrives yields kTimeout
// instead of a hang.
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <vector>

#include "common/error.h"
#include "common/params.h"
#include "tpcomm/bootstrap.h"

namespace tpcomm {
namespace {

class ThreadGroupImpl : public ThreadGroup {
 public:
  explicit ThreadGroupImpl(int n) : n_(n) {}
  int size() const override { return n_; }

  // Each rank deposits `bytes` from `mine`; once all have, each copies out the whole table.
  // Two phases (deposit, then depart) so a fast rank's next call cannot overwrite the table
  // while a slow rank is still copying out.
  Status exchange(int rank, const void* mine, void* all, size_t bytes) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(paramInt(ParamId::kTimeoutMs));
    std::unique_lock<std::mutex> lock(mu_);
    // Wait until the previous exchange has fully drained.
    if (!cv_.wait_until(lock, deadline, [&] { return departing_ == 0; }))
      return TPCOMM_ERROR(kTimeout, "thread bootstrap: rank %d waited for the previous exchange to drain", rank);
    if (arrived_ == 0) {
      bytes_ = bytes;
      table_.assign(bytes * n_, 0);
    } else if (bytes != bytes_) {
      return TPCOMM_INVALID("thread bootstrap: rank %d passed %zu bytes, others %zu", rank, bytes, bytes_);
    }
    if (bytes) std::memcpy(table_.data() + rank * bytes, mine, bytes);
    uint64_t gen = generation_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      departing_ = n_;
      ++generation_;
      cv_.notify_all();
    } else if (!cv_.wait_until(lock, deadline, [&] { return generation_ != gen; })) {
      --arrived_;
      return TPCOMM_ERROR(kTimeout, "thread bootstrap: rank %d: only %d of %d ranks arrived within TPCOMM_TIMEOUT_MS",
                          rank, arrived_ + 1, n_);
    }
    if (bytes) std::memcpy(all, table_.data(), bytes * n_);
    if (--departing_ == 0) cv_.notify_all();
    return Status::kOk;
  }

 private:
  const int n_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  int departing_ = 0;
  uint64_t generation_ = 0;
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
    return group_->exchange(rank_, mine, all, bytesPerRank);
  }
  Status barrier() override { return group_->exchange(rank_, nullptr, nullptr, 0); }

 private:
  std::shared_ptr<ThreadGroupImpl> group_;
  int rank_;
};

}  // namespace

std::shared_ptr<ThreadGroup> ThreadGroup::create(int size) {
  if (size <= 0) return nullptr;
  return std::make_shared<ThreadGroupImpl>(size);
}

Status makeThreadBootstrap(std::shared_ptr<ThreadGroup> group, int rank, std::unique_ptr<Bootstrap>* out) {
  if (!out) return TPCOMM_INVALID("makeThreadBootstrap: out is null");
  if (!group) return TPCOMM_INVALID("makeThreadBootstrap: group is null (ThreadGroup::create needs size >= 1)");
  if (rank < 0 || rank >= group->size())
    return TPCOMM_INVALID("makeThreadBootstrap: rank %d out of range [0, %d)", rank, group->size());
  auto impl = std::static_pointer_cast<ThreadGroupImpl>(group);
  out->reset(new ThreadBootstrap(std::move(impl), rank));
  return Status::kOk;
}

}  // namespace tpcomm
