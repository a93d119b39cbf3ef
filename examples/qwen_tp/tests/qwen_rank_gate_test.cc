// RankGate (rank_gate.h): the barrier that keeps rank threads from launching a new CUDA graph
// before every rank has made its own. Reusable across rounds, bounded, broken at once by a rank
// that leaves, and its timeout names the missing rank and where that rank's host was.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "rank_gate.h"

namespace {

using namespace std::chrono_literals;

// No rank passes round k before every rank has arrived at round k, over many rounds with ranks
// that run at different speeds.
TEST(RankGate, NoRankPassesARoundBeforeEveryRankArrives) {
  const int ranks = 3, rounds = 200;
  qwen::RankGate gate(ranks, 10s);
  std::atomic<int> arrived[rounds];
  for (auto& a : arrived) a = 0;
  std::atomic<int> early{0}, failed{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      for (int k = 0; k < rounds; ++k) {
        if ((k + r) % 7 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200 * (r + 1)));
        ++arrived[k];
        std::string err;
        if (!gate.arrive(r, "test", &err)) ++failed;
        if (arrived[k].load() != ranks) ++early;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(early.load(), 0);
}

// A rank that never arrives: the others return false after the bound, and the message names the
// missing rank and the step its host was marked in.
TEST(RankGate, BoundedWaitNamesTheMissingRankAndItsStep) {
  qwen::RankGate gate(3, 300ms);
  gate.mark(2, "instantiating a CUDA graph");
  std::vector<std::string> errs(2);
  std::vector<char> oks(2, 1);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) threads.emplace_back([&, r] { oks[r] = gate.arrive(r, "graph gate", &errs[r]); });
  for (auto& t : threads) t.join();
  const auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(waited, 300ms);
  EXPECT_LT(waited, 5s);
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(oks[r]);
    EXPECT_NE(errs[r].find("graph gate: rank " + std::to_string(r) + " waited 0.3 s for rank(s) 2;"), std::string::npos)
        << errs[r];
    EXPECT_NE(errs[r].find("rank 2 instantiating a CUDA graph for"), std::string::npos) << errs[r];
  }
}

// leave() ends a peer's wait at once, and every later wait too.
TEST(RankGate, LeaveEndsWaitsAtOnce) {
  qwen::RankGate gate(2, 60s);
  std::string err;
  bool ok = true;
  const auto t0 = std::chrono::steady_clock::now();
  std::thread waiter([&] { ok = gate.arrive(0, "graph gate", &err); });
  std::this_thread::sleep_for(50ms);
  gate.leave(1);
  waiter.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_FALSE(ok);
  EXPECT_NE(err.find("rank 1 gave up"), std::string::npos) << err;
  std::string again;
  EXPECT_FALSE(gate.arrive(0, "graph gate", &again));
}

// A step that took over a second is kept after the rank moved on (a blocked host call that ended
// just before the error was read), with its duration.
TEST(RankGate, DescribeKeepsTheLastSlowStep) {
  qwen::RankGate gate(2);
  gate.mark(1, "uploading a CUDA graph");
  std::this_thread::sleep_for(1100ms);
  gate.mark(1, "launching a CUDA graph");
  gate.mark(0, "waiting for its streams");
  const std::string d = gate.describe();
  EXPECT_NE(d.find("rank 0 waiting for its streams for 0.0 s"), std::string::npos) << d;
  EXPECT_NE(d.find("rank 1 launching a CUDA graph for 0.0 s; its last step over 1 s: uploading a CUDA graph (1."),
            std::string::npos)
      << d;
}

// The init agreement: false on every rank when one rank's init failed.
TEST(RankGate, InitAgreementFailsEveryRankWhenOneFailed) {
  qwen::RankGate gate(3);
  std::vector<char> res(3, 1);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) threads.emplace_back([&, r] { res[r] = gate.pass(r != 1); });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) EXPECT_FALSE(res[r]) << r;
}

}  // namespace
