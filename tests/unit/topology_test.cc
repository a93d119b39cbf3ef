// The topology model (topology/topology.h): JSON round trip, the fixture files the selector tests
// load, the derived predicates, and malformed JSON rejected with a message (never an exception).
#include "topology/topology.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

namespace tpcomm {
namespace {

std::string readFixture(const std::string& name) {
  std::ifstream f(std::string(TPCOMM_TEST_FIXTURE_DIR) + "/" + name);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void expectSame(const Topology& a, const Topology& b) {
  ASSERT_EQ(a.nRanks(), b.nRanks());
  EXPECT_EQ(a.multicastAllowedByEnv, b.multicastAllowedByEnv);
  EXPECT_EQ(a.multicastWhyNot, b.multicastWhyNot);
  for (int r = 0; r < a.nRanks(); ++r) {
    const RankDevice &x = a.ranks[r], &y = b.ranks[r];
    EXPECT_EQ(x.cudaDevice, y.cudaDevice) << "rank " << r;
    EXPECT_EQ(x.name, y.name) << "rank " << r;
    EXPECT_EQ(x.ccMajor, y.ccMajor) << "rank " << r;
    EXPECT_EQ(x.ccMinor, y.ccMinor) << "rank " << r;
    EXPECT_EQ(x.smCount, y.smCount) << "rank " << r;
    EXPECT_EQ(x.busId, y.busId) << "rank " << r;
    EXPECT_EQ(x.uuid, y.uuid) << "rank " << r;
    EXPECT_EQ(x.numaNode, y.numaNode) << "rank " << r;
    EXPECT_EQ(x.hostId, y.hostId) << "rank " << r;
    EXPECT_EQ(x.processId, y.processId) << "rank " << r;
    EXPECT_EQ(x.multicastSupported, y.multicastSupported) << "rank " << r;
  }
  for (int p = 0; p < a.nRanks(); ++p)
    for (int q = 0; q < a.nRanks(); ++q) {
      const PeerLink &x = a.links[p][q], &y = b.links[p][q];
      EXPECT_EQ(x.kind, y.kind) << p << "," << q;
      EXPECT_EQ(x.nvlinks, y.nvlinks) << p << "," << q;
      EXPECT_EQ(x.p2pVerified, y.p2pVerified) << p << "," << q;
      EXPECT_EQ(x.atomics, y.atomics) << p << "," << q;
      EXPECT_EQ(x.why, y.why) << p << "," << q;
    }
}

TEST(TopologyJson, RoundTripOfEveryKind) {
  for (LinkKind k : {LinkKind::kNone, LinkKind::kPcie, LinkKind::kPcieP2p, LinkKind::kNvlink, LinkKind::kNvswitch}) {
    SCOPED_TRACE(linkKindName(k));
    Topology t = Topology::uniform(4, k, 6, false);
    t.ranks[2].busId = "0000:c1:00.0";
    t.ranks[3].hostId = 1;
    t.ranks[1].multicastSupported = true;
    t.multicastWhyNot = "a reason with \"quotes\" and \\ backslash";
    Topology back;
    ASSERT_EQ(Topology::fromJson(t.toJson(), &back), Status::kOk) << lastErrorMessage();
    expectSame(t, back);
    EXPECT_EQ(back.toJson(), t.toJson());
  }
  Topology h = Topology::host(3, true), back;
  ASSERT_EQ(Topology::fromJson(h.toJson(), &back), Status::kOk) << lastErrorMessage();
  expectSame(h, back);
}

TEST(TopologyJson, LinkKindNames) {
  for (LinkKind k : {LinkKind::kNone, LinkKind::kPcie, LinkKind::kPcieP2p, LinkKind::kNvlink, LinkKind::kNvswitch,
                     LinkKind::kSelf}) {
    LinkKind back = LinkKind::kNone;
    ASSERT_TRUE(parseLinkKind(linkKindName(k), &back)) << linkKindName(k);
    EXPECT_EQ(back, k);
  }
  LinkKind k;
  EXPECT_FALSE(parseLinkKind("NVLINK", &k));
  EXPECT_FALSE(parseLinkKind("", &k));
}

// One row per fixture file: what the derived predicates must say about it.
struct FixtureRow {
  const char* file;
  int ranks;
  bool allPairsP2p, allPairsNvlink;
  LinkKind weakest;
  bool multicastSupportedEverywhere;
};

const FixtureRow kFixtures[] = {
    {"pcie2_no_p2p.json", 2, false, false, LinkKind::kPcie, false},
    {"pcie2_p2p.json", 2, true, false, LinkKind::kPcieP2p, false},
    {"nvlink2.json", 2, true, true, LinkKind::kNvlink, false},
    {"nvlink8_mesh.json", 8, true, true, LinkKind::kNvlink, false},
    {"nvswitch8_multicast.json", 8, true, true, LinkKind::kNvswitch, true},
    {"nvswitch8_no_multicast.json", 8, true, true, LinkKind::kNvswitch, true},
};

TEST(TopologyJson, FixturesLoadAndDescribeTheirMachines) {
  for (const FixtureRow& row : kFixtures) {
    SCOPED_TRACE(row.file);
    std::string text = readFixture(row.file);
    ASSERT_FALSE(text.empty()) << "missing fixture under " << TPCOMM_TEST_FIXTURE_DIR;
    Topology t;
    ASSERT_EQ(Topology::fromJson(text, &t), Status::kOk) << lastErrorMessage();
    EXPECT_EQ(t.nRanks(), row.ranks);
    EXPECT_TRUE(t.allGpu());
    EXPECT_FALSE(t.allHost());
    EXPECT_TRUE(t.singleNode());
    EXPECT_FALSE(t.singleProcess());
    EXPECT_EQ(t.allPairsP2p(), row.allPairsP2p);
    EXPECT_EQ(t.allPairsNvlink(), row.allPairsNvlink);
    EXPECT_EQ(t.weakestLink(), row.weakest);
    bool all = true;
    for (const RankDevice& d : t.ranks) all = all && d.multicastSupported;
    EXPECT_EQ(all, row.multicastSupportedEverywhere);
    Topology back;
    ASSERT_EQ(Topology::fromJson(t.toJson(), &back), Status::kOk);
    expectSame(t, back);
  }
}

TEST(TopologyModel, Predicates) {
  Topology h = Topology::host(4, true);
  EXPECT_TRUE(h.allHost());
  EXPECT_FALSE(h.allGpu());
  EXPECT_TRUE(h.singleProcess());
  EXPECT_FALSE(h.allPairsP2p());
  EXPECT_FALSE(Topology::host(4, false).singleProcess());
  EXPECT_TRUE(Topology::host(4, false).singleNode());

  Topology one = Topology::uniform(1, LinkKind::kNvlink, 4);
  EXPECT_EQ(one.weakestLink(), LinkKind::kSelf);

  Topology mixed = Topology::uniform(4, LinkKind::kNvlink, 4);
  mixed.links[1][3].kind = mixed.links[3][1].kind = LinkKind::kPcieP2p;
  EXPECT_EQ(mixed.weakestLink(), LinkKind::kPcieP2p);
  EXPECT_TRUE(mixed.allPairsP2p());
  EXPECT_FALSE(mixed.allPairsNvlink());
  mixed.links[1][3].p2pVerified = false;  // P2P claimed but the data check failed
  EXPECT_FALSE(mixed.allPairsP2p());

  Topology twoNodes = Topology::uniform(2, LinkKind::kNvlink, 4);
  twoNodes.ranks[1].hostId = 7;
  EXPECT_FALSE(twoNodes.singleNode());
  EXPECT_FALSE(twoNodes.allPairsP2p());

  Topology half = Topology::uniform(2, LinkKind::kPcie);
  half.ranks[1].cudaDevice = -1;
  EXPECT_FALSE(half.allGpu());
  EXPECT_FALSE(half.allHost());
}

struct BadJsonRow {
  const char* text;
  const char* mustMention;
};

const BadJsonRow kBadJson[] = {
    {"", "not valid JSON"},
    {"{", "not valid JSON"},
    {"[1,2]", "'ranks'"},
    {"{\"ranks\": []}", "'links'"},
    {"{\"links\": []}", "'ranks'"},
    {"{\"ranks\": 3, \"links\": []}", "'ranks'"},
    {"{\"ranks\": [], \"links\": []}", "no ranks"},
    {"{\"ranks\": [{}], \"links\": [[{\"kind\": \"warp\"}]]}", "warp"},
    {"{\"ranks\": [{}], \"links\": [[{\"kind\": \"none\"}]]}", "self"},
    {"{\"ranks\": [{}], \"links\": [5]}", "array"},
    {"{\"ranks\": [{}, {}], \"links\": [[{\"kind\": \"self\"}]]}", "rows"},
    {"{\"ranks\": [{}, {}], \"links\": [[{\"kind\": \"self\"}, {}], [{}]]}", "links[1]"},
    {"{\"ranks\": [{\"cuda_device\": \"zero\"}], \"links\": [[{\"kind\": \"self\"}]]}", "topology JSON"},
    {"{\"ranks\": [{}], \"links\": [[{\"kind\": 3}]]}", "topology JSON"},
    {"{\"ranks\": [{}], \"links\": [[{\"kind\": \"self\", \"nvlinks\": \"x\"}]]}", "topology JSON"},
};

TEST(TopologyJson, MalformedInputIsRejectedWithAMessage) {
  for (const BadJsonRow& row : kBadJson) {
    SCOPED_TRACE(row.text);
    Topology t = Topology::uniform(3, LinkKind::kNvlink, 4);
    Status s = Status::kOk;
    EXPECT_NO_THROW(s = Topology::fromJson(row.text, &t));
    EXPECT_EQ(s, Status::kInvalidArgument);
    std::string msg = lastErrorMessage();
    EXPECT_NE(msg.find(row.mustMention), std::string::npos) << msg;
    EXPECT_EQ(t.nRanks(), 3) << "output changed on failure";
  }
}

TEST(TopologyJson, MinimalDocumentTakesDefaults) {
  Topology t;
  ASSERT_EQ(Topology::fromJson("{\"ranks\": [{}], \"links\": [[{\"kind\": \"self\"}]]}", &t), Status::kOk)
      << lastErrorMessage();
  ASSERT_EQ(t.nRanks(), 1);
  EXPECT_EQ(t.ranks[0].cudaDevice, -1);
  EXPECT_FALSE(t.multicastAllowedByEnv);
}

}  // namespace
}  // namespace tpcomm
