// topology_doctor_test.cc: machine-probe fixtures (tools/fixtures/*.json, from make_fixtures.py)
// -> tpcomm-doctor's report: the words a user reads, the topology the selector gets, the exit
// code. One row per fixture: expected substrings and forbidden ones.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/params.h"
#include "doctor_report.h"
#include "topology/diagnose.h"

namespace tpcomm {
namespace {

MachineProbe load(const std::string& name) {
  std::ifstream f(std::string(TPCOMM_DOCTOR_FIXTURES) + "/" + name);
  std::stringstream ss;
  ss << f.rdbuf();
  MachineProbe m;
  EXPECT_EQ(MachineProbe::fromJson(ss.str(), &m), Status::kOk) << name;
  return m;
}

struct DoctorCase {
  const char* fixture;
  int exitCode;
  LinkKind link01;  // kSelf: no GPUs
  std::vector<std::string> has;
  std::vector<std::string> lacks;
};

const DoctorCase kCases[] = {
    {"h200x2_nvlink.json",
     0,
     LinkKind::kNvlink,
     {"GPU0 NVIDIA H200  cc 9.0  132 SMs  bus 0000:18:00.0  NUMA 0  PCIe gen5 x16",
      "multicast: supported by the device, disabled by NCCL_NVLS_ENABLE=0", "NV18 ok", "0->1: nvlink x18",
      "kernel check ok, copy check ok", "copy 397.0 GB/s", "flag round trip 1.36 us", "cuda_p2p     usable",
      "multicast    not usable: needs more than two ranks", "all-reduce algorithm per size (bf16, eager, 2 ranks)",
      "under CUDA graph capture", "NCCL_NVLS_ENABLE=0", "IOMMU: passthrough", "status: OK"},
     {"NV18 BAD", "problem"}},
    {"pcie_iommu_corrupt.json",
     2,
     LinkKind::kPcie,
     {"PIX BAD", "PIX ok",
      "P2P 0->1 corrupts data (kernel stores delivered wrong data, kernel: 262144 of 262144 words wrong, first at "
      "word 0: got 0x00000000, want 0x9e3779b9): IOMMU in translated mode and ACS redirect on bridge 0000:02:00.0, "
      "0000:02:01.0; boot with iommu=pt or disable ACS on bridge 0000:02:00.0 (setpci -s 0000:02:00.0 "
      "ECAP_ACS+0x6.w=0000)",
      "bridge 0000:02:00.0 ACS redirect ON (ctrl 0x001d: SV RR CR UF)",
      "cuda_p2p     not usable: P2P 0->1 corrupts data", "multicast: not supported by the device",
      "status: 1 problem(s)", "0->1: pcie, peer access yes"},
     {"status: OK", "1->0: pcie_p2p"}},
    {"h200x1_vm.json",
     0,
     LinkKind::kSelf,
     {"GPU0 NVIDIA H200  cc 9.0  132 SMs  bus 0000:00:06.0  NUMA unknown  PCIe gen5 x16",
      "multicast: not supported by the device", "pairs: none (one GPU)", "cuda_p2p     not usable: one GPU",
      "all-reduce algorithm per size (bf16, eager, 1 ranks)", "ring_nccl", "status: OK"},
     {"NUMA -1", "problem", "0->"}},
    {"no_gpu.json",
     0,
     LinkKind::kSelf,
     {"no GPUs: an NVIDIA driver is present but no GPU is visible to this process",
      "no CUDA-capable device is detected", "what works without a GPU: host ranks", "staged_host",
      "status: OK (no GPUs; host path only)", "NVML: NVML not available"},
     {"devices:", "problem"}},
    // No driver at all reads as such, not as "driver version is insufficient".
    {"no_driver.json",
     0,
     LinkKind::kSelf,
     {"no GPUs: no NVIDIA GPU or driver found", "what works without a GPU: host ranks", "the Qwen decoder on the CPU",
      "status: OK (no GPUs; host path only)"},
     {"devices:", "problem", "update the driver"}},
};

class DoctorFixture : public ::testing::TestWithParam<DoctorCase> {};

TEST_P(DoctorFixture, ReportWordsTopologyAndExitCode) {
  const DoctorCase& c = GetParam();
  ::setenv("NCCL_NVLS_ENABLE", "0", 1);
  ::unsetenv("TPCOMM_ALGO");
  reloadParams();
  MachineProbe m = load(c.fixture);
  ProbeSource src;
  src.how = "fixture";
  DoctorReport r = buildDoctorReport(m, src);
  EXPECT_EQ(r.exitCode, c.exitCode) << r.text;
  for (const std::string& s : c.has) EXPECT_NE(r.text.find(s), std::string::npos) << "missing '" << s << "' in:\n" << r.text;
  for (const std::string& s : c.lacks) EXPECT_EQ(r.text.find(s), std::string::npos) << "unexpected '" << s << "' in:\n" << r.text;
  nlohmann::json j = nlohmann::json::parse(r.json, nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["exit_code"].get<int>(), c.exitCode);
  EXPECT_EQ(j["problems"].size(), r.problems.size());
  if (c.link01 == LinkKind::kSelf) return;
  // The selector's view: both directions agree (weaker wins), and the doctor's JSON carries it.
  Topology t = machineTopology(m);
  ASSERT_EQ(t.validate(), Status::kOk);
  EXPECT_EQ(t.links[0][1].kind, c.link01);
  EXPECT_EQ(t.links[1][0].kind, c.link01);
  EXPECT_EQ(j["topology"]["links"][0][1]["kind"].get<std::string>(), linkKindName(c.link01));
  EXPECT_EQ(t.allPairsP2p(), c.link01 != LinkKind::kPcie);
  std::string mcWhy;
  EXPECT_FALSE(t.multicastUsable(&mcWhy));  // 2 ranks, and NCCL_NVLS_ENABLE=0: the gate stays closed
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DoctorFixture, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<DoctorCase>& i) {
                           std::string n = i.param.fixture;
                           return n.substr(0, n.find('.'));
                         });

// A rejected value is not shown as in force; the default is, with the rejected
// value and why beside it, and the report counts it as a problem (exit 2).
TEST(Doctor, RejectedValueIsShownBesideTheValueInForce) {
  ::setenv("TPCOMM_STAGED_CHUNK_BYTES", "5000", 1);
  ::setenv("TPCOMM_ALGO", "0-64K:nosuch", 1);
  reloadParams();
  int rejected = 0;
  const std::string t = paramsTable(&rejected);
  EXPECT_EQ(rejected, 2) << t;
  const size_t row = t.find("TPCOMM_STAGED_CHUNK_BYTES");
  ASSERT_NE(row, std::string::npos) << t;
  const std::string line = t.substr(row, t.find('\n', row) - row);
  EXPECT_NE(line.find("in force 1048576"), std::string::npos) << line;
  EXPECT_EQ(line.find("in force 5000"), std::string::npos) << line;
  EXPECT_NE(t.find("REJECTED TPCOMM_STAGED_CHUNK_BYTES='5000': expected a byte count in [4096, 67108864], a multiple "
                   "of 4096"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("REJECTED TPCOMM_ALGO='0-64K:nosuch': unknown algorithm 'nosuch'"), std::string::npos) << t;
  EXPECT_EQ(rejectedValues().size(), 2u);
  DoctorReport r = buildDoctorReport(load("no_gpu.json"), ProbeSource{});
  EXPECT_EQ(r.exitCode, 2) << r.text;
  EXPECT_NE(r.text.find("TPCOMM_STAGED_CHUNK_BYTES=5000 REJECTED (in force: the default 1048576"), std::string::npos)
      << r.text;
  ::unsetenv("TPCOMM_STAGED_CHUNK_BYTES");
  ::unsetenv("TPCOMM_ALGO");
  reloadParams();
  EXPECT_TRUE(rejectedValues().empty());
}

TEST(Doctor, ParamsTableListsTopologyParams) {
  ::setenv("TPCOMM_TOPO_TIMEOUT_MS", "1234", 1);
  reloadParams();
  std::string t = paramsTable();
  EXPECT_NE(t.find("TPCOMM_TOPO_CACHE"), std::string::npos) << t;
  EXPECT_NE(t.find("1234"), std::string::npos) << t;
  EXPECT_NE(t.find("(env)"), std::string::npos) << t;
  ::unsetenv("TPCOMM_TOPO_TIMEOUT_MS");
  reloadParams();
}

}  // namespace
}  // namespace tpcomm
