// topology_exchange_test.cc: the topology exchange at Communicator::create grows as n^2 in all,
// not n^3 (an exchange where every rank gathered every rank's n x n block of link records, so
// 64 thread ranks peaked at 6.5 GB). probeTopology runs with host ranks as threads through a
// bootstrap that records the largest allGather; each rank may contribute at most a row of n
// link records per call (plus its own rank record), and the result must be the same topology.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "topology/probe.h"
#include "tpcomm/bootstrap.h"

namespace tpcomm {
namespace {

class CountingBootstrap : public Bootstrap {
 public:
  CountingBootstrap(std::unique_ptr<Bootstrap> inner, std::atomic<size_t>* most) : inner_(std::move(inner)), most_(most) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  Status allGather(const void* mine, void* all, size_t bytesPerRank) override {
    size_t seen = most_->load();
    while (bytesPerRank > seen && !most_->compare_exchange_weak(seen, bytesPerRank)) {
    }
    return inner_->allGather(mine, all, bytesPerRank);
  }
  Status barrier() override { return inner_->barrier(); }

 private:
  std::unique_ptr<Bootstrap> inner_;
  std::atomic<size_t>* most_;
};

TEST(TopologyExchange, EachRankSendsAtMostOneRowPerCall) {
  for (int n : {1, 2, 7, 64}) {
    SCOPED_TRACE("ranks " + std::to_string(n));
    auto group = ThreadGroup::create(n);
    std::atomic<size_t> most{0};
    std::vector<Topology> topo(n);
    std::vector<Status> st(n, Status::kInternal);
    std::vector<std::thread> ts;
    for (int r = 0; r < n; ++r)
      ts.emplace_back([&, r] {
        std::unique_ptr<Bootstrap> inner;
        ASSERT_EQ(makeThreadBootstrap(group, r, &inner), Status::kOk);
        CountingBootstrap bs(std::move(inner), &most);
        st[r] = probeTopology(bs, -1, &topo[r]);
      });
    for (auto& t : ts) t.join();
    for (int r = 0; r < n; ++r) ASSERT_EQ(st[r], Status::kOk) << "rank " << r << ": " << lastErrorMessage();
    const size_t bound = std::max(sizeof(RankRecord), sizeof(LinkRecord) * n);
    EXPECT_LE(most.load(), bound) << "largest allGather contribution " << most.load() << " bytes per rank; an n x n block is "
                                  << sizeof(LinkRecord) * n * n;
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(topo[r].nRanks(), n);
      EXPECT_EQ(topo[r].toJson(), topo[0].toJson()) << "rank " << r << " sees another topology";
      EXPECT_TRUE(topo[r].allHost());
      for (int a = 0; a < n; ++a)
        for (int b = 0; b < n; ++b)
          EXPECT_EQ(topo[r].links[a][b].kind, a == b ? LinkKind::kSelf : LinkKind::kNone) << a << "," << b;
    }
  }
}

}  // namespace
}  // namespace tpcomm
