// Selection with a measured table (tpcomm-doctor --tune's file): the measured order wins among
// the eligible algorithms, the table never adds or removes a candidate (an ineligible algorithm
// is never chosen however fast it was measured), overrides and the deterministic mode still
// decide what is allowed, graphs and uncovered sizes stay modelled; TPCOMM_TUNE=0, a stale file
// and another topology's table leave every choice to the model; a host communicator's INFO
// table says which choices were measured.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "collectives/algo_override.h"
#include "collectives/registry.h"
#include "collectives/selector.h"
#include "collectives/tuning_file.h"
#include "collectives/tuning_load.h"
#include "topology/sysfs_pci.h"
#include "tpcomm/version.h"
#include "unit/test_util.h"

namespace tpcomm {
namespace {

constexpr size_t K = 1024, M = 1024 * 1024;

Topology fixture(const std::string& file) {
  std::ifstream f(std::string(TPCOMM_TEST_FIXTURE_DIR) + "/" + file);
  std::stringstream ss;
  ss << f.rdbuf();
  Topology t;
  EXPECT_EQ(Topology::fromJson(ss.str(), &t), Status::kOk) << file << ": " << lastErrorMessage();
  return t;
}

TuningRow row(int bits, uint64_t bytes, std::vector<std::pair<std::string, double>> times) {
  TuningRow r;
  r.dtypeBits = bits;
  r.bytes = bytes;
  r.timesUs = std::move(times);
  return r;
}

// Measured on a 2-GPU NVLink box: two-shot wins small sizes (the model says Lamport), the table
// also claims algorithms that cannot run there (multicast without a switch, Lamport past its
// scratch) are fastest, and NCCL is fastest at 4 KB.
TuningTable nvlinkTable(const Topology& topo) {
  TuningTable t;
  t.fingerprint = topologyFingerprint(topo);
  t.ranks = topo.nRanks();
  t.rows = {row(16, 4 * K, {{"lamport_p2p", 9.0}, {"twoshot_p2p", 3.0}, {"ring_nccl", 0.5}, {"staged_host", 50.0}}),
            row(16, 64 * K, {{"twoshot_multicast", 0.1}, {"oneshot_p2p", 4.0}, {"lamport_p2p", 6.0}}),
            row(16, 64 * M, {{"lamport_p2p", 1.0}, {"twoshot_p2p", 300.0}, {"ring_nccl", 280.0}})};
  return t;
}

std::vector<std::string> names(const std::vector<Candidate>& c) {
  std::vector<std::string> out;
  for (const Candidate& x : c) out.push_back(x.algo->name());
  return out;
}

AlgoQuery ar(DataType dt, size_t bytes, bool capturing = false) {
  return {CollKind::kAllReduce, dt, ReduceOp::kSum, bytes, capturing};
}

TEST(TunedSelection, MeasuredOrderWinsAmongEligible) {
  const Topology topo = fixture("nvlink2.json");
  const TuningTable table = nvlinkTable(topo);
  auto owned = makeAlgorithms(nullptr);
  const auto list = rawList(owned);
  const AlgoOverride none;

  // The model alone puts Lamport first at 4 KB; the table measured two-shot faster.
  std::vector<Candidate> model = selectAlgorithms(list, topo, ar(DataType::kBF16, 4 * K), none);
  ASSERT_FALSE(model.empty());
  EXPECT_EQ(std::string(model[0].algo->name()), "lamport_p2p");
  EXPECT_FALSE(model[0].measured);
  std::vector<Candidate> tuned = selectAlgorithms(list, topo, ar(DataType::kBF16, 4 * K), none, true, &table);
  ASSERT_GE(tuned.size(), 4u);
  // Measured candidates first, fastest first, with their measured times.
  EXPECT_EQ(names(tuned)[0], "ring_nccl");
  EXPECT_EQ(names(tuned)[1], "twoshot_p2p");
  EXPECT_EQ(names(tuned)[2], "lamport_p2p");
  EXPECT_EQ(names(tuned)[3], "staged_host");
  EXPECT_DOUBLE_EQ(tuned[1].costUs, 3.0);
  for (size_t i = 0; i < tuned.size(); ++i) EXPECT_EQ(tuned[i].measured, i < 4) << names(tuned)[i];
  // f16 is the same class as bf16; a nearby size uses the nearest row.
  EXPECT_EQ(names(selectAlgorithms(list, topo, ar(DataType::kF16, 5 * K), none, true, &table))[0], "ring_nccl");
  // Without NCCL's transport the next measured one runs.
  AlgoOverride noNccl;
  ASSERT_EQ(parseAlgoOverride("^ring_nccl", algorithmNames(), &noNccl), Status::kOk);
  EXPECT_EQ(names(selectAlgorithms(list, topo, ar(DataType::kBF16, 4 * K), noNccl, true, &table))[0], "twoshot_p2p");
}

TEST(TunedSelection, TableNeverAddsOrRemovesACandidate) {
  const Topology topo = fixture("nvlink2.json");
  const TuningTable table = nvlinkTable(topo);
  auto owned = makeAlgorithms(nullptr);
  const auto list = rawList(owned);
  for (size_t bytes : {4 * K, 64 * K, 64 * M})
    for (bool capturing : {false, true}) {
      const AlgoQuery q = ar(DataType::kBF16, bytes, capturing);
      std::vector<std::string> model = names(selectAlgorithms(list, topo, q, AlgoOverride{}));
      std::vector<std::string> tuned = names(selectAlgorithms(list, topo, q, AlgoOverride{}, true, &table));
      EXPECT_EQ(std::set<std::string>(model.begin(), model.end()), std::set<std::string>(tuned.begin(), tuned.end()))
          << bytes << " bytes, capturing " << capturing;
      // Measured fastest but unable to run here: multicast without a switch, Lamport past its scratch.
      for (const std::string& n : tuned) EXPECT_NE(n, "twoshot_multicast") << bytes;
      if (bytes == 64 * M) {
        for (const std::string& n : tuned) EXPECT_NE(n, "lamport_p2p");
        if (!capturing) EXPECT_EQ(tuned[0], "ring_nccl") << "280 us measured beats two-shot's 300";
      }
      if (bytes == 64 * K && !capturing) EXPECT_EQ(tuned[0], "oneshot_p2p");
    }
}

TEST(TunedSelection, GraphsAndUncoveredSizesStayModelled) {
  const Topology topo = fixture("nvlink2.json");
  const TuningTable table = nvlinkTable(topo);
  auto owned = makeAlgorithms(nullptr);
  const auto list = rawList(owned);
  for (const AlgoQuery& q : {ar(DataType::kBF16, 4 * K, true),   // capturing: the table holds eager times
                             ar(DataType::kF32, 4 * K),          // no 32-bit rows
                             ar(DataType::kBF16, 512),           // below the sweep
                             ar(DataType::kBF16, 1024 * M)}) {   // above it
    std::vector<Candidate> model = selectAlgorithms(list, topo, q, AlgoOverride{});
    std::vector<Candidate> tuned = selectAlgorithms(list, topo, q, AlgoOverride{}, true, &table);
    EXPECT_EQ(names(model), names(tuned)) << q.bytes;
    for (const Candidate& c : tuned) EXPECT_FALSE(c.measured) << c.algo->name() << " at " << q.bytes;
  }
  // Reduce-scatter was never measured.
  AlgoQuery rs = ar(DataType::kBF16, 4 * K);
  rs.kind = CollKind::kReduceScatter;
  for (const Candidate& c : selectAlgorithms(list, topo, rs, AlgoOverride{}, true, &table)) EXPECT_FALSE(c.measured);
}

TEST(TunedSelection, OverridesAndDeterministicModeStillDecide) {
  const Topology topo = fixture("nvlink2.json");
  const TuningTable table = nvlinkTable(topo);
  auto owned = makeAlgorithms(nullptr);
  const auto list = rawList(owned);
  // TPCOMM_ALGO forces Lamport first although two-shot and NCCL measured faster.
  AlgoOverride forced;
  ASSERT_EQ(parseAlgoOverride("lamport_p2p", algorithmNames(), &forced), Status::kOk);
  std::vector<Candidate> c = selectAlgorithms(list, topo, ar(DataType::kBF16, 4 * K), forced, true, &table);
  ASSERT_FALSE(c.empty());
  EXPECT_EQ(std::string(c[0].algo->name()), "lamport_p2p");
  EXPECT_TRUE(c[0].forced);
  EXPECT_EQ(std::string(c[1].algo->name()), "ring_nccl");  // the rest by measured time
  // Deterministic mode: NCCL, measured fastest, is not allowed; the fastest allowed one runs.
  AlgoOverride det;
  det.deterministicOnly = true;
  c = selectAlgorithms(list, topo, ar(DataType::kBF16, 4 * K), det, true, &table);
  ASSERT_FALSE(c.empty());
  EXPECT_EQ(std::string(c[0].algo->name()), "twoshot_p2p");
  for (const Candidate& x : c) EXPECT_TRUE(x.algo->deterministic()) << x.algo->name();
  c = selectAlgorithms(list, topo, ar(DataType::kBF16, 64 * M), det, true, &table);
  ASSERT_FALSE(c.empty());
  EXPECT_EQ(std::string(c[0].algo->name()), "twoshot_p2p");
  for (const Candidate& x : c) EXPECT_NE(std::string(x.algo->name()), "ring_nccl");
}

// A cache directory of its own, with a tuning file written as tpcomm-doctor --tune would.
class TuneDir {
 public:
  TuneDir() {
    char tmpl[] = "/tmp/tpcomm-tune-sel-XXXXXX";
    dir_ = mkdtemp(tmpl);
    env_ = std::make_unique<test::ScopedEnv>("XDG_CACHE_HOME", dir_.c_str());
  }
  ~TuneDir() {
    env_.reset();
    std::system(("rm -rf '" + dir_ + "'").c_str());
  }
  std::string path() const { return tuningFilePath(dir_ + "/tpcomm"); }
  void write(const std::vector<TuningTable>& tables, const std::string& version = TPCOMM_VERSION_STRING,
             const std::string& driver = SysfsReader("/").driverVersion()) const {
    TuningFile f;
    f.tpcommVersion = version;
    f.driver = driver;
    f.tables = tables;
    ASSERT_EQ(storeTuningFile(path(), f), Status::kOk) << lastErrorMessage();
  }

