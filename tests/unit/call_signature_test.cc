// Ranks that make different calls: another count, dtype, op or collective on
// one rank. Before the check, threads overflowed a peer's heap buffer
// ("double free or corruption") and processes got silently wrong data; now every rank fails with
// kInvalidArgument naming the ranks and the field, and writes nothing.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "unit/test_util.h"

namespace tpcomm {
namespace {

struct Mismatch {
  const char* what;
  const char* field;  // must appear in every rank's message
  size_t count1;      // rank 1's count (rank 0: 1024)
  DataType dtype1;
  ReduceOp op1;
  bool gather1;  // rank 1 calls allGather instead of allReduce
};

TEST(CallSignature, MismatchedCallsFailOnEveryRankAndWriteNothing) {
  const Mismatch rows[] = {
      {"larger count on rank 1", "count", 4096, DataType::kF32, ReduceOp::kSum, false},
      {"smaller count on rank 1", "count", 16, DataType::kF32, ReduceOp::kSum, false},
      {"f16 on rank 1", "dtype", 1024, DataType::kF16, ReduceOp::kSum, false},
      {"max on rank 1", "op", 1024, DataType::kF32, ReduceOp::kMax, false},
      {"allGather on rank 1", "collective", 1024, DataType::kF32, ReduceOp::kSum, true},
  };
  for (const Mismatch& m : rows) {
    SCOPED_TRACE(m.what);
    test::runHostRanks(2, Config{}, [&](int me, Communicator& comm) {
      const size_t count = me == 0 ? 1024 : m.count1;
      std::vector<float> send(count * 2, 1.0f), recv(count * 2, -3.0f);
      Status s = me == 1 && m.gather1 ? comm.allGather(send.data(), recv.data(), count, DataType::kF32, nullptr)
                                      : comm.allReduce(send.data(), recv.data(), count, me == 0 ? DataType::kF32 : m.dtype1,
                                                       me == 0 ? ReduceOp::kSum : m.op1, nullptr);
      EXPECT_EQ(s, Status::kInvalidArgument) << "rank " << me << ": " << lastErrorMessage();
      const std::string msg = lastErrorMessage();
      EXPECT_NE(msg.find(m.field), std::string::npos) << msg;
      EXPECT_NE(msg.find("rank 1"), std::string::npos) << msg;
      for (float v : recv) ASSERT_EQ(v, -3.0f) << "rank " << me << ": recv written by a refused call";
      // The communicator stays usable: the next matching call is right.
      std::vector<float> a(8, 1.0f + me), b(8, 0.0f);
      EXPECT_EQ(comm.allReduce(a.data(), b.data(), 8, DataType::kF32, ReduceOp::kSum, nullptr), Status::kOk)
          << lastErrorMessage();
    });
  }
}

}  // namespace
}  // namespace tpcomm
