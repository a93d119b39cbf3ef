// Selector decisions (collectives/selector.h) on fixture topologies, with the selection-only
// registry list (makeAlgorithms(nullptr)). A row states only what must hold however many
// algorithms the registry gains: which algorithm must (not) be a candidate, which must come
// first, which must precede which. On top of the rows, invariants checked on every decision:
//   - every candidate supports the call and is listed once; non-forced candidates are in cost
//     order; the selection is deterministic;
//   - no *_p2p candidate unless every pair has verified P2P;
//   - no *_multicast candidate unless Topology::multicastUsable();
//   - no candidate other than staged_host for host ranks, and staged_host never when capturing
//     on GPUs (its sequence numbers are host-side).
// To test a new decision, add a row to kRows.
#include "collectives/selector.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "collectives/cost_model.h"
#include "collectives/algo_override.h"
#include "collectives/registry.h"
#include "topology/topology.h"
#include "unit/test_util.h"

namespace tpcomm {
namespace {

Topology fixture(const std::string& file) {
  std::ifstream f(std::string(TPCOMM_TEST_FIXTURE_DIR) + "/" + file);
  std::stringstream ss;
  ss << f.rdbuf();
  Topology t;
  Status s = Topology::fromJson(ss.str(), &t);
  EXPECT_EQ(s, Status::kOk) << file << ": " << lastErrorMessage();
  return t;
}

struct Row {
  const char* name;
  std::function<Topology()> topo;
  CollKind kind;
  size_t bytes;
  bool capturing;
  const char* algo;                                         // TPCOMM_ALGO override text
  const char* first;                                        // must be candidate 0 (nullptr: any)
  std::vector<const char*> present;                         // must be candidates
  std::vector<const char*> absent;                          // must not be candidates
  std::vector<std::pair<const char*, const char*>> before;  // a precedes b (both present)
  bool firstForced;                                         // candidate 0 was forced by the override
};

constexpr size_t K = 1024, M = 1024 * 1024;
constexpr CollKind AR = CollKind::kAllReduce, RS = CollKind::kReduceScatter, AG = CollKind::kAllGather;

std::function<Topology()> file(const char* f) {
  return [f] { return fixture(f); };
}
std::function<Topology()> hostRanks(int n, bool sameProcess) {
  return [=] { return Topology::host(n, sameProcess); };
}
std::function<Topology()> gpus(int n, LinkKind k, int lanes = 0) {
  return [=] { return Topology::uniform(n, k, lanes); };
}

const std::vector<Row>& rows() {
  // clang-format off
  static const std::vector<Row> kRows = {
      // Host ranks: only the host path exists, whatever the size or collective.
      {"host 2 threads AR 1K", hostRanks(2, true), AR, 1 * K, false, "", "staged_host", {}, {"ring_nccl"}, {}, false},
      {"host 8 threads AR 64M", hostRanks(8, true), AR, 64 * M, false, "", "staged_host", {}, {"ring_nccl"}, {}, false},
      {"host 4 procs RS 1M", hostRanks(4, false), RS, 1 * M, false, "", "staged_host", {}, {"ring_nccl"}, {}, false},
      {"host 4 procs AG 4", hostRanks(4, false), AG, 4, false, "", "staged_host", {}, {"ring_nccl"}, {}, false},
      {"host 2 excluded staged_host", hostRanks(2, true), AR, 1 * K, false, "^staged_host", nullptr, {}, {"staged_host", "ring_nccl"}, {}, false},
      {"host 2 forced ring_nccl", hostRanks(2, true), AR, 1 * K, false, "ring_nccl", "staged_host", {}, {"ring_nccl"}, {}, false},

      // 2x PCIe without P2P (the field report's dual RTX 5090): host staging and NCCL.
      {"pcie no-p2p AR 8K", file("pcie2_no_p2p.json"), AR, 8 * K, false, "", nullptr, {"staged_host", "ring_nccl"}, {}, {}, false},
      {"pcie no-p2p AR 64M", file("pcie2_no_p2p.json"), AR, 64 * M, false, "", nullptr, {"staged_host", "ring_nccl"}, {}, {}, false},
      {"pcie no-p2p AR capturing", file("pcie2_no_p2p.json"), AR, 8 * K, true, "", nullptr, {"ring_nccl"}, {"staged_host"}, {}, false},
      {"pcie no-p2p RS", file("pcie2_no_p2p.json"), RS, 1 * M, false, "", nullptr, {"ring_nccl"}, {"staged_host"}, {}, false},
      {"pcie no-p2p forced staged_host", file("pcie2_no_p2p.json"), AR, 64 * M, false, "staged_host", "staged_host", {"ring_nccl"}, {}, {}, true},
      {"pcie no-p2p forced ring_nccl", file("pcie2_no_p2p.json"), AR, 64 * M, false, "ring_nccl", "ring_nccl", {"staged_host"}, {}, {}, true},

      // 2x PCIe with P2P.
      {"pcie p2p AR 8K", file("pcie2_p2p.json"), AR, 8 * K, false, "", nullptr, {"staged_host", "ring_nccl"}, {}, {}, false},
      {"pcie p2p AR capturing", file("pcie2_p2p.json"), AR, 8 * K, true, "", nullptr, {"ring_nccl"}, {"staged_host"}, {}, false},

      // 2x NVLink: at large sizes NCCL over NVLink beats staging through host memory.
      {"nvlink2 AR 64M", file("nvlink2.json"), AR, 64 * M, false, "", nullptr, {"ring_nccl", "staged_host"}, {}, {{"ring_nccl", "staged_host"}}, false},
      {"nvlink2 AR 1K capturing", file("nvlink2.json"), AR, 1 * K, true, "", nullptr, {"ring_nccl"}, {"staged_host"}, {}, false},
      {"nvlink2 excluded ring_nccl", file("nvlink2.json"), AR, 64 * M, false, "^ring_nccl", nullptr, {"staged_host"}, {"ring_nccl"}, {}, false},
      {"nvlink2 range forces small", file("nvlink2.json"), AR, 4 * K, false, "0-64K:staged_host", "staged_host", {"ring_nccl"}, {}, {}, true},
      {"nvlink2 range leaves large", file("nvlink2.json"), AR, 64 * M, false, "0-64K:staged_host", nullptr, {"ring_nccl", "staged_host"}, {}, {{"ring_nccl", "staged_host"}}, false},
      {"nvlink2 forced list order", file("nvlink2.json"), AR, 64 * M, false, "staged_host|ring_nccl", "staged_host", {}, {}, {{"staged_host", "ring_nccl"}}, true},

      // Reduce-scatter / all-gather on 2x NVLink: ll_p2p (no barrier) up to TPCOMM_LL_MAX_BYTES
      // (512 KB), eager and in graphs; twoshot_p2p above; ll_p2p never for all-reduce.
      {"nvlink2 RS 8K: ll_p2p", file("nvlink2.json"), RS, 8 * K, false, "", "ll_p2p", {"twoshot_p2p", "ring_nccl"}, {}, {{"ll_p2p", "twoshot_p2p"}}, false},
      {"nvlink2 AG 64K capturing: ll_p2p", file("nvlink2.json"), AG, 64 * K, true, "", "ll_p2p", {"twoshot_p2p"}, {"staged_host"}, {{"ll_p2p", "ring_nccl"}}, false},
      {"nvlink2 AG 512K: ll_p2p's limit", file("nvlink2.json"), AG, 512 * K, false, "", "ll_p2p", {"twoshot_p2p"}, {}, {}, false},
      {"nvlink2 RS 1M: past ll_p2p's limit", file("nvlink2.json"), RS, 1 * M, false, "", nullptr, {"twoshot_p2p"}, {"ll_p2p"}, {}, false},
      {"nvlink2 AR 8K: no ll_p2p", file("nvlink2.json"), AR, 8 * K, false, "", "lamport_p2p", {}, {"ll_p2p"}, {}, false},

      // 8x NVLink mesh.
      {"nvlink8 mesh AR 64M", file("nvlink8_mesh.json"), AR, 64 * M, false, "", nullptr, {"ring_nccl", "staged_host"}, {}, {{"ring_nccl", "staged_host"}}, false},
      {"nvlink8 mesh AG 1M", file("nvlink8_mesh.json"), AG, 1 * M, false, "", nullptr, {"ring_nccl"}, {"staged_host"}, {}, false},

      // 8x NVSwitch with and without multicast (the invariants check *_multicast gating).
      {"nvswitch8 mc AR 64M", file("nvswitch8_multicast.json"), AR, 64 * M, false, "", nullptr, {"ring_nccl", "staged_host"}, {}, {{"ring_nccl", "staged_host"}}, false},
      {"nvswitch8 mc AR 8K capturing", file("nvswitch8_multicast.json"), AR, 8 * K, true, "", nullptr, {"ring_nccl"}, {"staged_host"}, {}, false},
      {"nvswitch8 no-mc AR 64M", file("nvswitch8_no_multicast.json"), AR, 64 * M, false, "", nullptr, {"ring_nccl", "staged_host"}, {}, {{"ring_nccl", "staged_host"}}, false},
      {"nvswitch8 no-mc RS 1M", file("nvswitch8_no_multicast.json"), RS, 1 * M, false, "", nullptr, {"ring_nccl"}, {"staged_host"}, {}, false},

      // Topologies no path supports.
      {"two nodes, host ranks", [] { Topology t = Topology::host(2, false); t.ranks[1].hostId = 1; return t; }, AR, 1 * K,
       false, "", nullptr, {}, {"staged_host"}, {}, false},
      {"mixed host and GPU ranks", [] { Topology t = Topology::uniform(2, LinkKind::kPcie); t.ranks[1].cudaDevice = -1; return t; },
       AR, 1 * K, false, "", nullptr, {}, {"staged_host", "ring_nccl"}, {}, false},
  };
  // clang-format on
  return kRows;
}

bool endsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

int indexOf(const std::vector<Candidate>& c, const std::string& name) {
  for (size_t i = 0; i < c.size(); ++i)
    if (name == c[i].algo->name()) return static_cast<int>(i);
  return -1;
}

std::string describe(const std::vector<Candidate>& c) {
  std::string s = "[";
  for (const Candidate& x : c) s += std::string(s.size() > 1 ? ", " : "") + x.algo->name() + (x.forced ? "*" : "");
  return s + "]";
}

// The invariants every decision must satisfy, whatever the registry holds.
void checkInvariants(const std::vector<Candidate>& c, const Topology& topo, const AlgoQuery& q) {
  std::set<std::string> seen;
  for (size_t i = 0; i < c.size(); ++i) {
    std::string name = c[i].algo->name();
    EXPECT_TRUE(seen.insert(name).second) << name << " listed twice";
    std::string why;
    EXPECT_TRUE(c[i].algo->supports(topo, q, &why)) << name << " is a candidate but does not support the call: " << why;
    if (endsWith(name, "_p2p")) EXPECT_TRUE(topo.allPairsP2p()) << name << " chosen without verified P2P on every pair";
    if (endsWith(name, "_multicast"))
      EXPECT_TRUE(topo.multicastUsable(nullptr)) << name << " chosen with the multicast gate closed";
    if (topo.allHost())
      EXPECT_TRUE(name == "staged_host" || (name == "copy_local" && topo.nRanks() == 1))
          << name << ": host ranks have only the host path (and a copy for one rank)";
    if (name == "copy_local") EXPECT_EQ(topo.nRanks(), 1) << "copy_local over several ranks";
    if (topo.allGpu() && q.capturing) EXPECT_NE(name, "staged_host") << "staged_host is not graph-capturable";
  }
  // Forced candidates first, then the rest in cost order.
  bool unforced = false;
  for (size_t i = 0; i < c.size(); ++i) {
    if (!c[i].forced)
      unforced = true;
    else
      EXPECT_FALSE(unforced) << "forced candidate " << c[i].algo->name() << " after an unforced one";
  }
  for (size_t i = 1; i < c.size(); ++i)
    if (!c[i - 1].forced && !c[i].forced)
      EXPECT_LE(c[i - 1].costUs, c[i].costUs) << c[i - 1].algo->name() << " before the cheaper " << c[i].algo->name();
  for (const Candidate& x : c) EXPECT_GE(x.costUs, 0.0) << x.algo->name();
}

TEST(Selector, Decisions) {
  auto algos = makeAlgorithms(nullptr);
  std::vector<Algorithm*> list = rawList(algos);
  std::vector<std::string> known = algorithmNames();
  ASSERT_EQ(list.size(), known.size());
  for (const Row& row : rows()) {
    SCOPED_TRACE(std::string(row.name) + (row.algo[0] ? std::string(" TPCOMM_ALGO=") + row.algo : ""));
    Topology topo = row.topo();
    ASSERT_EQ(topo.validate(), Status::kOk) << lastErrorMessage();
    AlgoOverride ovr;
    ASSERT_EQ(parseAlgoOverride(row.algo, known, &ovr), Status::kOk) << lastErrorMessage();
    AlgoQuery q{row.kind, DataType::kBF16, ReduceOp::kSum, row.bytes, row.capturing};
    std::vector<Candidate> c = selectAlgorithms(list, topo, q, ovr);
    SCOPED_TRACE("candidates " + describe(c));
    checkInvariants(c, topo, q);
    if (row.first) {
      ASSERT_FALSE(c.empty());
      EXPECT_STREQ(c[0].algo->name(), row.first);
      EXPECT_EQ(c[0].forced, row.firstForced);
    } else if (!c.empty()) {
      EXPECT_EQ(c[0].forced, row.firstForced);
    }
    for (const char* p : row.present) EXPECT_GE(indexOf(c, p), 0) << p << " missing";
    for (const char* a : row.absent) EXPECT_EQ(indexOf(c, a), -1) << a << " must not be a candidate";
    for (const auto& ab : row.before) {
      int a = indexOf(c, ab.first), b = indexOf(c, ab.second);
      ASSERT_GE(a, 0) << ab.first;
      ASSERT_GE(b, 0) << ab.second;
      EXPECT_LT(a, b) << ab.first << " must precede " << ab.second;
    }
    // Pure: the same question gives the same answer.
    std::vector<Candidate> again = selectAlgorithms(list, topo, q, ovr);
    EXPECT_EQ(describe(again), describe(c));
  }
}

TEST(Selector, InvariantsOverEverySizeDtypeAndFixture) {
  auto algos = makeAlgorithms(nullptr);
  std::vector<Algorithm*> list = rawList(algos);
  const char* files[] = {"pcie2_no_p2p.json", "pcie2_p2p.json",           "nvlink2.json",
                         "nvlink8_mesh.json", "nvswitch8_multicast.json", "nvswitch8_no_multicast.json"};
  std::vector<Topology> topos;
  for (const char* f : files) topos.push_back(fixture(f));
  for (int n : {1, 2, 3, 8}) topos.push_back(Topology::host(n, n % 2 == 0));
  for (const Topology& topo : topos)
    for (CollKind kind : {AR, RS, AG})
      for (DataType dt : {DataType::kF32, DataType::kF16, DataType::kBF16})
        for (bool capturing : {false, true})
          for (size_t bytes = 1; bytes <= (1ull << 32); bytes *= 8) {
            AlgoQuery q{kind, dt, ReduceOp::kSum, bytes, capturing};
            std::vector<Candidate> c = selectAlgorithms(list, topo, q, AlgoOverride{});
            SCOPED_TRACE(std::to_string(topo.nRanks()) + " ranks weakest " + linkKindName(topo.weakestLink()) + " " +
                         collKindName(kind) + " " + std::to_string(bytes) + " bytes " + describe(c));
            checkInvariants(c, topo, q);
            // Something must always be able to run an eager all-reduce on one node.
            if (kind == AR && !(topo.allGpu() && capturing)) EXPECT_FALSE(c.empty());
          }
}

// The cost model against what was measured on 2x H200 (NVSwitch, NV18), bf16, graph and eager
// (bench/results/h200x2.md): Lamport through 2 MB, two-shot from 4 MB to
// 512 MB (16 MB included: NCCL took 75.5 us there, two-shot 63.9), NCCL at 1 GB (330 vs 322 GB/s).
// When a new measurement moves a crossover, change the model and this table together.
TEST(Selector, FirstChoicesMatchTheMeasured2xH200Crossovers) {
  auto algos = makeAlgorithms(nullptr);
  std::vector<Algorithm*> list = rawList(algos);
  Topology topo = Topology::uniform(2, LinkKind::kNvswitch, 18);
  const std::pair<size_t, const char*> kMeasured[] = {
      {8, "lamport_p2p"},         {128 * K, "lamport_p2p"},   {512 * K, "lamport_p2p"},  {2 * M, "lamport_p2p"},
      {4 * M, "twoshot_p2p"},     {16 * M, "twoshot_p2p"},    {32 * M, "twoshot_p2p"},   {128 * M, "twoshot_p2p"},
      {512 * M, "twoshot_p2p"},   {1024 * M, "ring_nccl"}};
  for (bool capturing : {true, false})
    for (const auto& [bytes, want] : kMeasured) {
      AlgoQuery q{AR, DataType::kBF16, ReduceOp::kSum, bytes, capturing};
      std::vector<Candidate> c = selectAlgorithms(list, topo, q, AlgoOverride{});
      ASSERT_FALSE(c.empty());
      EXPECT_STREQ(c[0].algo->name(), want) << bytes << " bytes, " << (capturing ? "graph" : "eager") << ": "
                                            << describe(c);
    }
}

TEST(Selector, MulticastCandidatesStayOffUnderTheSafetySwitches) {
  // Whatever multicast algorithms the registry gains, none may be chosen on a multicast-capable
  // 8x NVSwitch fixture while NCCL_NVLS_ENABLE=0 or TPCOMM_MULTICAST=0.
  auto algos = makeAlgorithms(nullptr);
  std::vector<Algorithm*> list = rawList(algos);
  Topology topo = fixture("nvswitch8_multicast.json");
  ASSERT_TRUE(topo.multicastAllowedByEnv);
  for (const char* var : {"NCCL_NVLS_ENABLE", "TPCOMM_MULTICAST"}) {
    test::ScopedEnv off(var, "0");
    ASSERT_FALSE(topo.multicastUsable(nullptr)) << var;
    for (size_t bytes = 1024; bytes <= (1ull << 30); bytes *= 4)
      for (bool capturing : {false, true}) {
        AlgoQuery q{AR, DataType::kBF16, ReduceOp::kSum, bytes, capturing};
        for (const Candidate& c : selectAlgorithms(list, topo, q, AlgoOverride{}))
          EXPECT_FALSE(endsWith(c.algo->name(), "_multicast"))
              << var << "=0 but " << c.algo->name() << " chosen at " << bytes;
      }
  }
}

TEST(Selector, RegistryListsEveryAlgorithmOnceAndSelectionOnlyListsCannotRun) {
  std::vector<std::string> names = algorithmNames();
  ASSERT_FALSE(names.empty());
  std::set<std::string> unique(names.begin(), names.end());
  EXPECT_EQ(unique.size(), names.size());
  EXPECT_TRUE(unique.count("staged_host"));
  for (const std::string& n : names) {
    EXPECT_NE(n.find('_'), std::string::npos) << n << ": names are <schedule>_<transport>";
  }
  auto algos = makeAlgorithms(nullptr);
  for (const auto& a : algos) {
    EXPECT_TRUE(a->available()) << a->name();
    CollArgs args;
    EXPECT_EQ(a->run(args), Status::kInternal) << a->name() << ": a selection-only algorithm must not run";
  }
}

TEST(Selector, DescribeSelectionHasOneLinePerBucket) {
  auto algos = makeAlgorithms(nullptr);
  std::string table =
      describeSelection(rawList(algos), fixture("nvlink2.json"), AlgoOverride{}, DataType::kBF16, false);
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 11);  // 1K, 4K, ..., 1G
  EXPECT_NE(table.find("1K"), std::string::npos) << table;
  EXPECT_NE(table.find("1G"), std::string::npos) << table;
  AlgoOverride ovr;
  ASSERT_EQ(parseAlgoOverride("staged_host", algorithmNames(), &ovr), Status::kOk);
  table = describeSelection(rawList(algos), fixture("nvlink2.json"), ovr, DataType::kBF16, false);
  EXPECT_NE(table.find("(TPCOMM_ALGO)"), std::string::npos) << table;
}

// The communicator's cache entry: both modes' lists, and whether they start alike (then a GPU
// rank runs the first candidate before asking the stream whether it is capturing).
TEST(Selector, ShapeSelectionHoldsBothModes) {
  auto algos = makeAlgorithms(nullptr);
  std::vector<Algorithm*> list = rawList(algos);
  Topology sw = Topology::uniform(2, LinkKind::kNvswitch, 18, false);
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 2; ++b) sw.links[a][b].p2pVerified = a != b;
  ASSERT_TRUE(sw.allPairsP2p());
  std::vector<Topology> topos = {sw, fixture("pcie2_no_p2p.json"), fixture("nvlink2.json"),
                                 fixture("nvswitch8_multicast.json"), Topology::host(2, true)};
  AlgoOverride forced;
  ASSERT_EQ(parseAlgoOverride("0-64K:staged_host", algorithmNames(), &forced), Status::kOk);
  const AlgoOverride none;
  for (const Topology& topo : topos)
    for (const AlgoOverride* ovr : std::vector<const AlgoOverride*>{&forced, &none})
      for (size_t bytes = 16; bytes <= (1ull << 30); bytes *= 4) {
        const AlgoOverride& o = *ovr;
        AlgoQuery q{AR, DataType::kBF16, ReduceOp::kSum, bytes, true};  // capturing is ignored
        ShapeSelection s = selectForShape(list, topo, q, o);
        q.capturing = false;
        const std::vector<Candidate> eager = selectAlgorithms(list, topo, q, o);
        q.capturing = true;
        const std::vector<Candidate> capture = selectAlgorithms(list, topo, q, o);
        SCOPED_TRACE(std::to_string(bytes) + " bytes, eager " + describe(eager) + ", capture " + describe(capture));
        EXPECT_EQ(describe(s.eager), describe(eager));
        EXPECT_EQ(describe(s.capture), describe(capture));
        EXPECT_EQ(&s.forMode(false), &s.eager);
        EXPECT_EQ(&s.forMode(true), &s.capture);
        EXPECT_EQ(s.sameFirst, !eager.empty() && !capture.empty() && eager[0].algo == capture[0].algo);
      }
  // The case the deferred capture query exists for: small all-reduces on P2P GPUs start with the
  // same P2P algorithm in both modes.
  for (size_t bytes = 16; bytes <= 64 * K; bytes *= 4) {
    ShapeSelection s =
        selectForShape(list, sw, AlgoQuery{AR, DataType::kBF16, ReduceOp::kSum, bytes, false}, AlgoOverride{});
    ASSERT_TRUE(s.sameFirst) << bytes;
    EXPECT_TRUE(s.eager[0].algo->launchesOnly()) << bytes << ": " << s.eager[0].algo->name();
  }
}

