// Consumer of an installed tpcomm: two host ranks as threads, one all-reduce, exact check.
// Uses only the public headers, as an engine linking tpcomm::tpcomm would.
#include <tpcomm/tpcomm.h>

#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

int main() {
  const int n = 2;
  const size_t count = 1000;
  auto group = tpcomm::ThreadGroup::create(n);
  std::vector<int> ok(n, 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<tpcomm::Bootstrap> bs;
      std::unique_ptr<tpcomm::Communicator> comm;
      if (tpcomm::makeThreadBootstrap(group, r, &bs) != tpcomm::Status::kOk ||
          tpcomm::Communicator::create(*bs, -1, tpcomm::Config{}, &comm) != tpcomm::Status::kOk) {
        std::fprintf(stderr, "rank %d: create: %s\n", r, tpcomm::lastErrorMessage());
        return;
      }
      std::vector<float> send(count), recv(count, -1.0f);
      for (size_t i = 0; i < count; ++i) send[i] = static_cast<float>(i % 17) + r;
      tpcomm::Status s =
          comm->allReduce(send.data(), recv.data(), count, tpcomm::DataType::kF32, tpcomm::ReduceOp::kSum, nullptr);
      if (s != tpcomm::Status::kOk) {
        std::fprintf(stderr, "rank %d: allReduce: %s %s\n", r, tpcomm::statusName(s), tpcomm::lastErrorMessage());
        return;
      }
      int wrong = 0;
      for (size_t i = 0; i < count; ++i)
        if (recv[i] != 2.0f * static_cast<float>(i % 17) + 1.0f) ++wrong;
      if (wrong) std::fprintf(stderr, "rank %d: %d wrong elements\n", r, wrong);
      ok[r] = wrong == 0 && comm->destroy() == tpcomm::Status::kOk;
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r)
    if (!ok[r]) return 1;
  std::printf("tpcomm_consumer: ok (%s, %d ranks)\n", TPCOMM_VERSION_STRING, n);
  return 0;
}
