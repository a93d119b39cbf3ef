// topology_sysfs_test.cc: sysfs fixture trees (tests/unit/fixtures/sysfs, made by
// make_fixtures.py) -> PCIe chain, IOMMU mode, ACS state, path type, and the diagnosis + remedy
// text a failed P2P check gets. One row per fixture case; add a case by adding a tree and a row.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "topology/diagnose.h"
#include "topology/sysfs_pci.h"

namespace tpcomm {
namespace {

std::string fixture(const char* name) { return std::string(TPCOMM_SYSFS_FIXTURES) + "/" + name; }

struct SysfsCase {
  const char* dir;
  const char* gpuA;
  const char* gpuB;
  IommuMode mode;
  const char* pathType;
  int bridgesA;                      // upstream bridges of gpuA
  const char* acsOfLastBridgeA;      // prefix of AcsState::describe()
  std::vector<std::string> remedyHas;
  std::vector<std::string> remedyLacks;
};

const SysfsCase kCases[] = {
    {"pt_acs_off", "0000:03:00.0", "0000:04:00.0", IommuMode::kPassthrough, "PIX", 3, "off",
     {"no IOMMU or ACS cause found (IOMMU passthrough)"}, {"boot with iommu=pt or", "setpci -s 0000:02"}},
    {"translated_acs_on", "0000:03:00.0", "0000:04:00.0", IommuMode::kTranslated, "PIX", 3, "redirect ON (ctrl 0x001d: SV RR CR UF)",
     {"IOMMU in translated mode and ACS redirect on bridge 0000:02:00.0, 0000:02:01.0; boot with iommu=pt or disable ACS on "
      "bridge 0000:02:00.0 (setpci -s 0000:02:00.0 ECAP_ACS+0x6.w=0000) or disable ACS on bridge 0000:02:01.0"},
     {"0000:01:00.0 (setpci", "0000:00:01.0 (setpci"}},
    {"off_two_sockets_unreadable", "0000:03:00.0", "0000:81:00.0", IommuMode::kOff, "SYS", 1, "unknown (extended config space",
     {"different CPU sockets (SYS)", "unreadable (run tpcomm-doctor as root)", "setpci -s 0000:00:01.0 ECAP_ACS+0x6.w=0000"},
     {"translated"}},
    {"cmdline_pt_groups_hidden", "0000:03:00.0", "0000:04:00.0", IommuMode::kPassthrough, "PIX", 3, "off",
     {"no IOMMU or ACS cause found"}, {"translated"}},
};

class SysfsFixture : public ::testing::TestWithParam<SysfsCase> {};

TEST_P(SysfsFixture, ParsesIntoDiagnosisAndRemedy) {
  const SysfsCase& c = GetParam();
  SysfsReader r(fixture(c.dir));
  PciDeviceInfo a = r.device(c.gpuA), b = r.device(c.gpuB);
  ASSERT_TRUE(a.found) << c.dir;
  ASSERT_TRUE(b.found) << c.dir;
  EXPECT_EQ(static_cast<int>(a.bridges.size()), c.bridgesA);
  EXPECT_EQ(a.bridges.back().acs.describe().rfind(c.acsOfLastBridgeA, 0), 0u) << a.bridges.back().acs.describe();
  IommuInfo io = r.iommu({a, b});
  EXPECT_EQ(io.mode, c.mode) << io.evidence;
  EXPECT_EQ(pciPathType(a, b), c.pathType);

  // A pair whose kernel check delivered garbage: the text must name the cause and remedy.
  MachineProbe m;
  m.iommu = io;
  for (const PciDeviceInfo& p : {a, b}) {
    GpuFacts g;
    g.index = m.nGpus();
    g.busId = p.busId;
    g.pci = p;
    m.gpus.push_back(g);
  }
  m.pairs.assign(2, std::vector<PairFacts>(2));
  PairFacts& p = m.pairs[0][1];
  p.canAccessPeer = true;
  p.pciPath = pciPathType(a, b);
  p.kernelCheck = P2pCheck::kCorrupt;
  p.copyCheck = P2pCheck::kOk;
  p.checkDetail = "kernel: 5 of 262144 words wrong";
  m.complete = true;
  std::string text = pairProblem(m, 0, 1);
  EXPECT_EQ(text.rfind("P2P 0->1 corrupts data (kernel stores delivered wrong data, kernel: 5 of 262144", 0), 0u) << text;
  for (const std::string& s : c.remedyHas) EXPECT_NE(text.find(s), std::string::npos) << "missing '" << s << "' in: " << text;
  for (const std::string& s : c.remedyLacks) EXPECT_EQ(text.find(s), std::string::npos) << "unexpected '" << s << "' in: " << text;
  EXPECT_TRUE(pairBroken(m, 0, 1));
  EXPECT_FALSE(pairBroken(m, 1, 0));  // not run: not broken
  PeerLink l = decideLink(m, 0, 1);
  EXPECT_EQ(l.kind, LinkKind::kPcie);  // host-staged fallback
  EXPECT_FALSE(l.p2pVerified);
  EXPECT_EQ(l.why, text);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SysfsFixture, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<SysfsCase>& i) { return std::string(i.param.dir); });

TEST(Sysfs, LinkFactsAndDriverVersion) {
  SysfsReader pt(fixture("pt_acs_off"));
  PciDeviceInfo a = pt.device("0000:03:00.0");
  EXPECT_EQ(a.numaNode, 0);
  EXPECT_EQ(a.linkGen, 5);
  EXPECT_EQ(a.linkWidth, 16);
  EXPECT_EQ(a.iommuGroup, "30");
  EXPECT_EQ(a.iommuGroupType, "identity");
  EXPECT_EQ(a.hostBridge, "pci0000:00");
  EXPECT_EQ(a.bridges[1].acs.read, AcsState::Read::kNoCapability);
  EXPECT_EQ(pt.driverVersion(), "580.159.04");
  EXPECT_EQ(pt.iommu({a}).cmdlineFlags, "intel_iommu=on iommu=pt");
  SysfsReader tr(fixture("translated_acs_on"));
  EXPECT_EQ(tr.driverVersion(), "575.57.08");
  SysfsReader two(fixture("off_two_sockets_unreadable"));
  PciDeviceInfo c = two.device("81:00.0");  // short spelling
  EXPECT_TRUE(c.found);
  EXPECT_EQ(c.numaNode, 1);
  EXPECT_EQ(c.linkGen, 4);
  EXPECT_EQ(c.linkWidth, 8);
  EXPECT_EQ(two.driverVersion(), "");
  EXPECT_FALSE(two.device("0000:99:00.0").found);
  EXPECT_FALSE(SysfsReader("/nonexistent-root").device("0000:03:00.0").found);
}

TEST(Sysfs, NormalizeBusId) {
  const std::pair<const char*, const char*> rows[] = {
      {"0000:1B:00.0", "0000:1b:00.0"}, {"00000000:1b:00.0", "0000:1b:00.0"}, {"1b:00.0", "0000:1b:00.0"},
      {"0001:ff:1f.7", "0001:ff:1f.7"}, {"", ""}, {"garbage", ""}, {"0000:1b:00", ""}, {"0000:100:00.0", ""},
      {"0000:1b:20.0", ""}, {"0000:1b:00.8", ""}, {"0000:1b:00.0x", ""}};
  for (const auto& r : rows) EXPECT_EQ(normalizeBusId(r.first), r.second) << r.first;
}

TEST(Sysfs, ParseAcsMalformed) {
  EXPECT_EQ(parseAcs("").read, AcsState::Read::kUnknown);
  EXPECT_EQ(parseAcs(std::string(64, '\0')).read, AcsState::Read::kUnknown);
  EXPECT_EQ(parseAcs(std::string(4096, '\0')).read, AcsState::Read::kNoCapability);
  EXPECT_EQ(parseAcs(std::string(4096, '\xff')).read, AcsState::Read::kNoCapability);
  // A capability list that points to itself must terminate.
  std::string loop(4096, '\0');
  loop[0x100] = 0x01;                // AER
  loop[0x102] = 0x01;                // version 1, next = 0x100 (bits 20..31)
  loop[0x103] = static_cast<char>(0x10);
  EXPECT_EQ(parseAcs(loop).read, AcsState::Read::kNoCapability);
  std::string acs(4096, '\0');
  acs[0x100] = 0x0d;
  acs[0x106] = 0x04;  // RR only
  AcsState s = parseAcs(acs);
  EXPECT_EQ(s.read, AcsState::Read::kRead);
  EXPECT_TRUE(s.redirects());
  EXPECT_EQ(s.describe(), "redirect ON (ctrl 0x0004: RR)");
  acs[0x106] = 0x11;  // SV UF: no redirect
  EXPECT_FALSE(parseAcs(acs).redirects());
}

TEST(Sysfs, PcieGen) {
  EXPECT_EQ(pcieGenFromSpeed("2.5 GT/s PCIe"), 1);
  EXPECT_EQ(pcieGenFromSpeed("8.0 GT/s PCIe"), 3);
  EXPECT_EQ(pcieGenFromSpeed("16.0 GT/s PCIe"), 4);
  EXPECT_EQ(pcieGenFromSpeed("32.0 GT/s PCIe"), 5);
  EXPECT_EQ(pcieGenFromSpeed("64.0 GT/s PCIe"), 6);
  EXPECT_EQ(pcieGenFromSpeed("Unknown"), 0);
  EXPECT_EQ(pcieGenFromSpeed(""), 0);
}

TEST(Diagnose, LinkKindFromNvmlNotAtomics) {
  MachineProbe m;
  m.nvmlLoaded = true;
  m.gpus.resize(3);
  for (int i = 0; i < 3; ++i) m.gpus[i].index = i;
  m.pairs.assign(3, std::vector<PairFacts>(3));
  auto verified = [](PairFacts* p) {
    p->canAccessPeer = true;
    p->kernelCheck = p->copyCheck = P2pCheck::kOk;
  };
  verified(&m.pairs[0][1]);
  m.pairs[0][1].nvlinks = 18;
  m.pairs[0][1].atomics = true;
  verified(&m.pairs[0][2]);
  m.pairs[0][2].atomics = true;  // atomics alone no longer mean NVLink
  verified(&m.pairs[1][2]);
  m.pairs[1][2].viaSwitch = true;
  m.gpus[1].nvml.switchLinks = 18;
  PeerLink l01 = decideLink(m, 0, 1), l02 = decideLink(m, 0, 2), l12 = decideLink(m, 1, 2), l10 = decideLink(m, 1, 0);
  EXPECT_EQ(l01.kind, LinkKind::kNvlink);
  EXPECT_EQ(l01.nvlinks, 18);
  EXPECT_TRUE(l01.atomics);
  EXPECT_EQ(l02.kind, LinkKind::kPcieP2p);
  EXPECT_EQ(l12.kind, LinkKind::kNvswitch);
  EXPECT_EQ(l12.nvlinks, 18);
  EXPECT_EQ(l10.kind, LinkKind::kPcie);  // driver says no
  EXPECT_NE(l10.why.find("cudaDeviceCanAccessPeer = 0"), std::string::npos);
  // Verified but the check process died later: still usable (its own checks passed).
  m.checkError = "the P2P check was killed after 8000 ms during the kernel check 2->0";
  EXPECT_EQ(decideLink(m, 0, 1).kind, LinkKind::kNvlink);
  m.pairs[2][0].canAccessPeer = true;  // offered, never checked: host-staged and reported
  PeerLink l20 = decideLink(m, 2, 0);
  EXPECT_EQ(l20.kind, LinkKind::kPcie);
  EXPECT_NE(l20.why.find("not data-verified"), std::string::npos) << l20.why;
  EXPECT_TRUE(pairBroken(m, 2, 0));
}

TEST(Diagnose, MulticastLineFollowsEnv) {
  ::setenv("NCCL_NVLS_ENABLE", "0", 1);
  EXPECT_EQ(multicastLine(true), "supported by the device, disabled by NCCL_NVLS_ENABLE=0");
  EXPECT_EQ(multicastLine(false), "not supported by the device");
}

}  // namespace
}  // namespace tpcomm
