// Fault injection on staged_host with ranks as threads: a timeout in the write phase. After the
// pointer exchange every rank reduces its slice straight into every peer's recv, then all meet
// at a last barrier. With a 2 ms bound and more ranks than cores, a rank whose peers are still
// writing times out at that barrier and returns kTimeout; nothing may change in its recv after
// that.
//
// Each recv is its own mapping, and a rank whose call returns kTimeout makes it read-only at
// once (mprotect): a peer that writes into it afterwards faults, and the handler names the
// buffer and ends the test (exit 1). A snapshot compared 300 ms later, the first form of this
// test, missed the writes that land while the snapshot itself is copied: with the breaker's wait
// for its peers' access phases removed (scripts/mutation_check.py --cpu,
// staged_timeout_no_write_fence) it passed 20 tries of 20; the read-only mapping catches it.
//
// Before the fix some tries saw hundreds of thousands of elements change after the return. Now
// a rank that returns kTimeout first waits until every peer's phase of reading or writing its
// buffers has stopped (they check between blocks: HostStagedTransport::beginPeerAccess).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "tpcomm/tpcomm.h"
#include "unit/test_util.h"

namespace tpcomm {
namespace {

// The recv mappings of the current try, for the fault handler (async-signal-safe reads only).
constexpr int kMaxRanks = 16;
std::atomic<char*> gRecv[kMaxRanks];
std::atomic<size_t> gRecvBytes{0};

void onWriteAfterReturn(int sig, siginfo_t* info, void*) {
  const char* at = static_cast<const char*>(info->si_addr);
  for (int r = 0; r < kMaxRanks; ++r) {
    const char* b = gRecv[r].load();
    if (b && at >= b && at < b + gRecvBytes.load()) {
      char msg[160];
      int len = std::snprintf(msg, sizeof(msg),
                              "FAILED: a peer wrote into rank %d's recv (offset %zu) after its allReduce returned "
                              "kTimeout\n",
                              r, static_cast<size_t>(at - b));
      if (len > 0) (void)!write(2, msg, static_cast<size_t>(len));
      _exit(1);
    }
  }
  signal(sig, SIG_DFL);  // another fault: the default action (a crash is a failure too)
  raise(sig);
}

TEST(StagedHostFault, NoWriteAfterATimeoutInTheWritePhase) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const int n = static_cast<int>(std::min(16u, std::max(4u, 2 * cores)));  // more ranks than cores
  const size_t count = (size_t{32} << 20) / n;                             // 128 MiB of f32 in all
  const size_t bytes = count * sizeof(float);
  struct sigaction sa = {}, old = {};
  sa.sa_sigaction = onWriteAfterReturn;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  ASSERT_EQ(sigaction(SIGSEGV, &sa, &old), 0);
  gRecvBytes = bytes;
  int timeouts = 0, tries = 0;
  for (; tries < 20; ++tries) {
    auto group = ThreadGroup::create(n);
    std::vector<std::unique_ptr<Bootstrap>> bs(n);
    std::vector<std::unique_ptr<Communicator>> comms(n);
    {
      std::vector<std::thread> ts;
      for (int r = 0; r < n; ++r)
        ts.emplace_back([&, r] {
          ASSERT_EQ(makeThreadBootstrap(group, r, &bs[r]), Status::kOk);
          Config cfg;
          cfg.timeoutMs = 2;           // the collectives' bound
          cfg.setupTimeoutMs = 60000;  // create's: 8+ thread ranks on 2 cores need more than 2 ms
          ASSERT_EQ(Communicator::create(*bs[r], -1, cfg, &comms[r]), Status::kOk) << lastErrorMessage();
        });
      for (auto& t : ts) t.join();
    }
    std::vector<float> send(count, 1.0f);
    std::vector<float*> recv(n);
    for (int r = 0; r < n; ++r) {
      void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      ASSERT_NE(p, MAP_FAILED);
      recv[r] = static_cast<float*>(p);
      std::fill(recv[r], recv[r] + count, -1.0f);
      gRecv[r] = static_cast<char*>(p);
    }
    std::atomic<int> ready{0};
    std::atomic<int> timedOut{0};
    std::vector<std::thread> ts;
    for (int r = 0; r < n; ++r)
      ts.emplace_back([&, r] {
        ++ready;
        while (ready < n) std::this_thread::yield();
        Status s = comms[r]->allReduce(send.data(), recv[r], count, DataType::kF32, ReduceOp::kSum, nullptr);
        if (s != Status::kTimeout) return;
        // From here on a write into recv[r] by anyone faults.
        ASSERT_EQ(mprotect(recv[r], bytes, PROT_READ), 0);
        ++timedOut;
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
      });
    for (auto& t : ts) t.join();
    for (auto& c : comms) c->abort();
    timeouts += timedOut > 0;
    for (int r = 0; r < n; ++r) {
      gRecv[r] = nullptr;
      munmap(recv[r], bytes);
    }
  }
  sigaction(SIGSEGV, &old, nullptr);
  std::printf("%d ranks, %d tries: %d with a timeout, none with a write after return\n", n, tries, timeouts);
}

}  // namespace
}  // namespace tpcomm