 private:
  std::string dir_;
  std::unique_ptr<test::ScopedEnv> env_;
};

TuningTable hostTable(int n) {
  TuningTable t;
  t.fingerprint = topologyFingerprint(Topology::host(n, true));
  t.ranks = n;
  t.hostRanks = true;
  t.rows = {row(32, 1 * K, {{"staged_host", 11.0}}), row(32, 4 * K, {{"staged_host", 12.0}})};
  return t;
}

TEST(TunedSelection, ReadTuningFollowsTheKeysAndTpcommTune) {
  TuneDir dir;
  const Topology host2 = Topology::host(2, true);
  TuningState s = readTuning(host2);
  EXPECT_EQ(s.table, nullptr);
  EXPECT_EQ(s.path, dir.path());
  EXPECT_NE(s.state.find("none yet"), std::string::npos) << s.state;
  EXPECT_TRUE(s.warning.empty());

  dir.write({hostTable(2)});
  s = readTuning(host2);
  ASSERT_NE(s.table, nullptr) << s.state;
  EXPECT_EQ(s.table->rows.size(), 2u);
  EXPECT_NE(s.state.find("measured"), std::string::npos) << s.state;
  {
    test::ScopedEnv off("TPCOMM_TUNE", "0");
    s = readTuning(host2);
    EXPECT_EQ(s.table, nullptr);
    EXPECT_NE(s.state.find("TPCOMM_TUNE=0"), std::string::npos) << s.state;
    EXPECT_TRUE(s.warning.empty());
  }
  // Another topology's table only: stale for this one.
  s = readTuning(Topology::host(3, true));
  EXPECT_EQ(s.table, nullptr);
  EXPECT_NE(s.warning.find("no table for this topology"), std::string::npos) << s.warning;
  // Another tpcomm or driver measured it.
  dir.write({hostTable(2)}, "0.0.0-other");
  s = readTuning(host2);
  EXPECT_EQ(s.table, nullptr);
  EXPECT_NE(s.warning.find("stale: measured by tpcomm 0.0.0-other"), std::string::npos) << s.warning;
  dir.write({hostTable(2)}, TPCOMM_VERSION_STRING, "123.45");
  s = readTuning(host2);
  EXPECT_EQ(s.table, nullptr);
  EXPECT_NE(s.warning.find("stale: measured with NVIDIA driver '123.45'"), std::string::npos) << s.warning;
}

// Creates 2 host ranks with TPCOMM_DEBUG=INFO and returns what create logged.
std::string createAndLog() {
  test::ScopedEnv info("TPCOMM_DEBUG", "INFO");
  testing::internal::CaptureStderr();
  test::runHostRanks(2, Config{}, [](int, Communicator&) {});
  return testing::internal::GetCapturedStderr();
}

size_t countOf(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(TunedSelection, HostCommunicatorInfoTableSaysMeasuredOrWhyNot) {
  TuneDir dir;
  dir.write({hostTable(2)});
  std::string log = createAndLog();
  EXPECT_NE(log.find("tuning file: " + dir.path() + ": measured: 2 sizes for 2 ranks"), std::string::npos) << log;
  // 1K and 4K are covered by rows (and 2x beyond): measured; 1M is not: modelled.
  EXPECT_NE(log.find("1K  staged_host"), std::string::npos) << log;
  EXPECT_EQ(countOf(log, " measured"), 2u + 1u) << log;  // two bucket lines + the file line's "measured:"
  EXPECT_NE(log.find("modelled"), std::string::npos) << log;
  EXPECT_EQ(countOf(log, "WARN"), 0u) << log;

  // A corrupt file: one WARN naming the file and why, every choice modelled.
  std::ofstream(dir.path(), std::ios::trunc) << "{\"format\": \"tpcomm-tune\", \"tables\": [";
  log = createAndLog();
  EXPECT_EQ(countOf(log, "WARN"), 1u) << log;
  EXPECT_NE(log.find("tuning file " + dir.path() + " ignored: not valid JSON"), std::string::npos) << log;
  EXPECT_EQ(countOf(log, " measured"), 0u) << log;

  // TPCOMM_TUNE=0: no warning, and the table says so.
  {
    test::ScopedEnv off("TPCOMM_TUNE", "0");
    log = createAndLog();
  }
  EXPECT_EQ(countOf(log, "WARN"), 0u) << log;
  EXPECT_NE(log.find("off (TPCOMM_TUNE=0)"), std::string::npos) << log;
}

}  // namespace
}  // namespace tpcomm
