// Routing decisions of libtpcomm_nccl.so (src/shim/routing.h) as a table, on the fixture
// topologies with the selection-only registry list. A row states the call, the context and the
// route that must come out (and optionally the algorithm). Every decision is also checked
// against the selector itself: tpcomm iff the selector, given the same algorithms plus
// ring_nccl, does not put ring_nccl first. To test a new decision, add a row to kRows.
#include "shim/routing.h"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <memory>
#include <sstream>

#include "collectives/registry.h"
#include "collectives/selector.h"
#include "tpcomm/status.h"

namespace tpcomm {
namespace shim {
namespace {

Topology fixture(const std::string& file) {
  std::ifstream f(std::string(TPCOMM_TEST_FIXTURE_DIR) + "/" + file);
  std::stringstream ss;
  ss << f.rdbuf();
  Topology t;
  EXPECT_EQ(Topology::fromJson(ss.str(), &t), Status::kOk) << file;
  return t;
}

// An algorithm whose transport did not come up (available() false), e.g. P2P on this machine.
class Unavailable : public Algorithm {
 public:
  explicit Unavailable(Algorithm* a) : a_(a) {}
  const char* name() const override { return a_->name(); }
  const char* transport() const override { return a_->transport(); }
  bool supports(const Topology& t, const AlgoQuery& q, std::string* w) const override { return a_->supports(t, q, w); }
  Status run(const CollArgs&) override { return Status::kInternal; }
  bool available() const override { return false; }