// The deterministic mode keeps only the algorithms of the determinism contract: never NCCL's
// ring or the switch's multicast reduction, at any size, in either mode.
TEST(Selector, DeterministicModeKeepsOnlyContractAlgorithms) {
  auto algos = makeAlgorithms(nullptr);
  AlgoOverride ovr;
  ovr.deterministicOnly = true;
  ovr.compression = Compression::kFp8;  // compressed algorithms are outside the contract
  for (const char* file : {"nvlink2.json", "pcie2_no_p2p.json", "nvswitch8_multicast.json"}) {
    const Topology topo = fixture(file);
    for (size_t bytes = 8; bytes <= (size_t{1} << 30); bytes *= 8)
      for (bool capturing : {false, true}) {
        const AlgoQuery q{CollKind::kAllReduce, DataType::kBF16, ReduceOp::kSum, bytes, capturing};
        for (const Candidate& c : selectAlgorithms(rawList(algos), topo, q, ovr))
          EXPECT_TRUE(c.algo->deterministic()) << file << " " << bytes << ": " << c.algo->name();
      }
  }
  for (const auto& a : algos) {
    const std::string n = a->name();
    EXPECT_EQ(a->deterministic(),
              n != "ring_nccl" && n != "twoshot_multicast" && a->compression() == Compression::kNone)
        << n;
  }
}

