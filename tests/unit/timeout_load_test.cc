// Timeouts on a busy machine (issue 34 item 9): with every core kept busy by spinning threads, a
// 40 ms bound must fire within max(2 x 40 ms, 40 ms + 20 ms) = 80 ms: the waits check the clock
// often and never sleep long. Each row is one kind of wait for a missing peer, measured 5 times;
// the median must meet the target and the worst may not exceed 3x the bound (the machine is
// shared: one run can lose its CPU to other jobs). The defect it catches: a socket bootstrap rank
// whose root never comes to an exchange waiting the bound plus a fixed 1 s grace. Own executable, run serial:
// it loads every core. Prints every measurement.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/bootstrap_timeout.h"
#include "tpcomm/socket_bootstrap.h"
#include "tpcomm/tpcomm.h"

namespace tpcomm {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kBoundMs = 40;
constexpr double kTargetMs = kBoundMs + (kBoundMs > 20 ? kBoundMs : 20);

double msSince(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// Keeps 2 x cores threads spinning for its lifetime.
class BusyMachine {
 public:
  BusyMachine() {
    const unsigned n = 2 * std::max(1u, std::thread::hardware_concurrency());
    for (unsigned i = 0; i < n; ++i)
      threads_.emplace_back([this] {
        volatile uint64_t x = 0;
        while (!stop_.load(std::memory_order_relaxed)) x = x + 1;
      });
  }
  ~BusyMachine() {
    stop_ = true;
    for (auto& t : threads_) t.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

// Host ranks as threads; the last never makes the call; the time until every other rank's
// all-reduce (staged_host's barrier) returned kTimeout, or -1.
double hostBarrier(int ranks, size_t count) {
  auto group = ThreadGroup::create(ranks);
  std::promise<void> done;
  std::shared_future<void> doneF = done.get_future().share();
  std::vector<double> took(ranks, 0);
  std::atomic<int> left{ranks - 1};
  std::vector<std::thread> ts;
  for (int r = 0; r < ranks; ++r)
    ts.emplace_back([&, r] {
      std::unique_ptr<Bootstrap> bs;
      makeThreadBootstrap(group, r, &bs);
      Config cfg;
      cfg.timeoutMs = kBoundMs;
      cfg.setupTimeoutMs = 30000;
      std::unique_ptr<Communicator> c;
      const bool up = Communicator::create(*bs, -1, cfg, &c) == Status::kOk;
      if (r == ranks - 1) {
        doneF.wait();
        if (up) c->abort();
        return;
      }
      took[r] = -1;
      if (up) {
        std::vector<float> a(count, 1.0f), b(count);
        auto t0 = Clock::now();
        if (c->allReduce(a.data(), b.data(), count, DataType::kF32, ReduceOp::kSum, nullptr) == Status::kTimeout)
          took[r] = msSince(t0);
        c->abort();
      }
      if (--left == 0) done.set_value();
    });
  for (auto& t : ts) t.join();
  took.pop_back();
  return *std::min_element(took.begin(), took.end()) < 0 ? -1 : *std::max_element(took.begin(), took.end());
}

// The thread bootstrap's exchange with rank 1 absent, bounded as a communicator bounds it.
double threadExchange() {
  auto group = ThreadGroup::create(2);
  std::unique_ptr<Bootstrap> bs;
  makeThreadBootstrap(group, 0, &bs);
  ScopedBootstrapTimeout bound(kBoundMs, "test");
  int v = 1, all[2];
  auto t0 = Clock::now();
  return bs->allGather(&v, all, sizeof(int)) == Status::kTimeout ? msSince(t0) : -1;
}

// Socket bootstrap, `size` ranks as threads: they meet (a long bound), then every rank but
// `absent` calls allGather under a 40 ms bound. The time `waiter` took to report kTimeout, or -1.
double socketExchange(int size, int waiter, int absent) {
  SocketUniqueId id;
  if (makeSocketUniqueIdForAddress("127.0.0.1", &id) != Status::kOk) return -1;
  std::vector<std::unique_ptr<Bootstrap>> bs(size);
  std::vector<std::thread> ts;
  for (int r = 0; r < size; ++r) ts.emplace_back([&, r] { makeSocketBootstrap(id, r, size, 30000, &bs[r]); });
  for (auto& t : ts) t.join();
  for (auto& b : bs)
    if (!b) return -1;
  double took = -1;
  std::vector<std::thread> callers;
  for (int r = 0; r < size; ++r) {
    if (r == absent) continue;
    callers.emplace_back([&, r] {
      ScopedBootstrapTimeout bound(kBoundMs, "test");
      int v = r, all[3];
      auto t0 = Clock::now();
      const Status s = bs[r]->allGather(&v, all, sizeof(int));
      if (r == waiter) took = s == Status::kTimeout ? msSince(t0) : -1;
    });
  }
  for (auto& t : callers) t.join();
  for (auto& b : bs) abandonSocketBootstrap(b.get());
  return took;
}

// The socket rendezvous under a 40 ms bound: ranks [0, size) but `absent` call
// makeSocketBootstrap; the time `waiter` took to report kTimeout, or -1.
double socketRendezvous(int size, int waiter, int absent) {
  SocketUniqueId id;
  if (makeSocketUniqueIdForAddress("127.0.0.1", &id) != Status::kOk) return -1;
  double took = -1;
  std::vector<std::thread> ts;
  for (int r = 0; r < size; ++r) {
    if (r == absent) continue;
    ts.emplace_back([&, r] {
      std::unique_ptr<Bootstrap> bs;
      auto t0 = Clock::now();
      const Status s = makeSocketBootstrap(id, r, size, kBoundMs, &bs);
      if (r == waiter) took = s == Status::kTimeout ? msSince(t0) : -1;
    });
  }
  for (auto& t : ts) t.join();
  return took;
}

struct Row {
  const char* what;
  std::function<double()> probe;
};

TEST(TimeoutUnderLoad, EveryWaitFiresWithinTwiceTheBound) {
  const Row rows[] = {
      {"staged_host barrier, 2 thread ranks", [] { return hostBarrier(2, 1024); }},
      {"staged_host barrier, 4 thread ranks, 16 MB", [] { return hostBarrier(4, size_t{4} << 20); }},
      {"thread bootstrap exchange", [] { return threadExchange(); }},
      {"socket bootstrap, rank 1 waits, root absent", [] { return socketExchange(2, 1, 0); }},
      {"socket bootstrap, rank 0 waits, rank 1 absent", [] { return socketExchange(2, 0, 1); }},
      {"socket bootstrap, rank 1 waits, rank 2 absent", [] { return socketExchange(3, 1, 2); }},
      {"socket rendezvous, rank 1 waits, root absent", [] { return socketRendezvous(2, 1, 0); }},
      {"socket rendezvous, rank 1 waits, rank 2 absent", [] { return socketRendezvous(3, 1, 2); }},
  };
  BusyMachine busy;
  for (const Row& row : rows) {
    std::vector<double> took;
    for (int rep = 0; rep < 5; ++rep) took.push_back(row.probe());
    std::sort(took.begin(), took.end());
    std::printf("%-48s bound %d ms, target %.0f ms: %.0f %.0f %.0f %.0f %.0f ms\n", row.what, kBoundMs, kTargetMs,
                took[0], took[1], took[2], took[3], took[4]);
    // A waiter may hear of the timeout from rank 0, whose own bound started a little earlier.
    EXPECT_GE(took[0], 0.5 * kBoundMs) << row.what << ": no timeout, or long before the bound";
    EXPECT_LE(took[2], kTargetMs) << row.what << ": median over the target";
    EXPECT_LE(took[4], 3.0 * kBoundMs) << row.what << ": worst over 3x the bound";
  }
}

}  // namespace
}  // namespace tpcomm
