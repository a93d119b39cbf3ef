// Fault injection on the thread bootstrap: a rank that arrives after
// its peers timed out, a rank that never arrives, ranks that pass different sizes. Each case
// asserts: no hang beyond the bound, no stale pairing (a late rank never completes an exchange
// its peer left), the next exchange works again, and the message names the missing rank(s).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tpcomm/tpcomm.h"
#include "unit/test_util.h"

namespace tpcomm {
namespace {

constexpr int kBoundMs = 200;
using Clock = std::chrono::steady_clock;

double msSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

std::vector<std::unique_ptr<Bootstrap>> makeGroup(int n) {
  auto group = ThreadGroup::create(n);
  std::vector<std::unique_ptr<Bootstrap>> bs(n);
  for (int r = 0; r < n; ++r) EXPECT_EQ(makeThreadBootstrap(group, r, &bs[r]), Status::kOk);
  return bs;
}

// Rank 0 gives up on exchange 0; rank 1 arrives there late, then both run exchange 1. Before
// the fix, rank 1's late exchange 0 paired with rank 0's exchange 1 and returned kOk with rank
// 0's exchange-1 value (and rank 0 got rank 1's exchange-0 value for its exchange 1).
TEST(ThreadBootstrapFault, LateRankAfterTimeoutFailsAndTheNextExchangeIsInStep) {
  test::ScopedEnv env("TPCOMM_TIMEOUT_MS", std::to_string(kBoundMs).c_str());
  auto bs = makeGroup(2);
  std::atomic<bool> rank0TimedOut{false};
  std::thread t0([&] {
    int mine = 100, all[2] = {-1, -1};
    auto start = Clock::now();
    Status s = bs[0]->allGather(&mine, all, sizeof(int));
    EXPECT_EQ(s, Status::kTimeout);
    std::string msg = lastErrorMessage();
    EXPECT_NE(msg.find("rank(s) 1 never arrived"), std::string::npos) << msg;
    EXPECT_LE(msSince(start), 4.0 * kBoundMs);
    EXPECT_EQ(all[0], -1) << "written after a timeout";
    rank0TimedOut = true;
    int next = 101, all1[2] = {-1, -1};
    EXPECT_EQ(bs[0]->allGather(&next, all1, sizeof(int)), Status::kOk) << lastErrorMessage();
    EXPECT_EQ(all1[0], 101);
    EXPECT_EQ(all1[1], 201) << "exchange 1 paired with another exchange";
  });
  std::thread t1([&] {
    while (!rank0TimedOut) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    int mine = 200, all[2] = {-1, -1};
    auto start = Clock::now();
    Status s = bs[1]->allGather(&mine, all, sizeof(int));
    EXPECT_EQ(s, Status::kRemoteError) << "a late arrival completed an exchange its peer left: got " << all[0];
    EXPECT_NE(std::string(lastErrorMessage()).find("abandoned"), std::string::npos) << lastErrorMessage();
    EXPECT_LT(msSince(start), kBoundMs / 2.0) << "a late arrival should fail at once";
    EXPECT_EQ(all[0], -1);
    int next = 201, all1[2] = {-1, -1};
    EXPECT_EQ(bs[1]->allGather(&next, all1, sizeof(int)), Status::kOk) << lastErrorMessage();
    EXPECT_EQ(all1[0], 101) << "exchange 1 paired with another exchange";
    EXPECT_EQ(all1[1], 201);
  });
  t0.join();
  t1.join();
}

// Of 4 ranks, 1 and 3 never arrive: the waiting ranks fail within the bound and name 1 and 3.
TEST(ThreadBootstrapFault, RanksThatNeverArriveAreNamed) {
  test::ScopedEnv env("TPCOMM_TIMEOUT_MS", std::to_string(kBoundMs).c_str());
  auto bs = makeGroup(4);
  std::vector<std::thread> ts;
  for (int r : {0, 2}) {
    ts.emplace_back([&, r] {
      auto start = Clock::now();
      Status s = bs[r]->barrier();
      double ms = msSince(start);
      // The first to give up times out; the other may see the exchange abandoned first.
      EXPECT_TRUE(s == Status::kTimeout || s == Status::kRemoteError) << statusName(s);
      std::string msg = lastErrorMessage();
      EXPECT_NE(msg.find("1, 3"), std::string::npos) << "rank " << r << ": " << msg;
      EXPECT_EQ(msg.find("rank(s) 0"), std::string::npos) << msg;
      EXPECT_LE(ms, 4.0 * kBoundMs) << "rank " << r;
    });
  }
  for (auto& t : ts) t.join();
}

// Different sizes: the exchange is abandoned at once for every rank in it, with the sizes named.
TEST(ThreadBootstrapFault, MismatchedSizesFailEveryRankQuickly) {
  test::ScopedEnv env("TPCOMM_TIMEOUT_MS", "5000");
  auto bs = makeGroup(2);
  std::atomic<bool> first{false};
  Status got[2];
  std::thread t0([&] {
    int mine[2] = {1, 2}, all[4];
    first = true;
    got[0] = bs[0]->allGather(mine, all, 2 * sizeof(int));
  });
  std::thread t1([&] {
    while (!first) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    int mine = 3, all[2];
    got[1] = bs[1]->allGather(&mine, all, sizeof(int));
    EXPECT_NE(std::string(lastErrorMessage()).find("rank 1 passed 4 bytes"), std::string::npos) << lastErrorMessage();
  });
  auto start = Clock::now();
  t0.join();
  t1.join();
  EXPECT_LT(msSince(start), 2000.0) << "a size mismatch waited for the timeout";
  EXPECT_NE(got[0], Status::kOk);
  EXPECT_NE(got[1], Status::kOk);
}

// Communicator::create with a rank that never comes (its exchanges go through the thread
// bootstrap): the others fail within the bound naming it, and when it does come late its create
// fails at once instead of pairing with exchanges the others left.
TEST(ThreadBootstrapFault, CreateWithARankThatComesTooLate) {
  test::ScopedEnv env("TPCOMM_TIMEOUT_MS", std::to_string(kBoundMs).c_str());
  const int n = 3, late = 2;
  auto group = ThreadGroup::create(n);
  std::atomic<int> gaveUp{0};
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      std::unique_ptr<Bootstrap> bs;
      ASSERT_EQ(makeThreadBootstrap(group, r, &bs), Status::kOk);
      if (r == late)
        while (gaveUp < n - 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      auto start = Clock::now();
      std::unique_ptr<Communicator> comm;
      Status s = Communicator::create(*bs, -1, Config{}, &comm);
      std::string msg = lastErrorMessage();
      EXPECT_NE(s, Status::kOk) << "rank " << r;
      EXPECT_EQ(comm, nullptr);
      if (r == late) {
        EXPECT_EQ(s, Status::kRemoteError) << msg;
        EXPECT_LT(msSince(start), kBoundMs / 2.0) << "a late rank should fail at once";
      } else {
        EXPECT_TRUE(s == Status::kTimeout || s == Status::kRemoteError) << statusName(s);
        EXPECT_NE(msg.find("rank(s) 2"), std::string::npos) << "rank " << r << ": " << msg;
        EXPECT_LE(msSince(start), 4.0 * kBoundMs);
        ++gaveUp;
      }
    });
  for (auto& t : ts) t.join();
}

}  // namespace
}  // namespace tpcomm