// Only the P2P kernels' run() is a plain launch whose capture query may be deferred.
TEST(Selector, LaunchesOnlyNamesTheP2pFamily) {
  auto algos = makeAlgorithms(nullptr);
  for (const auto& a : algos) {
    const std::string n = a->name();
    EXPECT_EQ(a->launchesOnly(), endsWith(n.substr(0, n.find('+')), "_p2p")) << n;  // twoshot_p2p+fp8 too
  }
}

// Compressed algorithms (docs/compression.md) are candidates only when the communicator's
// compression names their format, only for sums, and cost the bytes on the wire plus the
// quantize passes: on PCIe P2P cheaper than plain two-shot for 8 MB of bf16, dearer at 64 KB; on
// NVLink fp8 never pays; on host ranks never first by cost.
// The names of the candidates for a bf16 all-reduce of `bytes`, best first.
std::vector<std::string> candidateNames(const std::vector<std::unique_ptr<Algorithm>>& algos, const Topology& t,
                                        const AlgoOverride& o, ReduceOp op, size_t bytes, bool capturing = false) {
  std::vector<std::string> v;
  for (const Candidate& c :
       selectAlgorithms(rawList(algos), t, {CollKind::kAllReduce, DataType::kBF16, op, bytes, capturing}, o))
    v.push_back(c.algo->name());
  return v;
}
bool has(const std::vector<std::string>& v, const char* n) { return std::find(v.begin(), v.end(), n) != v.end(); }

