// topology_cache_test.cc: the per-user probe cache: a hit needs the same driver, kernel command
// line and every requested GPU (same UUID at the same bus id); results that are not definitive
// are never served; the MachineProbe JSON round trip is exact.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "topology/topo_cache.h"

namespace tpcomm {
namespace {

MachineProbe sample() {
  MachineProbe m;
  m.driverVersion = "580.159.04";
  m.cudaDriverApi = 13000;
  m.cmdline = "BOOT_IMAGE=/vmlinuz iommu=pt";
  m.complete = true;
  m.nvmlLoaded = true;
  m.iommu.mode = IommuMode::kPassthrough;
  m.iommu.evidence = "group type identity";
  for (int i = 0; i < 2; ++i) {
    GpuFacts g;
    g.index = i;
    g.name = "NVIDIA H200";
    g.busId = i ? "0000:3a:00.0" : "0000:18:00.0";
    g.uuid = "GPU-" + std::to_string(i);
    g.ccMajor = 9;
    g.smCount = 132;
    g.multicastSupported = true;
    g.pci.found = true;
    g.pci.bridges.push_back({"0000:17:01.0", {}});
    g.pci.bridges.back().acs.read = AcsState::Read::kRead;
    g.pci.bridges.back().acs.control = 0x1d;
    g.nvml.activeLinks = 18;
    g.nvml.remoteBusIds.assign(18, i ? "0000:18:00.0" : "0000:3a:00.0");
    m.gpus.push_back(g);
  }
  m.pairs.assign(2, std::vector<PairFacts>(2));
  for (int a = 0; a < 2; ++a) {
    PairFacts& p = m.pairs[a][1 - a];
    p.canAccessPeer = p.atomics = true;
    p.nvlinks = 18;
    p.perfRank = 0;
    p.pciPath = "SYS";
    p.kernelCheck = p.copyCheck = P2pCheck::kOk;
    p.ceGBs = 397.25;
  }
  return m;
}

TEST(TopoCache, JsonRoundTripIsExact) {
  MachineProbe m = sample(), back;
  ASSERT_EQ(MachineProbe::fromJson(m.toJson(), &back), Status::kOk);
  EXPECT_EQ(back.toJson(), m.toJson());
  EXPECT_EQ(back.gpus[1].pci.bridges[0].acs.control, 0x1du);
  EXPECT_TRUE(back.gpus[1].pci.bridges[0].acs.redirects());
  EXPECT_EQ(back.pairs[0][1].kernelCheck, P2pCheck::kOk);
  EXPECT_NE(MachineProbe::fromJson("{", &back), Status::kOk);
  EXPECT_NE(MachineProbe::fromJson("{\"format\":\"other\"}", &back), Status::kOk);
  EXPECT_NE(MachineProbe::fromJson("{\"format\":\"tpcomm-machine-probe-1\",\"gpus\":[{}],\"pairs\":[]}", &back), Status::kOk);
  EXPECT_NE(MachineProbe::fromJson("{\"format\":\"tpcomm-machine-probe-1\",\"driver_version\":7}", &back), Status::kOk);
  std::string bad = m.toJson();
  bad.replace(bad.find("\"kernel_check\":\"ok\""), 19, "\"kernel_check\":\"meh\"");
  EXPECT_NE(MachineProbe::fromJson(bad, &back), Status::kOk);
}

TEST(TopoCache, HitAndEveryKindOfMiss) {
  std::string dir = ::testing::TempDir() + "/tpcomm-cache-test";
  MachineProbe m = sample();
  std::string path = topoCachePath(dir, m.driverVersion, m.cudaDriverApi, m.cmdline);
  EXPECT_NE(path, topoCachePath(dir, m.driverVersion, m.cudaDriverApi, m.cmdline + " intel_iommu=on"));
  std::remove(path.c_str());
  std::vector<GpuKey> want = {{"GPU-1", "0000:3A:00.0"}};
  MachineProbe out;
  std::string why;
  EXPECT_EQ(loadTopoCache(path, m.driverVersion, 13000, m.cmdline, want, &out, &why), Status::kNotSupported);
  EXPECT_NE(why.find("no cache file"), std::string::npos);
  ASSERT_EQ(storeTopoCache(path, m), Status::kOk);
  ASSERT_EQ(loadTopoCache(path, m.driverVersion, 13000, m.cmdline, want, &out, &why), Status::kOk) << why;
  EXPECT_EQ(out.toJson(), m.toJson());
  struct Miss {
    std::string driver;
    int api;
    std::string cmdline;
    std::vector<GpuKey> want;
    const char* why;
  } misses[] = {
      {"580.0", 13000, m.cmdline, want, "driver changed"},
      {m.driverVersion, 12080, m.cmdline, want, "driver changed"},
      {m.driverVersion, 13000, "iommu=off", want, "kernel command line changed"},
      {m.driverVersion, 13000, m.cmdline, {{"GPU-9", "0000:3a:00.0"}}, "changed (GPU-1 -> GPU-9)"},
      {m.driverVersion, 13000, m.cmdline, {{"GPU-7", "0000:99:00.0"}}, "GPU 0000:99:00.0 not in the cache"},
  };
  for (const Miss& x : misses) {
    why.clear();
    EXPECT_EQ(loadTopoCache(path, x.driver, x.api, x.cmdline, x.want, &out, &why), Status::kNotSupported) << x.why;
    EXPECT_NE(why.find(x.why), std::string::npos) << why;
  }
  // A hung check is not definitive: such a file is never served.
  MachineProbe hung = sample();
  hung.pairs[0][1].kernelCheck = P2pCheck::kHang;
  EXPECT_FALSE(hung.cacheable());
  ASSERT_EQ(storeTopoCache(path, hung), Status::kOk);
  EXPECT_EQ(loadTopoCache(path, m.driverVersion, 13000, m.cmdline, want, &out, &why), Status::kNotSupported);
  std::ofstream(path) << "not json";
  EXPECT_EQ(loadTopoCache(path, m.driverVersion, 13000, m.cmdline, want, &out, &why), Status::kNotSupported);
  EXPECT_NE(why.find("unreadable"), std::string::npos);
}

TEST(TopoCache, DirectoryFromEnvironment) {
  ::setenv("XDG_CACHE_HOME", "/tmp/xdg-test", 1);
  EXPECT_EQ(topoCacheDir(), "/tmp/xdg-test/tpcomm");
  ::unsetenv("XDG_CACHE_HOME");
  ::setenv("HOME", "/home/someone", 1);
  EXPECT_EQ(topoCacheDir(), "/home/someone/.cache/tpcomm");
  EXPECT_EQ(storeTopoCache("/proc/definitely/not/writable/x.json", sample()), Status::kSystemError);
}

}  // namespace
}  // namespace tpcomm