 private:
  Algorithm* a_;
};

constexpr size_t K = 1024, M = 1024 * 1024;
enum Expect { kToNccl, kToTpcomm, kEither };

struct Row {
  const char* name;
  std::function<Topology()> topo;
  ncclDataType_t dtype;
  ncclRedOp_t op;
  size_t bytes;  // count = bytes / element size (count 0 when bytes is 0)
  bool capturing;
  const char* algo;  // TPCOMM_ALGO text
  bool shimOn, ready, p2pDown;
  Expect expect;
  const char* whyContains;  // nullptr: not checked
  Collective kind = Collective::kAllReduce;  // bytes: the call's own count (reduce-scatter: recvcount)
  const char* algoIs = nullptr;              // nullptr: not checked
};

std::function<Topology()> file(const char* f) {
  return [f] { return fixture(f); };
}
Topology twoNodes() {
  Topology t = fixture("nvlink2.json");
  t.ranks[1].hostId = t.ranks[0].hostId + 1;
  return t;
}

const std::vector<Row>& rows() {
  // clang-format off
  static const std::vector<Row> kRows = {
      // The switches before any selection.
      {"shim off", file("nvlink2.json"), ncclFloat32, ncclSum, 8 * K, true, "", false, true, false, kToNccl, "TPCOMM_SHIM=0"},
      {"not set up", file("nvlink2.json"), ncclFloat32, ncclSum, 8 * K, true, "", true, false, false, kToNccl, "not set up"},
      // Operators and types tpcomm does not reduce.
      {"prod", file("nvlink2.json"), ncclFloat32, ncclProd, 8 * K, true, "", true, true, false, kToNccl, "op"},
      {"avg", file("nvlink2.json"), ncclBfloat16, ncclAvg, 8 * K, true, "", true, true, false, kToNccl, "op"},
      {"int32", file("nvlink2.json"), ncclInt32, ncclSum, 8 * K, true, "", true, true, false, kToNccl, "dtype"},
      {"int8", file("nvlink2.json"), ncclInt8, ncclMax, 8 * K, true, "", true, true, false, kToNccl, "dtype"},
      {"float64", file("nvlink2.json"), ncclFloat64, ncclSum, 8 * K, true, "", true, true, false, kToNccl, "dtype"},
      {"count 0", file("nvlink2.json"), ncclFloat32, ncclSum, 0, true, "", true, true, false, kToNccl, "count"},
      // Topology.
      {"two nodes", twoNodes, ncclBfloat16, ncclSum, 8 * K, true, "", true, true, false, kToNccl, "allows no tpcomm"},
      {"pcie no-p2p capturing", file("pcie2_no_p2p.json"), ncclBfloat16, ncclSum, 8 * K, true, "", true, true, false, kToNccl, "allows no tpcomm"},
      {"nvlink2 p2p down capturing", file("nvlink2.json"), ncclBfloat16, ncclSum, 8 * K, true, "", true, true, true, kToNccl, "allows no tpcomm"},
      {"pcie no-p2p eager 8K", file("pcie2_no_p2p.json"), ncclFloat32, ncclSum, 8 * K, false, "", true, true, false, kEither, nullptr},
      // 2x NVLink: small messages to tpcomm (sum/max/min, every type, eager and graph), the largest to NCCL.
      {"nvlink2 f32 sum 8K graph", file("nvlink2.json"), ncclFloat32, ncclSum, 8 * K, true, "", true, true, false, kToTpcomm, "vs NCCL"},
      {"nvlink2 f16 sum 8K eager", file("nvlink2.json"), ncclFloat16, ncclSum, 8 * K, false, "", true, true, false, kToTpcomm, nullptr},
      {"nvlink2 bf16 max 64K graph", file("nvlink2.json"), ncclBfloat16, ncclMax, 64 * K, true, "", true, true, false, kToTpcomm, nullptr},
      {"nvlink2 f32 min 256K eager", file("nvlink2.json"), ncclFloat32, ncclMin, 256 * K, false, "", true, true, false, kToTpcomm, nullptr},
      {"nvlink2 bf16 4 bytes", file("nvlink2.json"), ncclBfloat16, ncclSum, 4, true, "", true, true, false, kToTpcomm, nullptr},
      {"nvlink2 f32 256M", file("nvlink2.json"), ncclFloat32, ncclSum, 256 * M, false, "", true, true, false, kEither, nullptr},
      {"nvlink2 p2p down 256M eager", file("nvlink2.json"), ncclFloat32, ncclSum, 256 * M, false, "", true, true, true, kToNccl, "cheaper"},
      {"nvswitch8 bf16 8K graph", file("nvswitch8_no_multicast.json"), ncclBfloat16, ncclSum, 8 * K, true, "", true, true, false, kEither, nullptr},
      // TPCOMM_ALGO steers the shim as it steers tpcomm.
      {"forced ring_nccl", file("nvlink2.json"), ncclFloat32, ncclSum, 8 * K, true, "ring_nccl", true, true, false, kToNccl, "forced"},
      {"ring_nccl excluded at 256M", file("nvlink2.json"), ncclFloat32, ncclSum, 256 * M, false, "^ring_nccl", true, true, false, kToTpcomm, "excluded"},
      {"range to NCCL below 64K", file("nvlink2.json"), ncclFloat32, ncclSum, 8 * K, true, "0-64K:ring_nccl", true, true, false, kToNccl, "forced"},
      {"range leaves 256K to tpcomm", file("nvlink2.json"), ncclFloat32, ncclSum, 256 * K, true, "0-64K:ring_nccl", true, true, false, kToTpcomm, nullptr},
      {"forced tpcomm algorithm", file("nvlink2.json"), ncclFloat32, ncclSum, 256 * M, false, "twoshot_p2p", true, true, false, kToTpcomm, "forced"},
      // Reduce-scatter and all-gather: the same rules; twoshot_p2p and ll_p2p (small) run them over P2P.
      {"rs bf16 128M eager", file("nvlink2.json"), ncclBfloat16, ncclSum, 128 * M, false, "", true, true, false, kToTpcomm, "vs NCCL", Collective::kReduceScatter, "twoshot_p2p"},
      {"ag f32 128M graph", file("nvlink2.json"), ncclFloat32, ncclSum, 128 * M, true, "", true, true, false, kToTpcomm, nullptr, Collective::kAllGather, "twoshot_p2p"},
      // Small reduce-scatter / all-gather: ll_p2p (flags in the stores, no barrier) under NCCL's alpha.
      {"rs 8K graph: ll_p2p", file("nvlink2.json"), ncclBfloat16, ncclSum, 8 * K, true, "", true, true, false, kToTpcomm, "vs NCCL", Collective::kReduceScatter, "ll_p2p"},
      {"ag 64K eager: ll_p2p", file("nvlink2.json"), ncclFloat16, ncclSum, 64 * K, false, "", true, true, false, kToTpcomm, "vs NCCL", Collective::kAllGather, "ll_p2p"},
      {"rs prod", file("nvlink2.json"), ncclFloat32, ncclProd, 128 * M, false, "", true, true, false, kToNccl, "op", Collective::kReduceScatter},
      {"ag int32", file("nvlink2.json"), ncclInt32, ncclSum, 128 * M, false, "", true, true, false, kToNccl, "dtype", Collective::kAllGather},
      {"rs p2p down", file("nvlink2.json"), ncclBfloat16, ncclSum, 128 * M, false, "", true, true, true, kToNccl, nullptr, Collective::kReduceScatter},
      {"rs forced twoshot 8K", file("nvlink2.json"), ncclBfloat16, ncclMax, 8 * K, true, "twoshot_p2p", true, true, false, kToTpcomm, "forced", Collective::kReduceScatter, "twoshot_p2p"},
  };
  // clang-format on
  return kRows;
}

class RoutingTest : public ::testing::TestWithParam<Row> {};

TEST_P(RoutingTest, Decides) {
  const Row& row = GetParam();
  Topology topo = row.topo();
  auto owned = makeAlgorithms(nullptr);
  std::vector<std::unique_ptr<Algorithm>> wrappers;
  std::vector<Algorithm*> algos;
  for (auto& a : owned) {
    if (row.p2pDown && std::string(a->name()).find("_p2p") != std::string::npos) {
      wrappers.emplace_back(new Unavailable(a.get()));
      algos.push_back(wrappers.back().get());
    } else {
      algos.push_back(a.get());
    }
  }
  AlgoOverride ovr;
  ASSERT_EQ(parseAlgoOverride(row.algo, algorithmNames(), &ovr), Status::kOk) << row.algo;
  // What Communicator::explainAllReduce answers on that topology: the selector over the
  // communicator's algorithms, those whose transport is down ranked too.
  RouteContext ctx;
  ctx.shimOn = row.shimOn;
  ctx.ready = row.ready;
  ctx.explain = [&](Collective kind, size_t count, DataType dt, ReduceOp o, bool capturing,
                    std::vector<AlgorithmChoice>* out) {
    const size_t pieces = kind == Collective::kAllReduce ? 1 : static_cast<size_t>(topo.nRanks());
    const AlgoQuery q{static_cast<CollKind>(kind), dt, o, count * dataTypeSize(dt) * pieces, capturing};
    out->clear();
    for (const Candidate& x : selectAlgorithms(algos, topo, q, ovr, false))
      out->push_back({x.algo->name(), x.costUs, x.forced, x.algo->available()});
    return Status::kOk;
  };
  size_t es = ncclTypeSize(row.dtype);
  ASSERT_GT(es, 0u);
  RouteCall call{row.dtype, row.op, row.bytes / es, row.capturing, row.kind};
  RouteDecision d = decideRoute(ctx, call);
  SCOPED_TRACE(std::string(row.name) + ": " + d.algo + " (" + d.why + ")");
  if (row.expect == kToNccl) EXPECT_EQ(d.route, Route::kNccl);
  if (row.expect == kToTpcomm) EXPECT_EQ(d.route, Route::kTpcomm);
  if (row.whyContains) EXPECT_NE(d.why.find(row.whyContains), std::string::npos);
  if (row.algoIs) EXPECT_EQ(d.algo, row.algoIs);
  EXPECT_EQ(d.route == Route::kNccl, d.algo == "nccl");
  // Pure: the same inputs give the same decision.
  RouteDecision again = decideRoute(ctx, call);
  EXPECT_EQ(again.route, d.route);
  EXPECT_EQ(again.algo, d.algo);
  // Consistent with the selector whenever the call reached it.
  DataType dt;
  ReduceOp op;
  if (row.shimOn && row.ready && call.count > 0 && tpcommDataType(row.dtype, &dt) && tpcommReduceOp(row.op, &op) &&
      topo.singleNode()) {
    const std::unique_ptr<Algorithm> ncclAlgo = makeAlgorithm("ring_nccl", nullptr);
    const Algorithm& nccl = *ncclAlgo;
    std::vector<Algorithm*> list;
    for (Algorithm* a : algos)
      if (std::string(a->name()) != "ring_nccl") list.push_back(a);
    list.push_back(ncclAlgo.get());
    const size_t pieces = row.kind == Collective::kAllReduce ? 1 : static_cast<size_t>(topo.nRanks());
    AlgoQuery q{static_cast<CollKind>(row.kind), dt, op, call.count * dataTypeSize(dt) * pieces, call.capturing};
    std::vector<Candidate> c = selectAlgorithms(list, topo, q, ovr);
    bool tp = !c.empty() && c[0].algo != &nccl;
    EXPECT_EQ(d.route == Route::kTpcomm, tp);
    if (tp) {
      EXPECT_EQ(d.algo, c[0].algo->name());
      std::string why;
      EXPECT_TRUE(c[0].algo->available() && c[0].algo->supports(topo, q, &why));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Rows, RoutingTest, ::testing::ValuesIn(rows()), [](const ::testing::TestParamInfo<Row>& i) {
  std::string n;
  for (const char* p = i.param.name; *p; ++p) n += std::isalnum(static_cast<unsigned char>(*p)) ? *p : '_';
  return n;
});

// TPCOMM_DETERMINISTIC=1: NCCL is never chosen for an eligible call. A 256 MB all-reduce that
// NCCL would win goes to two-shot; a call no deterministic tpcomm path can serve (two nodes)
// is refused instead of run on NCCL.
TEST(RoutingDeterministic, NeverNcclForAnEligibleCall) {
  auto owned = makeAlgorithms(nullptr);
  std::vector<Algorithm*> algos = rawList(owned);
  AlgoOverride ovr;
  ovr.deterministicOnly = true;
  auto decideOn = [&](const Topology& topo, size_t bytes) {
    RouteContext ctx;
    ctx.ready = true;
    ctx.deterministic = true;
    ctx.explain = [&](Collective, size_t count, DataType dt, ReduceOp o, bool capturing,
                      std::vector<AlgorithmChoice>* out) {
      const AlgoQuery q{CollKind::kAllReduce, dt, o, count * dataTypeSize(dt), capturing};
      out->clear();
      for (const Candidate& x : selectAlgorithms(algos, topo, q, ovr, false))
        out->push_back({x.algo->name(), x.costUs, x.forced, x.algo->available()});
      return Status::kOk;
    };
    return decideRoute(ctx, RouteCall{ncclFloat32, ncclSum, bytes / 4, false});
  };
  RouteDecision big = decideOn(fixture("nvlink2.json"), size_t{1} << 30);
  EXPECT_EQ(big.route, Route::kTpcomm) << big.why;
  EXPECT_EQ(big.algo, "twoshot_p2p");
  RouteDecision far = decideOn(twoNodes(), 8 * K);
  EXPECT_EQ(far.route, Route::kRefuse) << far.why;
  EXPECT_NE(far.why.find("TPCOMM_DETERMINISTIC"), std::string::npos) << far.why;
}

TEST(RoutingTypes, Mapping) {
  DataType d;
  ReduceOp o;
  EXPECT_TRUE(tpcommDataType(ncclFloat32, &d));
  EXPECT_EQ(d, DataType::kF32);
  EXPECT_TRUE(tpcommDataType(ncclFloat16, &d));
  EXPECT_EQ(d, DataType::kF16);
  EXPECT_TRUE(tpcommDataType(ncclBfloat16, &d));
  EXPECT_EQ(d, DataType::kBF16);
  EXPECT_FALSE(tpcommDataType(ncclFloat64, &d));
  EXPECT_TRUE(tpcommReduceOp(ncclMin, &o));
  EXPECT_EQ(o, ReduceOp::kMin);
  EXPECT_FALSE(tpcommReduceOp(ncclAvg, &o));
  EXPECT_FALSE(tpcommReduceOp(static_cast<ncclRedOp_t>(ncclNumOps + 1), &o));  // a custom PreMulSum op
  EXPECT_EQ(ncclTypeSize(ncclBfloat16), 2u);
  EXPECT_EQ(ncclTypeSize(ncclInt64), 8u);
  EXPECT_TRUE(shapeEligible({ncclFloat16, ncclMax, 1, false}));
  EXPECT_FALSE(shapeEligible({ncclFloat16, ncclMax, 0, false}));
  EXPECT_FALSE(shapeEligible({ncclUint8, ncclSum, 16, false}));
}

}  // namespace
}  // namespace shim
}  // namespace tpcomm
