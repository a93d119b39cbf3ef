// allReduce, reduceScatter and allGather over the host transport with 1..8 ranks as threads of
// this process (the Gloo way), in place and out of place, f32/f16/bf16 x sum/max/min, counts from
// 1 to past 64K elements (odd ones, fewer elements than ranks). Inputs are integers whose exact
// results are known (test_util.h), outputs are poisoned first and every element is compared
// bitwise; out-of-place sends must come back untouched. To cover a new shape, add to kCounts
// or kDtypes; a new collective gets a case in runCase().
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "algos/common/coll_args.h"
#include "unit/test_util.h"

namespace tpcomm {
namespace {

using test::countWrong;
using test::expectedValue;
using test::fillInput;
using test::inputValue;
using test::makeBuffer;

const size_t kCounts[] = {1, 2, 3, 7, 63, 1023, 4101, 65537};
const DataType kDtypes[] = {DataType::kF32, DataType::kF16, DataType::kBF16};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin};

struct Case {
  CollKind kind;
  DataType dt;
  ReduceOp op;
  size_t count;  // per-rank count as the API takes it
  bool inPlace;
};

std::string describe(const Case& c, int n) {
  return std::string(collKindName(c.kind)) + " " + dataTypeName(c.dt) + " " +
         (c.kind == CollKind::kAllGather ? "" : std::string(reduceOpName(c.op)) + " ") + "count " +
         std::to_string(c.count) + " ranks " + std::to_string(n) + (c.inPlace ? " in place" : " out of place");
}

std::vector<Case> allCases() {
  std::vector<Case> cases;
  for (CollKind kind : {CollKind::kAllReduce, CollKind::kReduceScatter, CollKind::kAllGather})
    for (DataType dt : kDtypes)
      for (ReduceOp op : kOps) {
        if (kind == CollKind::kAllGather && op != ReduceOp::kSum) continue;  // no op
        for (size_t count : kCounts)
          for (bool inPlace : {false, true}) cases.push_back({kind, dt, op, count, inPlace});
      }
  return cases;
}

// Runs one case on rank `me` and checks its outputs. Returns false on a wrong result.
bool runCase(const Case& c, int me, int n, Communicator& comm) {
  const size_t es = dataTypeSize(c.dt);
  std::string what = describe(c, n) + " rank " + std::to_string(me);
  std::string first;
  Status s = Status::kOk;
  size_t wrong = 0;  // wrong elements in outputs and (out of place) in sends
  switch (c.kind) {
    case CollKind::kAllReduce: {
      std::vector<char> send = makeBuffer(c.count, c.dt), recv = makeBuffer(c.count, c.dt);
      fillInput(send.data(), c.count, c.dt, me);
      if (c.inPlace) {
        recv = send;
        s = comm.allReduce(recv.data(), recv.data(), c.count, c.dt, c.op, nullptr);
      } else {
        s = comm.allReduce(send.data(), recv.data(), c.count, c.dt, c.op, nullptr);
        size_t bad = countWrong(
            send.data(), c.count, c.dt, [&](size_t i) { return inputValue(me, i); }, &first);
        EXPECT_EQ(bad, 0u) << what << ": send buffer modified, " << first;
        wrong += bad;
      }
      EXPECT_EQ(s, Status::kOk) << what << ": " << lastErrorMessage();
      size_t bad = countWrong(
          recv.data(), c.count, c.dt, [&](size_t i) { return expectedValue(n, i, c.op); }, &first);
      EXPECT_EQ(bad, 0u) << what << ": " << bad << " wrong elements, first " << first;
      wrong += bad;
      break;
    }
    case CollKind::kReduceScatter: {
      // send holds n * count elements; rank me gets elements [me * count, (me + 1) * count).
      std::vector<char> send = makeBuffer(n * c.count, c.dt), recv = makeBuffer(c.count, c.dt);
      fillInput(send.data(), n * c.count, c.dt, me);
      const void* result;
      if (c.inPlace) {  // NCCL's in place: recv = send + rank * recvCount
        char* slice = send.data() + me * c.count * es;
        s = comm.reduceScatter(send.data(), slice, c.count, c.dt, c.op, nullptr);
        result = slice;
      } else {
        s = comm.reduceScatter(send.data(), recv.data(), c.count, c.dt, c.op, nullptr);
        result = recv.data();
        size_t bad = countWrong(
            send.data(), n * c.count, c.dt, [&](size_t i) { return inputValue(me, i); }, &first);
        EXPECT_EQ(bad, 0u) << what << ": send buffer modified, " << first;
        wrong += bad;
      }
      EXPECT_EQ(s, Status::kOk) << what << ": " << lastErrorMessage();
      size_t bad = countWrong(
          result, c.count, c.dt, [&](size_t i) { return expectedValue(n, me * c.count + i, c.op); }, &first);
      EXPECT_EQ(bad, 0u) << what << ": " << bad << " wrong elements, first " << first;
      wrong += bad;
      break;
    }
    case CollKind::kAllGather: {
      std::vector<char> send = makeBuffer(c.count, c.dt), recv = makeBuffer(n * c.count, c.dt);
      if (c.inPlace) {  // NCCL's in place: send = recv + rank * sendCount
        char* slice = recv.data() + me * c.count * es;
        fillInput(slice, c.count, c.dt, me);
        s = comm.allGather(slice, recv.data(), c.count, c.dt, nullptr);
      } else {
        fillInput(send.data(), c.count, c.dt, me);
        s = comm.allGather(send.data(), recv.data(), c.count, c.dt, nullptr);
        size_t bad = countWrong(
            send.data(), c.count, c.dt, [&](size_t i) { return inputValue(me, i); }, &first);
        EXPECT_EQ(bad, 0u) << what << ": send buffer modified, " << first;
        wrong += bad;
      }
      EXPECT_EQ(s, Status::kOk) << what << ": " << lastErrorMessage();
      size_t bad = countWrong(
          recv.data(), n * c.count, c.dt,
          [&](size_t j) { return inputValue(static_cast<int>(j / c.count), j % c.count); }, &first);
      EXPECT_EQ(bad, 0u) << what << ": " << bad << " wrong elements, first " << first;
      wrong += bad;
      break;
    }
  }
  // One rank: every collective is a copy (copy_local); more: the host path.
  const char* want = comm.size() == 1 ? "copy_local" : "staged_host";
  EXPECT_STREQ(comm.lastAlgorithm(), want) << what;
  return s == Status::kOk && wrong == 0 && std::string(comm.lastAlgorithm()) == want;
}

class HostCollectives : public ::testing::TestWithParam<int> {};

TEST_P(HostCollectives, EveryCollectiveDtypeOpCountAndPlacement) {
  const int n = GetParam();
  // Small staging geometry: irrelevant to the zero-copy threads path, but it must not get in
  // its way either (and it keeps the segment small with 8 ranks).
  test::ScopedEnv chunk("TPCOMM_STAGED_CHUNK_BYTES", "4096");
  test::ScopedEnv slots("TPCOMM_STAGED_SLOTS", "2");
  const std::vector<Case> cases = allCases();
  std::atomic<int> failedCases{0};
  test::runHostRanks(n, Config{}, [&](int me, Communicator& comm) {
    for (const Case& c : cases) {
      if (!runCase(c, me, n, comm)) {
        // Keep going (every rank must make the same calls), but stop flooding the log.
        if (++failedCases > 20) {
          ADD_FAILURE() << "rank " << me << ": too many failures, stopping";
          break;
        }
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, HostCollectives, ::testing::Range(1, 9), [](const ::testing::TestParamInfo<int>& info) {
  return std::to_string(info.param) + "ranks";
});

TEST(HostCollectivesMisc, BackToBackCallsWithAlternatingBuffers) {
  // Many small calls in a row: catches a barrier or pointer exchange that lets a fast rank
  // start the next call while a slow one still reads the previous call's buffers.
  const int n = 5;
  test::runHostRanks(n, Config{}, [&](int me, Communicator& comm) {
    std::vector<float> a(37), b(37);
    for (int iter = 0; iter < 300; ++iter) {
      std::vector<float>& buf = iter % 2 ? a : b;
      for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<float>(inputValue(me, i + iter));
      ASSERT_EQ(comm.allReduce(buf.data(), buf.data(), buf.size(), DataType::kF32, ReduceOp::kSum, nullptr),
                Status::kOk)
          << lastErrorMessage();
      for (size_t i = 0; i < buf.size(); ++i) {
        float want = 0;
        for (int r = 0; r < n; ++r) want += static_cast<float>(inputValue(r, i + iter));
        ASSERT_EQ(buf[i], want) << "iteration " << iter << " element " << i << " rank " << me;
      }
    }
  });
}

TEST(HostCollectivesMisc, TwoCommunicatorsAtOnce) {
  // Two independent groups in one process run concurrently without interfering.
  std::thread other([] {
    test::runHostRanks(3, Config{}, [](int me, Communicator& comm) {
      std::vector<float> v(1000, static_cast<float>(me + 1));
      for (int i = 0; i < 50; ++i) {
        std::fill(v.begin(), v.end(), static_cast<float>(me + 1));
        ASSERT_EQ(comm.allReduce(v.data(), v.data(), v.size(), DataType::kF32, ReduceOp::kSum, nullptr), Status::kOk);
        for (float x : v) ASSERT_EQ(x, 6.0f);
      }
    });
  });
  test::runHostRanks(2, Config{}, [](int me, Communicator& comm) {
    std::vector<float> v(999);
    for (int i = 0; i < 50; ++i) {
      std::fill(v.begin(), v.end(), static_cast<float>(10 * (me + 1)));
      ASSERT_EQ(comm.allReduce(v.data(), v.data(), v.size(), DataType::kF32, ReduceOp::kMax, nullptr), Status::kOk);
      for (float x : v) ASSERT_EQ(x, 20.0f);
    }
  });
  other.join();
}

}  // namespace
}  // namespace tpcomm
