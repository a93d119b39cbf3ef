// Every wait for a peer is bounded: with ranks as threads and TPCOMM_TIMEOUT_MS small, a rank
// whose peer skips a collective gets kTimeout (with a message naming the missing rank) within about twice
// the bound, instead of hanging. Its own executable because it shortens the timeout process-wide.
#include <gtest/gtest.h>

#include <chrono>
#include <algorithm>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "algos/common/coll_args.h"
#include "unit/test_util.h"

namespace tpcomm {
namespace {

constexpr int kTimeoutMs = 300;

struct TimeoutRow {
  const char* what;
  int ranks;
  CollKind kind;
  bool viaConfig;  // Config::timeoutMs instead of TPCOMM_TIMEOUT_MS
};

const TimeoutRow kRows[] = {
    {"allReduce, 2 ranks", 2, CollKind::kAllReduce, false},
    {"reduceScatter, 2 ranks", 2, CollKind::kReduceScatter, false},
    {"allGather, 2 ranks", 2, CollKind::kAllGather, false},
    {"allReduce, 4 ranks", 4, CollKind::kAllReduce, false},
    {"allReduce, 2 ranks, Config::timeoutMs", 2, CollKind::kAllReduce, true},
};

TEST(Timeout, ARankThatSkipsACollectiveYieldsKTimeout) {
  for (const TimeoutRow& row : kRows) {
    SCOPED_TRACE(row.what);
    // Bootstrap waits (create, destroy) use the environment bound; keep them generous when the
    // communicator's own bound comes from Config.
    test::ScopedEnv env("TPCOMM_TIMEOUT_MS", row.viaConfig ? "5000" : std::to_string(kTimeoutMs).c_str());
    Config cfg;
    if (row.viaConfig) cfg.timeoutMs = kTimeoutMs;
    const int n = row.ranks;
    const int skipper = n - 1;
    std::promise<void> done;
    std::shared_future<void> doneFuture = done.get_future().share();
    std::atomic<int> finished{0};
    std::atomic<int> namedMissing{0};
    test::runHostRanks(n, cfg, [&](int me, Communicator& comm) {
      if (me == skipper) {
        // Skip the collective; come back for destroy() once the others have given up.
        doneFuture.wait();
        return;
      }
      std::vector<float> send(1024 * n, 1.0f), recv(1024 * n, 0.0f);
      auto t0 = std::chrono::steady_clock::now();
      Status s = Status::kOk;
      switch (row.kind) {
        case CollKind::kAllReduce:
          s = comm.allReduce(send.data(), recv.data(), 1024, DataType::kF32, ReduceOp::kSum, nullptr);
          break;
        case CollKind::kReduceScatter:
          s = comm.reduceScatter(send.data(), recv.data(), 1024, DataType::kF32, ReduceOp::kSum, nullptr);
          break;
        case CollKind::kAllGather:
          s = comm.allGather(send.data(), recv.data(), 1024, DataType::kF32, nullptr);
          break;
      }
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      EXPECT_EQ(s, Status::kTimeout) << "rank " << me << ": " << statusName(s) << " " << lastErrorMessage();
      std::string msg = lastErrorMessage();
      EXPECT_NE(msg.find("rank"), std::string::npos) << msg;
      // The rank whose bound ran out first names the rank that never came (not itself);
      // the others, woken by the broken barrier, may only say so (host_staged.cc).
      if (msg.find("rank(s) " + std::to_string(skipper)) != std::string::npos) ++namedMissing;
      EXPECT_GE(ms, 0.9 * kTimeoutMs) << "rank " << me << " gave up before the bound";
      EXPECT_LE(ms, 2.0 * kTimeoutMs) << "rank " << me << " took " << ms << " ms for a " << kTimeoutMs << " ms bound";
      // The communicator is unusable afterwards: later calls and checkError() keep failing
      // instead of completing a barrier that still counts the timed-out arrival.
      std::fill(recv.begin(), recv.end(), 0.0f);
      EXPECT_NE(comm.allReduce(send.data(), recv.data(), 1024, DataType::kF32, ReduceOp::kSum, nullptr), Status::kOk)
          << "rank " << me << ": a call after a timeout succeeded without its peer";
      EXPECT_EQ(comm.checkError(), Status::kTimeout) << "rank " << me << ": " << lastErrorMessage();
      if (++finished == n - 1) done.set_value();
    });
    EXPECT_GE(namedMissing.load(), 1) << "no waiting rank's message named the missing rank " << skipper;
  }
}

}  // namespace
}  // namespace tpcomm
