// Fault injection: a corrupt topology cache file. Whatever sits at the cache
// path is a cache miss with a reason (and a warning), never an exception, an abort, a hang or
// an unbounded read: malformed JSON, the wrong types, null, floats in integer fields, deep
// nesting, a huge file, a directory, a FIFO.
#include <gtest/gtest.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <string>

#include "topology/topo_cache.h"
#include "topology/topology.h"

namespace tpcomm {
namespace {

int openFds() {  // file descriptors of this process (a leaked one would show)
  int n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (readdir(d)) ++n;
    closedir(d);
  }
  return n;
}

std::string scratchDir() {
  char tmpl[] = "/tmp/tpcomm-fault-cache-XXXXXX";
  const char* d = mkdtemp(tmpl);
  return d ? d : "/tmp";
}

const std::string kHead = R"({"format":"tpcomm-machine-probe-1","driver_version":"1","complete":true,)";

struct BadCache {
  const char* what;
  std::string text;
};

std::vector<BadCache> badCaches() {
  return {
      {"format is a number", R"({"format":1})"},
      {"format is null", R"({"format":null})"},
      {"null", "null"},
      {"an array", "[]"},
      {"empty file", ""},
      {"not JSON", "\x01\x02garbage{"},
      {"truncated", kHead + R"("gpus":[{"index":0)"},
      {"gpus is an object", kHead + R"("gpus":{}})"},
      {"a gpu is a number", kHead + R"("gpus":[1]})"},
      {"float in an int field", kHead + R"("gpus":[{"index":1.21e33}],"pairs":[[{}]]})"},
      {"negative float in an int field", kHead + R"("cuda_driver_api":-1e300})"},
      {"fraction in an int field", kHead + R"("cuda_driver_api":1.5})"},
      {"int beyond int32", kHead + R"("cuda_driver_api":4294967296})"},
      {"string in an int field", kHead + R"("cuda_driver_api":"13000"})"},
      {"string in a bool field", kHead + R"("measured":"yes"})"},
      {"number in a string field", kHead + R"("cmdline":7})"},
      {"pci is an array", kHead + R"("gpus":[{"pci":[]}],"pairs":[[{}]]})"},
      {"bridge acs is a string", kHead + R"("gpus":[{"pci":{"bridges":[{"acs":"x"}]}}],"pairs":[[{}]]})"},
      {"acs read out of range", kHead + R"("gpus":[{"pci":{"bridges":[{"acs":{"read":99}}]}}],"pairs":[[{}]]})"},
      {"remote bus ids not strings", kHead + R"("gpus":[{"nvml":{"remote_bus_ids":[1,2]}}],"pairs":[[{}]]})"},
      {"pairs row is a number", kHead + R"("gpus":[{}],"pairs":[1]})"},
      {"pairs cell is null", kHead + R"("gpus":[{}],"pairs":[[null]]})"},
      {"pairs not square", kHead + R"("gpus":[{},{}],"pairs":[[{}],[{},{}]]})"},
      {"infinite double", kHead + R"("gpus":[{}],"pairs":[[{"ce_gbs":1e999}]]})"},
      {"deep nesting", std::string(100000, '[') + std::string(100000, ']')},
      {"deep nesting in a field", kHead + R"("x":)" + std::string(5000, '[') + std::string(5000, ']') + "}"},
  };
}

TEST(CorruptCache, EveryBadFileIsAMissWithAReason) {
  const std::string dir = scratchDir(), path = dir + "/topo-bad.json";
  const int fdsBefore = openFds();
  for (const BadCache& c : badCaches()) {
    SCOPED_TRACE(c.what);
    {
      std::ofstream f(path, std::ios::binary | std::ios::trunc);
      f << c.text;
    }
    MachineProbe m;
    std::string why;
    Status s = loadTopoCache(path, "1", 0, "", {}, &m, &why);  // an exception fails the test
    EXPECT_EQ(s, Status::kNotSupported);
    EXPECT_FALSE(why.empty());
    // The parsers directly: kInvalidArgument, never a throw.
    EXPECT_NE(MachineProbe::fromJson(c.text, &m), Status::kOk);
    Topology t;
    EXPECT_NE(Topology::fromJson(c.text, &t), Status::kOk);
  }
  EXPECT_EQ(openFds(), fdsBefore) << "a file descriptor leaked";
  std::remove(path.c_str());
  rmdir(dir.c_str());
}

// Floats in the Topology JSON's integer fields (UBSan: float-cast-overflow before the fix).
TEST(CorruptCache, TopologyJsonRejectsFloatsInIntegerFields) {
  Topology t = Topology::uniform(2, LinkKind::kNvlink, 4);
  std::string text = t.toJson();
  std::string bad = text;
  size_t at = bad.find("\"cc_major\": 9");
  ASSERT_NE(at, std::string::npos) << text;
  bad.replace(at, std::string("\"cc_major\": 9").size(), "\"cc_major\": 1.21e33");
  Topology out;
  EXPECT_EQ(Topology::fromJson(bad, &out), Status::kInvalidArgument);
  EXPECT_EQ(Topology::fromJson(text, &out), Status::kOk);
}

TEST(CorruptCache, OversizedFileIsNotRead) {
  const std::string dir = scratchDir(), path = dir + "/topo-big.json";
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << kHead;
    f.seekp(static_cast<std::streamoff>(kTopoCacheMaxBytes) + 10);
    f << "}";
  }
  MachineProbe m;
  std::string why;
  EXPECT_EQ(loadTopoCache(path, "1", 0, "", {}, &m, &why), Status::kNotSupported);
  EXPECT_NE(why.find("more than"), std::string::npos) << why;
  std::remove(path.c_str());
  rmdir(dir.c_str());
}

TEST(CorruptCache, DirectoryAtThePathIsAMiss) {
  const std::string dir = scratchDir(), path = dir + "/topo-dir.json";
  ASSERT_EQ(mkdir(path.c_str(), 0700), 0);
  MachineProbe m;
  std::string why;
  EXPECT_EQ(loadTopoCache(path, "1", 0, "", {}, &m, &why), Status::kNotSupported);
  EXPECT_NE(why.find("not a regular file"), std::string::npos) << why;
  rmdir(path.c_str());
  rmdir(dir.c_str());
}

// A FIFO with no writer: a blocking open never returns (the doctor hung on it).
TEST(CorruptCache, FifoAtThePathDoesNotHang) {
  const std::string dir = scratchDir(), path = dir + "/topo-fifo.json";
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  const int fdsBefore = openFds();
  auto result = std::async(std::launch::async, [&] {
    MachineProbe m;
    std::string why;
    Status s = loadTopoCache(path, "1", 0, "", {}, &m, &why);
    return std::make_pair(s, why);
  });
  if (result.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    ADD_FAILURE() << "loadTopoCache blocked on a FIFO for 10 s";
    std::fflush(nullptr);
    std::_Exit(1);  // the blocked thread cannot be joined
  }
  auto [s, why] = result.get();
  EXPECT_EQ(openFds(), fdsBefore) << "the FIFO's descriptor leaked";
  EXPECT_EQ(s, Status::kNotSupported);
  EXPECT_NE(why.find("not a regular file"), std::string::npos) << why;
  std::remove(path.c_str());
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace tpcomm
