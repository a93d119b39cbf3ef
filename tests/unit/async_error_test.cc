// The error code a timed-out wait publishes (src/common/async_error.h), on the CPU: what the
// waiter concludes from the late rank's host call counter and arrival word (timeoutCode), that
// the fields survive the code's layout, and the text the messages quote (latenessText). The
// kernels and the host barrier call the same timeoutCode, so one table covers the P2P paths,
// staged_host's kernels and the host ranks.
#include "common/async_error.h"

#include <gtest/gtest.h>

#include <string>

namespace tpcomm {
namespace {

struct LateRow {
  const char* what;
  uint64_t call, peerCalls, peerArrival;
  bool kernels;
  Lateness want;
  uint32_t behind;
  const char* text;  // latenessText(code, 150) contains it ("" : the text is empty)
};

const LateRow kLateRows[] = {
    {"no call numbers", 0, 5, 0, true, Lateness::kUnknown, 0, ""},
    {"its host one call behind", 7, 6, arrivalDone(6), true, Lateness::kCallNotMade, 1,
     "rank 3 never made this call (its host is 1 call behind)"},
    {"its host two calls behind", 7, 5, arrivalDone(5), true, Lateness::kCallNotMade, 2,
     "rank 3 never made this call (its host is 2 calls behind)"},
    {"its host far behind (capped)", 1000, 1, 0, true, Lateness::kCallNotMade, kMaxCallsBehind,
     "its host is 63 or more calls behind"},
    {"made, its kernel behind an earlier one", 7, 7, arrivalStarted(6), true, Lateness::kKernelNotStarted, 0,
     "rank 3 made the call but its kernel had not started after 150 ms (its stream is busy)"},
    {"made, its stream ahead of its kernel", 7, 9, arrivalDone(6), true, Lateness::kKernelNotStarted, 0,
     "its kernel had not started"},
    {"made, this call's kernel done by a graph's earlier replay", 7, 7, arrivalDone(7), true,
     Lateness::kKernelNotStarted, 0, "its kernel had not started"},
    {"made, its kernel running", 7, 7, arrivalStarted(7), true, Lateness::kInsideCall, 0,
     "rank 3 made the call but had not reached this step of it after 150 ms"},
    {"host ranks: made the call", 7, 7, 0, false, Lateness::kInsideCall, 0, "had not reached this step"},
    {"host ranks: never made it", 7, 6, 0, false, Lateness::kCallNotMade, 1, "never made this call"},
};

TEST(AsyncError, TimeoutCodeSaysWhyTheRankWasLate) {
  for (const LateRow& row : kLateRows) {
    SCOPED_TRACE(row.what);
    const uint32_t code = timeoutCode(3, row.call, row.peerCalls, row.peerArrival, row.kernels);
    EXPECT_EQ(asyncErrorStatus(code), Status::kTimeout);
    EXPECT_EQ(asyncErrorPeer(code), 3);
    EXPECT_EQ(asyncErrorLateness(code), row.want);
    EXPECT_EQ(asyncErrorBehind(code), row.behind);
    const std::string text = latenessText(code, 150);
    if (*row.text == '\0')
      EXPECT_EQ(text, "");
    else
      EXPECT_NE(text.find(row.text), std::string::npos) << text;
  }
}

TEST(AsyncError, CodeFieldsRoundTrip) {
  for (Status s : {Status::kTimeout, Status::kInvalidArgument, Status::kRemoteError, Status::kInternal})
    for (int peer : {-1, 0, 1, 63, 1000})
      for (Lateness why :
           {Lateness::kUnknown, Lateness::kCallNotMade, Lateness::kKernelNotStarted, Lateness::kInsideCall})
        for (uint64_t behind : {0ull, 1ull, 62ull, 63ull, 64ull, ~0ull}) {
          const uint32_t code = asyncErrorCode(s, peer, why, behind);
          EXPECT_EQ(asyncErrorStatus(code), s);
          EXPECT_EQ(asyncErrorPeer(code), peer);
          EXPECT_EQ(asyncErrorLateness(code), why);
          EXPECT_EQ(asyncErrorBehind(code), behind < kMaxCallsBehind ? behind : kMaxCallsBehind);
        }
  // The plain form (no lateness) is the layout every older writer used: status | (peer + 1) << 16.
  EXPECT_EQ(AsyncError::encode(Status::kTimeout, 2), static_cast<uint32_t>(Status::kTimeout) | 3u << 16);
}

TEST(AsyncError, ReadFallsBackToTheSharedWord) {
  uint32_t mine = 0, shared = 0;
  AsyncError e;
  e.word = &mine;
  EXPECT_EQ(e.read(), 0u);
  e.shared = &shared;
  EXPECT_EQ(e.read(), 0u);
  shared = asyncErrorCode(Status::kTimeout, 1, Lateness::kKernelNotStarted);
  EXPECT_EQ(e.read(), shared) << "a failure another rank published";
  mine = asyncErrorCode(Status::kTimeout, 0);
  EXPECT_EQ(e.read(), mine) << "this rank's own comes first";
}

}  // namespace
}  // namespace tpcomm
