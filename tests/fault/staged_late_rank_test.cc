// Fault injection on the host collectives with ranks as threads (the whole
// chain): rank 0's allReduce times out because rank 1 is late; rank 1 then arrives. Nobody may
// touch rank 0's buffers after its call returned, and the late rank must not report success.
// Both say why rank 1 was late: its host had not made the call when rank 0 gave up (rank 1's call
// counter in the segment was behind rank 0's), in the failed calls' messages and checkError()'s.
//
// The pointer exchange of staged_host's thread path goes through HostStagedTransport::barrier()
// (src/transports/host_staged.cc), not the thread bootstrap: before that barrier was fenced
// (080e1db) its arrival count kept the timed-out rank and this test failed with "32768 of 65536
// elements of rank 0's recv changed after its allReduce returned kTimeout" (seen at 26bb48f).
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

// The failed call's message (`failed`) and checkError()'s afterwards both say why rank 1 was late;
// checkError()'s also says whom this rank waited for (`waited`).
void expectRank1NeverMadeTheCall(Communicator& comm, const std::string& failed, const std::string& waited) {
  const std::string why = "rank 1 never made this call (its host is 1 call behind)";
  EXPECT_NE(failed.find(why), std::string::npos) << failed;
  EXPECT_EQ(comm.checkError(), Status::kTimeout);
  const std::string later = lastErrorMessage();
  EXPECT_NE(later.find(waited + ": " + why), std::string::npos) << later;
}

TEST(StagedHostFault, LateRankNeverWritesIntoAPeerThatTimedOut) {
  test::ScopedEnv env("TPCOMM_TIMEOUT_MS", "300");
  const size_t count = 65536;
  std::atomic<bool> rank0Returned{false};
  std::atomic<bool> rank1Done{false};
  test::runHostRanks(2, Config{}, [&](int me, Communicator& comm) {
    std::vector<float> send(count, 1.0f + me);
    if (me == 0) {
      auto recv = std::make_unique<std::vector<float>>(count, -7.0f);
      Status s = comm.allReduce(send.data(), recv->data(), count, DataType::kF32, ReduceOp::kSum, nullptr);
      EXPECT_EQ(s, Status::kTimeout) << lastErrorMessage();
      const std::string msg = lastErrorMessage();
      EXPECT_NE(msg.find("rank(s) 1 did not arrive within 300 ms"), std::string::npos) << msg;
      expectRank1NeverMadeTheCall(comm, msg, "timed out after 300 ms waiting for rank 1");
      std::vector<float> snapshot = *recv;
      rank0Returned = true;
      while (!rank1Done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      size_t changed = 0;
      for (size_t i = 0; i < count; ++i) changed += (*recv)[i] != snapshot[i];
      EXPECT_EQ(changed, 0u) << changed << " of " << count
                             << " elements of rank 0's recv changed after its allReduce returned kTimeout";
    } else {
      while (!rank0Returned) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      std::vector<float> recv(count, 0.0f);
      Status s = comm.allReduce(send.data(), recv.data(), count, DataType::kF32, ReduceOp::kSum, nullptr);
      EXPECT_NE(s, Status::kOk) << "rank 1 completed an allReduce its peer had left";
      expectRank1NeverMadeTheCall(comm, lastErrorMessage(), "timed out after 300 ms waiting for this rank");
      rank1Done = true;
    }
  });
}

}  // namespace
}  // namespace tpcomm