TEST(Selector, CompressionIsOptInAndCostsWireBytes) {
  auto algos = makeAlgorithms(nullptr);
  const Topology nv = fixture("nvlink2.json");
  auto names = [&](const Topology& t, const AlgoOverride& o, ReduceOp op, size_t bytes) {
    return candidateNames(algos, t, o, op, bytes);
  };
  AlgoOverride off, fp8, int8;
  fp8.compression = Compression::kFp8;
  int8.compression = Compression::kInt8;
  for (size_t bytes : {size_t{1} << 16, size_t{1} << 30}) {
    for (const std::string& n : names(nv, off, ReduceOp::kSum, bytes)) EXPECT_EQ(n.find('+'), std::string::npos) << n;
    EXPECT_TRUE(has(names(nv, fp8, ReduceOp::kSum, bytes), "twoshot_p2p+fp8"));
    EXPECT_FALSE(has(names(nv, fp8, ReduceOp::kSum, bytes), "twoshot_p2p+int8"));
    EXPECT_TRUE(has(names(nv, int8, ReduceOp::kSum, bytes), "twoshot_p2p+int8"));
    EXPECT_FALSE(has(names(nv, fp8, ReduceOp::kMax, bytes), "twoshot_p2p+fp8"));
  }
  const AlgoQuery big{CollKind::kAllReduce, DataType::kBF16, ReduceOp::kSum, size_t{1} << 30, false};
  const AlgoQuery small{CollKind::kAllReduce, DataType::kBF16, ReduceOp::kSum, size_t{1} << 16, false};
  // NVLink (2x H200 rows) moves bytes nearly as fast as the quantize passes run (fp8 595 GB/s,
  // int8 730, measured alone on one H200): fp8 never pays there; int8 only at the largest sizes.
  EXPECT_GT(modelCostUs("twoshot_p2p+fp8", nv, big), modelCostUs("twoshot_p2p", nv, big));
  EXPECT_LT(modelCostUs("twoshot_p2p+int8", nv, big), modelCostUs("twoshot_p2p", nv, big));
  EXPECT_GT(modelCostUs("twoshot_p2p+fp8", nv, small), modelCostUs("twoshot_p2p", nv, small));
  EXPECT_GT(modelCostUs("twoshot_p2p+int8", nv, small), modelCostUs("twoshot_p2p", nv, small));
  // PCIe P2P (consumer GPUs): the halved bytes pay for both formats from a few MB.
  const Topology pcie = fixture("pcie2_p2p.json");
  const AlgoQuery mid{CollKind::kAllReduce, DataType::kBF16, ReduceOp::kSum, size_t{8} << 20, false};
  EXPECT_LT(modelCostUs("twoshot_p2p+fp8", pcie, mid), modelCostUs("twoshot_p2p", pcie, mid));
  EXPECT_LT(modelCostUs("twoshot_p2p+int8", pcie, mid), modelCostUs("twoshot_p2p", pcie, mid));
  EXPECT_GT(modelCostUs("twoshot_p2p+fp8", pcie, small), modelCostUs("twoshot_p2p", pcie, small));
  const Topology host = Topology::host(4, true);
  for (size_t bytes : {size_t{1} << 10, size_t{1} << 20, size_t{1} << 30})
    EXPECT_EQ(names(host, fp8, ReduceOp::kSum, bytes).front(), "staged_host") << bytes;
}

