// Fault injection on staged_host with ranks as threads: a timeout in the write phase. After the
// pointer exchange every rank reduces its slice straight into every peer's recv, then all meet
// at a last barrier. With a 2 ms bound and more ranks than cores, a rank whose peers are still
// writing times out at that barrier and returns kTimeout; nothing may change in its recv after
// that. Each try snapshots recv when the call returns kTimeout and compares 300 ms later.
//
// Before the fix some tries saw hundreds of thousands of elements change after the return. Now
// a rank that returns kTimeout first waits until every peer's phase of reading or writing its
// buffers has stopped (they check between blocks: HostStagedTransport::beginPeerAccess).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "tpcomm/tpcomm.h"
#include "unit/test_util.h"

namespace tpcomm {
namespace {

TEST(StagedHostFault, NoWriteAfterATimeoutInTheWritePhase) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const int n = static_cast<int>(std::min(16u, std::max(4u, 2 * cores)));  // more ranks than cores
  const size_t count = (size_t{32} << 20) / n;                             // 128 MiB of f32 in all
  int hits = 0, timeouts = 0, tries = 0;
  for (; tries < 20 && hits < 2; ++tries) {
    auto group = ThreadGroup::create(n);
    std::vector<std::unique_ptr<Bootstrap>> bs(n);
    std::vector<std::unique_ptr<Communicator>> comms(n);
    {
      std::vector<std::thread> ts;
      for (int r = 0; r < n; ++r)
        ts.emplace_back([&, r] {
          ASSERT_EQ(makeThreadBootstrap(group, r, &bs[r]), Status::kOk);
          Config cfg;
          cfg.timeoutMs = 2;  // the collectives' bound; create keeps TPCOMM_TIMEOUT_MS
          ASSERT_EQ(Communicator::create(*bs[r], -1, cfg, &comms[r]), Status::kOk) << lastErrorMessage();
        });
      for (auto& t : ts) t.join();
    }
    std::vector<float> send(count, 1.0f);
    std::vector<std::vector<float>> recv(n, std::vector<float>(count, -1.0f));
    std::atomic<int> ready{0};
    std::atomic<size_t> changed{0};
    std::atomic<int> timedOut{0};
    std::vector<std::thread> ts;
    for (int r = 0; r < n; ++r)
      ts.emplace_back([&, r] {
        ++ready;
        while (ready < n) std::this_thread::yield();
        Status s = comms[r]->allReduce(send.data(), recv[r].data(), count, DataType::kF32, ReduceOp::kSum, nullptr);
        if (s != Status::kTimeout) return;
        ++timedOut;
        std::vector<float> snap = recv[r];
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        size_t c = 0;
        for (size_t i = 0; i < count; ++i) c += recv[r][i] != snap[i];
        changed += c;
      });
    for (auto& t : ts) t.join();
    for (auto& c : comms) c->abort();
    timeouts += timedOut > 0;
    if (changed) {
      ++hits;
      ADD_FAILURE() << "try " << tries << ": " << changed << " elements changed in recv buffers after their "
                    << "allReduce returned kTimeout (" << n << " ranks)";
    }
  }
  std::printf("%d ranks, %d tries: %d with a timeout, %d with writes after return\n", n, tries, timeouts, hits);
}

}  // namespace
}  // namespace tpcomm
