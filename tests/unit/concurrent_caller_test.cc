// A communicator takes one caller at a time (issue 34 item 8), like an NCCL communicator. Two
// threads calling rank 0's communicator at once would share the call's state and crash
// (SIGSEGV); the second caller must instead get kInvalidArgument at once, saying why, and the
// first call must complete normally. Host ranks as threads; rank 1 joins only once one of rank
// 0's two callers has been refused, so the two calls overlap whatever the scheduling.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "unit/test_util.h"

namespace tpcomm {
namespace {

struct Entry {
  const char* what;
  std::function<Status(Communicator&, float* send, float* recv)> call;
};

// Every entry point that runs a collective on rank 0's communicator, as both callers use it.
const Entry kEntries[] = {
    {"allReduce", [](Communicator& c, float* s,
                     float* r) { return c.allReduce(s, r, 256, DataType::kF32, ReduceOp::kSum, nullptr); }},
    {"allReduce with compression",
     [](Communicator& c, float* s, float* r) {
       return c.allReduce(s, r, 256, DataType::kF32, ReduceOp::kSum, nullptr, Compression::kNone);
     }},
    {"reduceScatter", [](Communicator& c, float* s,
                         float* r) { return c.reduceScatter(s, r, 128, DataType::kF32, ReduceOp::kSum, nullptr); }},
    {"allGather", [](Communicator& c, float* s, float* r) { return c.allGather(s, r, 128, DataType::kF32, nullptr); }},
};

class ConcurrentCallers : public testing::TestWithParam<int> {};

TEST_P(ConcurrentCallers, TheSecondCallerIsRefusedAndTheFirstCompletes) {
  const Entry& e = kEntries[GetParam()];
  Config cfg;
  cfg.timeoutMs = 2000;
  cfg.setupTimeoutMs = 30000;
  for (int round = 0; round < 10 && !HasFailure(); ++round) {  // the first failed round is enough
    SCOPED_TRACE(std::string(e.what) + ", round " + std::to_string(round));
    std::mutex mu;
    std::condition_variable cv;
    bool refusedOne = false;
    test::runHostRanks(2, cfg, [&](int me, Communicator& comm) {
      std::vector<float> send(256, 1.0f), recv(512, 0.0f);
      if (me == 1) {
        std::unique_lock<std::mutex> lock(mu);
        // Bounded, so a library that lets both callers in fails here instead of hanging.
        cv.wait_for(lock, std::chrono::seconds(1), [&] { return refusedOne; });
        lock.unlock();
        EXPECT_EQ(e.call(comm, send.data(), recv.data()), Status::kOk) << lastErrorMessage();
        return;
      }
      Status got[2];
      std::string msg[2];
      std::atomic<int> ready{0};
      std::vector<float> send2(256, 1.0f), recv2(512, 0.0f);
      auto caller = [&](int k) {
        ready.fetch_add(1);
        while (ready.load() < 2) {
        }
        got[k] = k == 0 ? e.call(comm, send.data(), recv.data()) : e.call(comm, send2.data(), recv2.data());
        msg[k] = lastErrorMessage();
        if (got[k] == Status::kInvalidArgument) {
          std::lock_guard<std::mutex> lock(mu);
          refusedOne = true;
          cv.notify_all();
        }
      };
      std::thread other(caller, 1);
      caller(0);
      other.join();
      const int refused = (got[0] == Status::kInvalidArgument) + (got[1] == Status::kInvalidArgument);
      const int ok = (got[0] == Status::kOk) + (got[1] == Status::kOk);
      EXPECT_EQ(refused, 1) << statusName(got[0]) << " " << msg[0] << " / " << statusName(got[1]) << " " << msg[1];
      EXPECT_EQ(ok, 1) << statusName(got[0]) << " " << msg[0] << " / " << statusName(got[1]) << " " << msg[1];
      for (int k = 0; k < 2; ++k)
        if (got[k] == Status::kInvalidArgument) EXPECT_NE(msg[k].find("another thread"), std::string::npos) << msg[k];
      // The communicator stays usable for its one caller.
      std::fill(recv.begin(), recv.end(), 0.0f);
      {
        std::lock_guard<std::mutex> lock(mu);
        refusedOne = false;
      }
    });
  }
}

INSTANTIATE_TEST_SUITE_P(All, ConcurrentCallers, testing::Range(0, 4));

// destroy() while another thread is inside a call is refused too (it would free what the call
// uses); the call then completes, and destroy() afterwards succeeds.
TEST(ConcurrentDestroy, DestroyDuringACallIsRefused) {
  Config cfg;
  cfg.timeoutMs = 5000;
  std::atomic<bool> rank1Go{false};
  test::runHostRanks(2, cfg, [&](int me, Communicator& comm) {
    std::vector<float> send(64, 1.0f), recv(64, 0.0f);
    if (me == 1) {
      auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
      while (!rank1Go.load() && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      EXPECT_EQ(comm.allReduce(send.data(), recv.data(), 64, DataType::kF32, ReduceOp::kSum, nullptr), Status::kOk);
      return;
    }
    Status callStatus = Status::kInternal;
    std::atomic<bool> calling{false};
    std::thread caller([&] {
      calling = true;
      callStatus = comm.allReduce(send.data(), recv.data(), 64, DataType::kF32, ReduceOp::kSum, nullptr);
    });
    // The caller then waits inside allReduce for rank 1, which waits for rank1Go.
    while (!calling.load()) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const Status d = comm.destroy();
    EXPECT_EQ(d, Status::kInvalidArgument) << lastErrorMessage();
    EXPECT_NE(std::string(lastErrorMessage()).find("another thread"), std::string::npos) << lastErrorMessage();
    rank1Go = true;
    caller.join();
    EXPECT_EQ(callStatus, Status::kOk) << lastErrorMessage();
    for (float v : recv) ASSERT_EQ(v, 2.0f);
  });
}

// abort() from another thread while a call waits for a missing peer: it stops the call's
// kernels (none on host ranks), then waits for the call to return (bounded by the timeout) before
// it frees what the call uses (freeing the transports under the waiting call crashes it).
TEST(ConcurrentAbort, AbortWaitsForTheCallInFlight) {
  auto group = ThreadGroup::create(2);
  std::unique_ptr<Bootstrap> bs[2];
  std::unique_ptr<Communicator> comm[2];
  Config cfg;
  cfg.timeoutMs = 300;
  std::thread other([&] {
    ASSERT_EQ(makeThreadBootstrap(group, 1, &bs[1]), Status::kOk);
    ASSERT_EQ(Communicator::create(*bs[1], -1, cfg, &comm[1]), Status::kOk) << lastErrorMessage();
  });
  ASSERT_EQ(makeThreadBootstrap(group, 0, &bs[0]), Status::kOk);
  ASSERT_EQ(Communicator::create(*bs[0], -1, cfg, &comm[0]), Status::kOk) << lastErrorMessage();
  other.join();
  ASSERT_TRUE(comm[1]);
  using Clock = std::chrono::steady_clock;
  std::vector<float> send(64, 1.0f), recv(64, 0.0f);
  std::atomic<bool> calling{false};
  Status callStatus = Status::kOk;
  Clock::time_point callDone;
  std::thread caller([&] {  // rank 0's call; rank 1 never makes it
    calling = true;
    callStatus = comm[0]->allReduce(send.data(), recv.data(), 64, DataType::kF32, ReduceOp::kSum, nullptr);
    callDone = Clock::now();
  });
  while (!calling.load()) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(comm[0]->abort(), Status::kOk) << lastErrorMessage();
  const Clock::time_point abortDone = Clock::now();
  caller.join();
  EXPECT_EQ(callStatus, Status::kTimeout);
  EXPECT_LE(callDone, abortDone) << "abort returned while the call was still inside";
  EXPECT_EQ(comm[1]->abort(), Status::kOk);
}

}  // namespace
}  // namespace tpcomm