// GPU ranks without P2P: staged_host+fp8/int8 (staged_host_compressed.cu) is a candidate for
// eager sums when asked, never under capture (staged_host is not capturable) nor for max, and
// by cost first for large messages (half the bytes through host memory), dearer than plain
// staged_host for small ones.
TEST(Selector, StagedHostCompressedOnGpuRanksWithoutP2p) {
  auto algos = makeAlgorithms(nullptr);
  const Topology pcie = Topology::uniform(2, LinkKind::kPcie);
  auto names = [&](const AlgoOverride& o, ReduceOp op, size_t bytes, bool capturing) {
    return candidateNames(algos, pcie, o, op, bytes, capturing);
  };
  AlgoOverride off, fp8, int8;
  fp8.compression = Compression::kFp8;
  int8.compression = Compression::kInt8;
  const size_t big = size_t{1} << 30, small = size_t{1} << 10;
  EXPECT_FALSE(has(names(off, ReduceOp::kSum, big, false), "staged_host+fp8"));
  EXPECT_TRUE(has(names(fp8, ReduceOp::kSum, small, false), "staged_host+fp8"));
  EXPECT_FALSE(has(names(fp8, ReduceOp::kSum, small, false), "staged_host+int8"));
  EXPECT_TRUE(has(names(int8, ReduceOp::kSum, small, false), "staged_host+int8"));
  EXPECT_FALSE(has(names(fp8, ReduceOp::kMax, big, false), "staged_host+fp8"));
  EXPECT_FALSE(has(names(fp8, ReduceOp::kSum, big, true), "staged_host+fp8"));
  EXPECT_EQ(names(fp8, ReduceOp::kSum, big, false).front(), "staged_host+fp8");
  const AlgoQuery q{CollKind::kAllReduce, DataType::kBF16, ReduceOp::kSum, small, false};
  EXPECT_GT(modelCostUs("staged_host+fp8", pcie, q), modelCostUs("staged_host", pcie, q));
}

