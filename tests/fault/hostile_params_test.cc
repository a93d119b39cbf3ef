// Fault injection: hostile environment parameters. A value that does
// not fit its parameter's range is refused with a warning naming the parameter and the range,
// the default is used, and the host collectives still give exact results: no spurious instant
// kTimeout (2^32 ms used to become 0 ms), no overflowing staging geometry (2^60-byte chunks).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tpcomm/tpcomm.h"
#include "unit/test_util.h"

namespace tpcomm {
namespace {

struct HostileRow {
  const char* env;
  const char* value;
};

const HostileRow kRows[] = {
    {"TPCOMM_TIMEOUT_MS", "4294967296"},          // was 0 ms
    {"TPCOMM_TIMEOUT_MS", "2147483648"},          // was negative
    {"TPCOMM_TIMEOUT_MS", "9223372036854775807"}, // overflowed the deadline
    {"TPCOMM_TIMEOUT_MS", "0"},                   // instant timeout
    {"TPCOMM_TIMEOUT_MS", "abc"},
    {"TPCOMM_STAGED_SLOTS", "-1"},
    {"TPCOMM_STAGED_SLOTS", "4294967298"},  // was 2 after truncation
    {"TPCOMM_STAGED_BLOCKS", "4294967296"},
    {"TPCOMM_STAGED_CHUNK_BYTES", "1152921504606846976"},  // 2^60
    {"TPCOMM_STAGED_CHUNK_BYTES", "4611686018427387904"},  // 2^62
    {"TPCOMM_STAGED_CHUNK_BYTES", "16G"},
};

TEST(HostileParams, RefusedWithAWarningAndTheCollectivesStillWork) {
  for (const HostileRow& row : kRows) {
    SCOPED_TRACE(std::string(row.env) + "=" + row.value);
    testing::internal::CaptureStderr();
    test::ScopedEnv env(row.env, row.value);
    const int n = 3;
    const size_t count = 4099;
    test::runHostRanks(n, Config{}, [&](int me, Communicator& comm) {
      for (int rep = 0; rep < 3; ++rep) {
        std::vector<float> send(count), recv(count, -1.0f);
        test::fillInput(send.data(), count, DataType::kF32, me);
        Status s = comm.allReduce(send.data(), recv.data(), count, DataType::kF32, ReduceOp::kSum, nullptr);
        ASSERT_EQ(s, Status::kOk) << "rank " << me << ": " << lastErrorMessage();
        std::string first;
        EXPECT_EQ(test::countWrong(recv.data(), count, DataType::kF32,
                                   [&](size_t i) { return test::expectedValue(n, i, ReduceOp::kSum); }, &first),
                  0u)
            << first;
      }
    });
    std::string err = testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find(std::string(row.env) + "='" + row.value + "': expected"), std::string::npos)
        << "no warning naming the parameter; stderr: " << err;
  }
}

}  // namespace
}  // namespace tpcomm
