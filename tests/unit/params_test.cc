// Environment parameters (common/params.h) and the multicast gate (Topology::multicastUsable).
// Params are parsed by value, never by presence (TPCOMM_X=0 means off); a rejected value is a
// problem checkParams reports (create refuses it), and paramInt falls back to the default. The multicast gate must stay
// closed under NCCL_NVLS_ENABLE=0 or TPCOMM_MULTICAST=0 even when the fixture says the hardware and the probe allow it:
// this is the safety test docs/multicast.md asks for (multicast can take a shared machine's GPUs down).
#include "common/params.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "topology/topology.h"
#include "unit/test_util.h"

namespace tpcomm {
namespace {

using test::ScopedEnv;

struct SizeRow {
  const char* text;
  bool ok;
  uint64_t value;
};

const SizeRow kSizes[] = {
    {"0", true, 0},
    {"1", true, 1},
    {"4096", true, 4096},
    {"64K", true, 65536},
    {"64k", true, 65536},
    {"64KB", true, 65536},
    {"2M", true, 2u << 20},
    {"1G", true, 1u << 30},
    {" 7 ", true, 7},
    {"18446744073709551615", true, UINT64_MAX},
    {"18446744073709551616", false, 0},  // one past 64 bits
    {"17179869184G", false, 0},          // 2^34 G overflows
    {"", false, 0},
    {" ", false, 0},
    {"-1", false, 0},
    {"+1", false, 0},
    {"abc", false, 0},
    {"12x", false, 0},
    {"10Q", false, 0},
    {"1.5", false, 0},
    {"1 K", false, 0},
    {"K", false, 0},
    {"0x10", false, 0},
    {"1KK", false, 0},
    {"1B", false, 0},  // B only after a unit
};

TEST(Params, ParseSize) {
  for (const SizeRow& row : kSizes) {
    SCOPED_TRACE(std::string("'") + row.text + "'");
    uint64_t v = 12345;
    EXPECT_EQ(parseSize(row.text, &v), row.ok);
    if (row.ok) EXPECT_EQ(v, row.value);
  }
}

TEST(Params, TableHasEveryParamWithHelp) {
  const auto& table = params();
  ASSERT_EQ(table.size(), static_cast<size_t>(ParamId::kCount));
  for (const ParamInfo& p : table) {
    EXPECT_NE(std::string(p.name), "");
    EXPECT_NE(std::string(p.help), "") << p.name;
    EXPECT_EQ(std::string(p.name).find("TPCOMM_"), std::string::npos) << "names omit the prefix: " << p.name;
  }
}

struct IntRow {
  ParamId id;
  const char* env;
  const char* value;  // nullptr: unset
  int64_t want;
};

// Defaults come from the table itself, so a retuned default does not break these rows.
int64_t defaultOf(ParamId id) {
  uint64_t v = 0;
  EXPECT_TRUE(parseSize(params()[static_cast<int>(id)].defaultValue, &v));
  return static_cast<int64_t>(v);
}

TEST(Params, IntegersParseByValueAndFallBackToTheDefault) {
  const IntRow rows[] = {
      {ParamId::kNccl, "TPCOMM_NCCL", "0", 0},  // =0 means off: by value, not presence
      {ParamId::kNccl, "TPCOMM_NCCL", "1", 1},
      {ParamId::kNccl, "TPCOMM_NCCL", nullptr, defaultOf(ParamId::kNccl)},
      {ParamId::kMulticast, "TPCOMM_MULTICAST", "0", 0},
      {ParamId::kTimeoutMs, "TPCOMM_TIMEOUT_MS", "300", 300},
      {ParamId::kTimeoutMs, "TPCOMM_TIMEOUT_MS", "abc", defaultOf(ParamId::kTimeoutMs)},
      {ParamId::kTimeoutMs, "TPCOMM_TIMEOUT_MS", "12x", defaultOf(ParamId::kTimeoutMs)},
      {ParamId::kTimeoutMs, "TPCOMM_TIMEOUT_MS", "-5", defaultOf(ParamId::kTimeoutMs)},
      {ParamId::kTimeoutMs, "TPCOMM_TIMEOUT_MS", "", defaultOf(ParamId::kTimeoutMs)},
      {ParamId::kTimeoutMs, "TPCOMM_TIMEOUT_MS", "99999999999999999999", defaultOf(ParamId::kTimeoutMs)},
      {ParamId::kStagedChunkBytes, "TPCOMM_STAGED_CHUNK_BYTES", "64K", 65536},
      {ParamId::kStagedChunkBytes, "TPCOMM_STAGED_CHUNK_BYTES", "1M", 1 << 20},
      {ParamId::kStagedSlots, "TPCOMM_STAGED_SLOTS", "2", 2},
      {ParamId::kStagedSlots, "TPCOMM_STAGED_SLOTS", "two", defaultOf(ParamId::kStagedSlots)},
      // Values that would truncate in the int the callers cast to (2^32 ms
      // became 0, 2^31 negative), overflow the deadline (INT64_MAX) or time out at once (0).
      {ParamId::kTimeoutMs, "TPCOMM_TIMEOUT_MS", "4294967296", defaultOf(ParamId::kTimeoutMs)},
      {ParamId::kTimeoutMs, "TPCOMM_TIMEOUT_MS", "2147483648", defaultOf(ParamId::kTimeoutMs)},
      {ParamId::kTimeoutMs, "TPCOMM_TIMEOUT_MS", "9223372036854775807", defaultOf(ParamId::kTimeoutMs)},
      {ParamId::kTimeoutMs, "TPCOMM_TIMEOUT_MS", "0", defaultOf(ParamId::kTimeoutMs)},
      {ParamId::kTimeoutMs, "TPCOMM_TIMEOUT_MS", "2147483647", 2147483647},
      {ParamId::kTimeoutMs, "TPCOMM_TIMEOUT_MS", "1", 1},
      {ParamId::kTimeoutMs, "TPCOMM_TIMEOUT_MS", "10K", defaultOf(ParamId::kTimeoutMs)},  // suffixes: sizes only
      {ParamId::kStagedSlots, "TPCOMM_STAGED_SLOTS", "-1", defaultOf(ParamId::kStagedSlots)},
      {ParamId::kStagedSlots, "TPCOMM_STAGED_SLOTS", "1", defaultOf(ParamId::kStagedSlots)},
      {ParamId::kStagedSlots, "TPCOMM_STAGED_SLOTS", "4294967298", defaultOf(ParamId::kStagedSlots)},
      {ParamId::kStagedBlocks, "TPCOMM_STAGED_BLOCKS", "0", defaultOf(ParamId::kStagedBlocks)},
      {ParamId::kStagedBlocks, "TPCOMM_STAGED_BLOCKS", "4294967297", defaultOf(ParamId::kStagedBlocks)},
      {ParamId::kP2pBlocks, "TPCOMM_P2P_BLOCKS", "2147483648", defaultOf(ParamId::kP2pBlocks)},
      // Sizes whose products would overflow the segment arithmetic.
      {ParamId::kStagedChunkBytes, "TPCOMM_STAGED_CHUNK_BYTES", "4611686018427387904",
       defaultOf(ParamId::kStagedChunkBytes)},
      {ParamId::kStagedChunkBytes, "TPCOMM_STAGED_CHUNK_BYTES", "1152921504606846976",
       defaultOf(ParamId::kStagedChunkBytes)},
      {ParamId::kStagedChunkBytes, "TPCOMM_STAGED_CHUNK_BYTES", "2G", defaultOf(ParamId::kStagedChunkBytes)},
      // A size staged_host cannot use (not a multiple of 4096) or one so large
      // that create spends tens of seconds on the segment (1G: 35 s) is rejected.
      {ParamId::kStagedChunkBytes, "TPCOMM_STAGED_CHUNK_BYTES", "1G", defaultOf(ParamId::kStagedChunkBytes)},
      {ParamId::kStagedChunkBytes, "TPCOMM_STAGED_CHUNK_BYTES", "65M", defaultOf(ParamId::kStagedChunkBytes)},
      {ParamId::kStagedChunkBytes, "TPCOMM_STAGED_CHUNK_BYTES", "64M", 64 << 20},
      {ParamId::kStagedChunkBytes, "TPCOMM_STAGED_CHUNK_BYTES", "5000", defaultOf(ParamId::kStagedChunkBytes)},
      {ParamId::kStagedChunkBytes, "TPCOMM_STAGED_CHUNK_BYTES", "4097", defaultOf(ParamId::kStagedChunkBytes)},
      {ParamId::kStagedChunkBytes, "TPCOMM_STAGED_CHUNK_BYTES", "8192", 8192},
      {ParamId::kLamportMaxBytes, "TPCOMM_LAMPORT_MAX_BYTES", "16G", defaultOf(ParamId::kLamportMaxBytes)},
      {ParamId::kTwoshotChunkBytes, "TPCOMM_TWOSHOT_CHUNK_BYTES", "0", defaultOf(ParamId::kTwoshotChunkBytes)},
      {ParamId::kNccl, "TPCOMM_NCCL", "2", defaultOf(ParamId::kNccl)},
  };
  for (const IntRow& row : rows) {
    SCOPED_TRACE(std::string(row.env) + "=" + (row.value ? std::string("'") + row.value + "'" : "(unset)"));
    ScopedEnv env(row.env, row.value);
    EXPECT_EQ(paramInt(row.id), row.want);
    const ParamInfo& p = params()[static_cast<int>(row.id)];
    const bool set = row.value && *row.value;  // set but empty counts as unset
    EXPECT_EQ(p.fromEnv, set);
    EXPECT_EQ(paramString(row.id), set ? row.value : p.defaultValue);
  }
}

// Every numeric parameter has a range that holds its default and fits the int its users cast
// it to (counts, blocks, milliseconds) or a size_t (bytes).
TEST(Params, EveryNumericParamHasARangeHoldingItsDefault) {
  for (const ParamInfo& p : params()) {
    SCOPED_TRACE(p.name);
    if (p.kind == ParamKind::kText) continue;
    EXPECT_LE(p.min, p.max);
    EXPECT_LE(p.max, p.kind == ParamKind::kSize ? int64_t{1} << 40 : int64_t{INT32_MAX});
    uint64_t d = 0;
    ASSERT_TRUE(parseSize(p.defaultValue, &d));
    EXPECT_GE(static_cast<int64_t>(d), p.min);
    EXPECT_LE(static_cast<int64_t>(d), p.max);
    EXPECT_FALSE(paramRangeText(p).empty());
  }
}

// The problem text names the parameter, the value and the range; the doctor prints it.
TEST(Params, ProblemNamesTheParameterAndTheRange) {
  {
    ScopedEnv env("TPCOMM_TIMEOUT_MS", "4294967296");
    std::string why = paramProblem(ParamId::kTimeoutMs);
    EXPECT_NE(why.find("TPCOMM_TIMEOUT_MS='4294967296'"), std::string::npos) << why;
    EXPECT_NE(why.find("[1, 2147483647]"), std::string::npos) << why;
  }
  {
    ScopedEnv env("TPCOMM_TIMEOUT_MS", "300");
    EXPECT_EQ(paramProblem(ParamId::kTimeoutMs), "");
  }
  {
    ScopedEnv env("TPCOMM_DEBUG", "garbage");
    std::string why = paramProblem(ParamId::kDebug);
    EXPECT_NE(why.find("TPCOMM_DEBUG='garbage'"), std::string::npos) << why;
    EXPECT_NE(why.find("NONE, WARN, INFO or TRACE"), std::string::npos) << why;
  }
  for (const char* ok : {"WARN", "info", "TRACE", "NONE", "0"}) {
    ScopedEnv env("TPCOMM_DEBUG", ok);
    EXPECT_EQ(paramProblem(ParamId::kDebug), "") << ok;
  }
  {
    ScopedEnv env("TPCOMM_DEBUG_SUBSYS", "INIT,BOGUS");
    EXPECT_NE(paramProblem(ParamId::kDebugSubsys).find("'BOGUS'"), std::string::npos);
  }
}

// Every variable: set but empty means the default, never an error.
TEST(Params, EmptyValueMeansTheDefaultForEveryVariable) {
  for (int i = 0; i < static_cast<int>(ParamId::kCount); ++i) {  // by index: each ScopedEnv re-reads the table
    const ParamId id = static_cast<ParamId>(i);
    const std::string env = std::string("TPCOMM_") + params()[i].name;
    SCOPED_TRACE(env + "=''");
    ScopedEnv e(env.c_str(), "");
    const ParamInfo& now = params()[i];
    EXPECT_FALSE(now.fromEnv);
    EXPECT_EQ(now.value, now.defaultValue);
    EXPECT_EQ(paramProblem(id), "");
  }
  ScopedEnv e("TPCOMM_COMPRESSION", "");
  EXPECT_EQ(checkParams("create"), Status::kOk) << lastErrorMessage();
  EXPECT_EQ(paramString(ParamId::kCompression), "none");
}

// One rule for every variable (params.h): a rejected value is an error naming the variable, the
// value and what is accepted; test::rejectedValues() has one row per kind of bad value.
TEST(Params, CheckParamsNamesVariableValueAndWhatIsAccepted) {
  ASSERT_EQ(checkParams("create"), Status::kOk) << lastErrorMessage();  // the test's own environment is clean
  for (const test::RejectedValue& row : test::rejectedValues()) {
    SCOPED_TRACE(std::string(row.env) + "=" + row.value);
    ScopedEnv env(row.env, row.value);
    ASSERT_EQ(checkParams("create"), Status::kInvalidArgument);
    const std::string msg = lastErrorMessage();
    EXPECT_EQ(msg.find("create: "), 0u) << msg;
    EXPECT_NE(msg.find(std::string(row.env) + "='" + row.value + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(row.accepted), std::string::npos) << msg;
    EXPECT_EQ(msg.find("kInvalidArgument"), std::string::npos) << "one prefix: " << msg;
  }
  // A library name without '/' is dlopen's to find, not checked here.
  ScopedEnv lib("TPCOMM_NCCL_LIBRARY", "libnccl.so.2");
  EXPECT_EQ(paramProblem(ParamId::kNcclLibrary), "");
  // A variable the caller does not read (code set the same thing) is not checked.
  ScopedEnv t("TPCOMM_TIMEOUT_MS", "abc");
  EXPECT_EQ(checkParams("create", {ParamId::kTimeoutMs}), Status::kOk);
}

// TPCOMM_DEBUG=garbage is not ignored silently: one warning names it.
TEST(Params, BadDebugLevelIsWarnedAbout) {
  testing::internal::CaptureStderr();
  {
    ScopedEnv env("TPCOMM_DEBUG", "garbage");
  }
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("TPCOMM_DEBUG='garbage'"), std::string::npos) << err;
}

TEST(Params, ReloadSeesChangesAndRestores) {
  std::string before = paramString(ParamId::kAlgo);
  {
    ScopedEnv env("TPCOMM_ALGO", "^ring_nccl");
    EXPECT_EQ(paramString(ParamId::kAlgo), "^ring_nccl");
  }
  EXPECT_EQ(paramString(ParamId::kAlgo), before);
}

// --- the multicast gate ---

// 8 GPUs on one NVSwitch whose devices report multicast support and whose probe allowed it.
Topology multicastCapable(int n) {
  Topology t = Topology::uniform(n, LinkKind::kNvswitch, 18);
  for (RankDevice& r : t.ranks) r.multicastSupported = true;
  t.multicastAllowedByEnv = true;
  return t;
}

TEST(MulticastGate, ClosedByNcclNvlsEnable0) {
  ScopedEnv nvls("NCCL_NVLS_ENABLE", "0");
  std::string why;
  EXPECT_TRUE(multicastDisabledByEnv(&why));
  EXPECT_NE(why.find("NCCL_NVLS_ENABLE=0"), std::string::npos) << why;
  Topology t = multicastCapable(8);
  why.clear();
  EXPECT_FALSE(t.multicastUsable(&why));
  EXPECT_NE(why.find("NCCL_NVLS_ENABLE=0"), std::string::npos) << why;
  // The same through JSON (a fixture file saying "allowed").
  Topology rt;
  ASSERT_EQ(Topology::fromJson(t.toJson(), &rt), Status::kOk) << lastErrorMessage();
  EXPECT_TRUE(rt.multicastAllowedByEnv);
  EXPECT_FALSE(rt.multicastUsable(nullptr));
}

TEST(MulticastGate, ClosedByTpcommMulticast0) {
  ScopedEnv mc("TPCOMM_MULTICAST", "0");
  std::string why;
  EXPECT_TRUE(multicastDisabledByEnv(&why));
  Topology t = multicastCapable(8);
  EXPECT_FALSE(t.multicastUsable(&why));
  EXPECT_FALSE(why.empty());
  EXPECT_NE(why.find("=0"), std::string::npos) << why;
}

TEST(MulticastGate, ClosedWhenBothSwitchesAreOff) {
  ScopedEnv nvls("NCCL_NVLS_ENABLE", "0");
  ScopedEnv mc("TPCOMM_MULTICAST", "0");
  EXPECT_FALSE(multicastCapable(8).multicastUsable(nullptr));
  EXPECT_FALSE(multicastCapable(4).multicastUsable(nullptr));
}

TEST(MulticastGate, TpcommMulticastIsReadByValue) {
  // TPCOMM_MULTICAST=1 does not close the gate: only the value 0 does. (NCCL_NVLS_ENABLE is
  // whatever the machine has; on the shared GPU machines it is 0 and must stay so.)
  ScopedEnv mc("TPCOMM_MULTICAST", "1");
  const char* nvls = std::getenv("NCCL_NVLS_ENABLE");
  bool nvlsOff = nvls && std::string(nvls) == "0";
  EXPECT_EQ(multicastDisabledByEnv(nullptr), nvlsOff);
  EXPECT_EQ(multicastCapable(8).multicastUsable(nullptr), !nvlsOff);
}

// The switches are read by value and fail closed (hostile parameters): spellings of 0
// and values that are not clearly "on" close the gate. Before, only the exact text "0" did, so
// TPCOMM_MULTICAST=off or NCCL_NVLS_ENABLE=00 left multicast allowed.
TEST(MulticastGate, SwitchesFailClosed) {
  for (const char* v : {"0", "00", " 0", "0 ", "off", "false", "no", "-1", "2", "1x", "0x0"}) {
    ScopedEnv mc("TPCOMM_MULTICAST", v);
    EXPECT_TRUE(multicastDisabledByEnv(nullptr)) << "TPCOMM_MULTICAST='" << v << "'";
    EXPECT_FALSE(multicastCapable(8).multicastUsable(nullptr)) << "TPCOMM_MULTICAST='" << v << "'";
    // The reason, whatever NCCL_NVLS_ENABLE is here (scripts/test.sh sets it to 0).
    std::string why;
    EXPECT_TRUE(multicastDisabledBy(nullptr, v, &why)) << "TPCOMM_MULTICAST='" << v << "'";
    EXPECT_NE(why.find("TPCOMM_MULTICAST"), std::string::npos) << why;
  }
  // NCCL_NVLS_ENABLE: NCCL's integer reading (strtoll) of 0, or not a number at all. Only ever
  // set to values meaning 0 here, and put back afterwards (never unset).
  for (const char* v : {"00", " 0", "0x0", "false", "off"}) {
    ScopedEnv mc("TPCOMM_MULTICAST", "1");
    ScopedEnv nvls("NCCL_NVLS_ENABLE", v);
    std::string why;
    EXPECT_TRUE(multicastDisabledByEnv(&why)) << "NCCL_NVLS_ENABLE='" << v << "'";
    EXPECT_TRUE(multicastDisabledBy(v, "1", nullptr)) << "NCCL_NVLS_ENABLE='" << v << "'";
    EXPECT_FALSE(multicastCapable(8).multicastUsable(nullptr)) << "NCCL_NVLS_ENABLE='" << v << "'";
    EXPECT_NE(why.find("NCCL_NVLS_ENABLE"), std::string::npos) << why;
  }
}

TEST(MulticastGate, OpenOnlyForClearOnValues) {
  for (const char* v : {"1", " 1", "01"}) EXPECT_FALSE(multicastDisabledBy(nullptr, v, nullptr)) << v;
  for (const char* v : {"1", "2", "0x1"}) EXPECT_FALSE(multicastDisabledBy(v, nullptr, nullptr)) << v;
  EXPECT_FALSE(multicastDisabledBy("", "", nullptr));  // empty: unset
  EXPECT_FALSE(multicastDisabledBy(nullptr, nullptr, nullptr));
}

TEST(MulticastGate, NeedsMoreThanTwoRanksAndEveryPrecondition) {
  // Each of these is closed for a hardware reason, whatever the environment says.
  EXPECT_FALSE(multicastCapable(1).multicastUsable(nullptr));
  EXPECT_FALSE(multicastCapable(2).multicastUsable(nullptr));
  std::string why;
  EXPECT_FALSE(multicastCapable(2).multicastUsable(&why));
  EXPECT_NE(why.find("more than two"), std::string::npos) << why;

  Topology noSupport = multicastCapable(8);
  noSupport.ranks[5].multicastSupported = false;
  EXPECT_FALSE(noSupport.multicastUsable(nullptr));

  Topology probeSaidNo = multicastCapable(8);
  probeSaidNo.multicastAllowedByEnv = false;
  EXPECT_FALSE(probeSaidNo.multicastUsable(nullptr));

  Topology mesh = multicastCapable(8);
  for (int a = 0; a < 8; ++a)
    for (int b = 0; b < 8; ++b)
      if (a != b) mesh.links[a][b].kind = LinkKind::kNvlink;
  EXPECT_FALSE(mesh.multicastUsable(nullptr));

  Topology twoNodes = multicastCapable(8);
  twoNodes.ranks[7].hostId = 1;
  EXPECT_FALSE(twoNodes.multicastUsable(nullptr));

  Topology host = Topology::host(8, true);
  host.multicastAllowedByEnv = true;
  EXPECT_FALSE(host.multicastUsable(nullptr));
}

}  // namespace
}  // namespace tpcomm