// The cost table (collectives/cost_model.cc) has a row for every algorithm of the registry, and
// none for a name the registry does not know (a typo there would silently never be used).
TEST(CostModel, EveryRegistryAlgorithmIsModelled) {
  const std::vector<std::string> modelled = modelledAlgorithms(), names = algorithmNames();
  for (const std::string& n : names)
    EXPECT_NE(std::find(modelled.begin(), modelled.end(), n), modelled.end()) << n << " has no cost row";
  for (const std::string& m : modelled)
    EXPECT_NE(std::find(names.begin(), names.end(), m), names.end()) << m << " is not in the registry";
  Topology t;
  EXPECT_EQ(modelCostUs("no_such_algorithm", t, AlgoQuery{}), kUnmodelledUs);
}

// On PCIe P2P a probe that measured every pair replaces the rows' GB/s with that algorithm's
// NVLink share of the slowest pair's SM-store rate; an unmeasured pair, an NVLink group or an
// algorithm without an NVLink row (staged_host) keeps the table.
TEST(CostModel, PcieRatesComeFromMeasuredLinks) {
  auto withRates = [](Topology t, double gbs) {
    for (int a = 0; a < t.nRanks(); ++a)
      for (int b = 0; b < t.nRanks(); ++b)
        if (a != b) t.links[a][b].smGBs = gbs;
    return t;
  };
  const Topology pcie = Topology::uniform(2, LinkKind::kPcieP2p);
  AlgoQuery big, none;
  big.bytes = 64u << 20;
  none.bytes = 0;
  // The bandwidth term alone: the cost minus the same call's alpha (zero bytes move nothing).
  auto beta = [&](const char* algo, const Topology& t) { return modelCostUs(algo, t, big) - modelCostUs(algo, t, none); };

  const Topology slow = withRates(pcie, 25.0), fast = withRates(pcie, 50.0);
  EXPECT_DOUBLE_EQ(slowestMeasuredSmGBs(slow), 25.0);
  EXPECT_EQ(slowestMeasuredSmGBs(pcie), 0.0);
  for (const char* algo : {"twoshot_p2p", "oneshot_p2p", "lamport_p2p", "ring_nccl"}) {
    EXPECT_NEAR(beta(algo, slow) / beta(algo, fast), 2.0, 1e-9) << algo;
    EXPECT_EQ(modelCostUs(algo, slow, none), modelCostUs(algo, pcie, none)) << algo << ": alpha unchanged";
    EXPECT_NE(beta(algo, slow), beta(algo, pcie)) << algo << ": the measured rate is used";
  }
  // twoshot moves 2 (n-1)/n B per rank at 320/365.9 of the link on NVLink: 64 MiB at 25 GB/s.
  EXPECT_NEAR(beta("twoshot_p2p", slow), double(64u << 20) / (25.0 * 320.0 / 365.9 * 1e3), 1e-6);
  EXPECT_EQ(beta("staged_host", slow), beta("staged_host", pcie));

  Topology oneMissing = slow;
  oneMissing.links[1][0].smGBs = 0;  // measured one way only
  EXPECT_EQ(slowestMeasuredSmGBs(oneMissing), 0.0);
  EXPECT_EQ(beta("twoshot_p2p", oneMissing), beta("twoshot_p2p", pcie));
  Topology uneven = slow;
  uneven.links[0][1].smGBs = 10.0;  // the slowest direction bounds the group
  EXPECT_DOUBLE_EQ(slowestMeasuredSmGBs(uneven), 10.0);

  const Topology nvlink = Topology::uniform(2, LinkKind::kNvlink, 18);
  EXPECT_EQ(beta("twoshot_p2p", withRates(nvlink, 25.0)), beta("twoshot_p2p", nvlink)) << "NVLink rows are measured";

  EXPECT_NE(costModelSource(slow).find("slowest pair 25.0 GB/s"), std::string::npos) << costModelSource(slow);
  EXPECT_NE(costModelSource(pcie).find("--measure"), std::string::npos) << costModelSource(pcie);
  EXPECT_NE(costModelSource(nvlink).find("2x H200"), std::string::npos) << costModelSource(nvlink);
}

}  // namespace
}  // namespace tpcomm
