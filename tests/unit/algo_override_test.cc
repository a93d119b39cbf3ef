// TPCOMM_ALGO parser (collectives/algo_override.h): well-formed strings parse to the expected
// rules; malformed ones return kInvalidArgument with a message quoting the offending piece.
// To cover a new form, add a row to kGood or kBad.
#include "collectives/algo_override.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tpcomm/status.h"

namespace tpcomm {
namespace {

// The names the parser accepts in these tests; deliberately includes names that do not exist
// yet, so the parser is tested independently of the registry.
const std::vector<std::string> kKnown = {"staged_host", "ring_nccl", "oneshot_p2p", "twoshot_p2p"};
constexpr uint64_t kInf = UINT64_MAX;

struct GoodRow {
  const char* text;
  bool exclude;
  std::vector<std::string> excluded;
  std::vector<AlgoRule> rules;
};

const GoodRow kGood[] = {
    {"", false, {}, {}},
    {"   ", false, {}, {}},
    {"staged_host", false, {}, {{0, kInf, {"staged_host"}}}},
    {" ring_nccl ", false, {}, {{0, kInf, {"ring_nccl"}}}},
    {"0-64K:oneshot_p2p,64K-inf:ring_nccl", false, {}, {{0, 65536, {"oneshot_p2p"}}, {65536, kInf, {"ring_nccl"}}}},
    {"0-64K:oneshot_p2p|staged_host", false, {}, {{0, 65536, {"oneshot_p2p", "staged_host"}}}},
    {"1M-2M:twoshot_p2p", false, {}, {{1u << 20, 2u << 20, {"twoshot_p2p"}}}},
    {"4096-1G:ring_nccl", false, {}, {{4096, 1ull << 30, {"ring_nccl"}}}},
    {"0-64KB:staged_host", false, {}, {{0, 65536, {"staged_host"}}}},
    {"0 - 1K : staged_host , 1K-INF: ring_nccl", false, {}, {{0, 1024, {"staged_host"}}, {1024, kInf, {"ring_nccl"}}}},
    {"^ring_nccl", true, {"ring_nccl"}, {}},
    {"^ring_nccl,staged_host", true, {"ring_nccl", "staged_host"}, {}},
};

TEST(AlgoOverride, GoodStrings) {
  for (const GoodRow& row : kGood) {
    SCOPED_TRACE(std::string("TPCOMM_ALGO='") + row.text + "'");
    AlgoOverride o;
    ASSERT_EQ(parseAlgoOverride(row.text, kKnown, &o), Status::kOk) << lastErrorMessage();
    EXPECT_EQ(o.exclude, row.exclude);
    EXPECT_EQ(o.excluded, row.excluded);
    ASSERT_EQ(o.rules.size(), row.rules.size());
    for (size_t i = 0; i < row.rules.size(); ++i) {
      EXPECT_EQ(o.rules[i].lo, row.rules[i].lo) << "rule " << i;
      EXPECT_EQ(o.rules[i].hi, row.rules[i].hi) << "rule " << i;
      EXPECT_EQ(o.rules[i].names, row.rules[i].names) << "rule " << i;
    }
    EXPECT_EQ(o.empty(), !row.exclude && row.rules.empty());
  }
}

struct BadRow {
  const char* text;
  const char* mustMention;  // a piece of the message that names what is wrong
};

const BadRow kBad[] = {
    {"0-:staged_host", "''"},                            // empty upper bound
    {"-64K:staged_host", "''"},                          // empty lower bound
    {"64K-0:staged_host", "64K-0"},                      // empty range
    {"64K-64K:staged_host", "64K-64K"},                  // empty range
    {"inf-inf:staged_host", "inf-inf"},                  // starts at inf
    {"abc", "abc"},                                      // unknown algorithm
    {"0-64K:nosuch", "nosuch"},                          // unknown algorithm in a range
    {"0-64K:staged_host|nosuch", "nosuch"},              // unknown in a list
    {"0-64K:staged_host|", "empty algorithm name"},      // trailing '|'
    {"0-64K:", "empty algorithm name"},                  // no name
    {"^", "empty algorithm name"},                       // exclude nothing
    {"^nosuch", "nosuch"},                               // exclude an unknown name
    {"^ring_nccl,", "empty algorithm name"},             // trailing comma in exclude list
    {",", "empty entry"},                                // stray comma
    {"staged_host,", "empty entry"},                     // trailing comma
    {",staged_host", "empty entry"},                     // leading comma
    {"1-2:staged_host,1-3:ring_nccl", "1-3:ring_nccl"},  // overlapping ranges
    {"0-inf:staged_host,1M-2M:ring_nccl", "1M-2M:ring_nccl"},
    {"10Q-20:staged_host", "10Q"},                                     // bad unit
    {"10-20X:staged_host", "20X"},                                     // bad unit
    {"1.5K-2K:staged_host", "1.5K"},                                   // not an integer
    {"99999999999999999999-inf:staged_host", "99999999999999999999"},  // overflows 64 bits
    {"16777216T-inf:staged_host", "16777216T"},
    {"64K:staged_host", "64K"},               // range without '-'
    {"0-64K:staged_host,^ring_nccl", "'^'"},  // '^' inside the list
};

TEST(AlgoOverride, MalformedStringsAreRejectedWithAMessage) {
  for (const BadRow& row : kBad) {
    SCOPED_TRACE(std::string("TPCOMM_ALGO='") + row.text + "'");
    AlgoOverride o;
    o.rules.push_back({1, 2, {"sentinel"}});
    EXPECT_EQ(parseAlgoOverride(row.text, kKnown, &o), Status::kInvalidArgument);
    std::string msg = lastErrorMessage();
    EXPECT_NE(msg.find("TPCOMM_ALGO"), std::string::npos) << msg;
    EXPECT_NE(msg.find(row.mustMention), std::string::npos)
        << "message does not name '" << row.mustMention << "': " << msg;
    // *out is left alone on failure.
    ASSERT_EQ(o.rules.size(), 1u);
    EXPECT_EQ(o.rules[0].names[0], "sentinel");
  }
}

TEST(AlgoOverride, UnknownNameMessageListsTheKnownOnes) {
  AlgoOverride o;
  ASSERT_EQ(parseAlgoOverride("nosuch", kKnown, &o), Status::kInvalidArgument);
  std::string msg = lastErrorMessage();
  for (const std::string& k : kKnown) EXPECT_NE(msg.find(k), std::string::npos) << msg;
}

struct ForcedRow {
  const char* text;
  uint64_t bytes;
  std::vector<std::string> forced;
};

const ForcedRow kForced[] = {
    {"staged_host", 0, {"staged_host"}},
    {"staged_host", 1ull << 40, {"staged_host"}},
    {"0-64K:oneshot_p2p,64K-inf:ring_nccl", 0, {"oneshot_p2p"}},
    {"0-64K:oneshot_p2p,64K-inf:ring_nccl", 65535, {"oneshot_p2p"}},
    {"0-64K:oneshot_p2p,64K-inf:ring_nccl", 65536, {"ring_nccl"}},  // hi is exclusive
    {"0-64K:oneshot_p2p,64K-inf:ring_nccl", UINT64_MAX, {"ring_nccl"}},
    {"1K-2K:oneshot_p2p|staged_host", 1500, {"oneshot_p2p", "staged_host"}},
    {"1K-2K:oneshot_p2p", 1023, {}},  // not covered: the selector decides
    {"1K-2K:oneshot_p2p", 2048, {}},
    {"^ring_nccl", 4096, {}},
};

TEST(AlgoOverride, ForcedForAndExcludes) {
  for (const ForcedRow& row : kForced) {
    SCOPED_TRACE(std::string("TPCOMM_ALGO='") + row.text + "' bytes " + std::to_string(row.bytes));
    AlgoOverride o;
    ASSERT_EQ(parseAlgoOverride(row.text, kKnown, &o), Status::kOk) << lastErrorMessage();
    EXPECT_EQ(o.forcedFor(row.bytes), row.forced);
  }
  AlgoOverride o;
  ASSERT_EQ(parseAlgoOverride("^ring_nccl,oneshot_p2p", kKnown, &o), Status::kOk);
  EXPECT_TRUE(o.excludes("ring_nccl"));
  EXPECT_TRUE(o.excludes("oneshot_p2p"));
  EXPECT_FALSE(o.excludes("staged_host"));
  ASSERT_EQ(parseAlgoOverride("staged_host", kKnown, &o), Status::kOk);
  EXPECT_FALSE(o.excludes("staged_host"));  // include form excludes nothing
  EXPECT_FALSE(o.excludes("ring_nccl"));
}

}  // namespace
}  // namespace tpcomm
