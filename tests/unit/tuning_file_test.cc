// The tuning file (collectives/tuning_file.h): a good file round-trips and answers lookups; a
// stale one (other tpcomm version or driver) and every corrupt or hostile one is refused as a
// whole with a reason naming what is wrong. To test a new way a file can be wrong, add a row to
// kBadFiles: a mutation of the good file and the words the reason must contain.
#include "collectives/tuning_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tpcomm/status.h"

namespace tpcomm {
namespace {

const std::vector<std::string> kKnown = {"lamport_p2p", "oneshot_p2p", "twoshot_p2p", "ring_nccl", "staged_host"};

TuningFile goodFile() {
  TuningFile f;
  f.tpcommVersion = "9.8.7";
  f.driver = "580.159.04";
  f.created = "2026-01-01T00:00:00";
  TuningTable t;
  t.fingerprint = "0123456789abcdef";
  t.ranks = 2;
  for (uint64_t bytes : {uint64_t{1024}, uint64_t{4096}, uint64_t{16384}}) {
    TuningRow r;
    r.dtypeBits = 16;
    r.bytes = bytes;
    r.timesUs = {{"lamport_p2p", 3.0 + bytes / 1024.0}, {"twoshot_p2p", 12.5}};
    t.rows.push_back(r);
  }
  TuningRow f32;
  f32.dtypeBits = 32;
  f32.bytes = 4096;
  f32.timesUs = {{"oneshot_p2p", 7.25}};
  t.rows.push_back(f32);
  f.tables.push_back(t);
  return f;
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/tpcomm-tune-test-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }
  const std::string& path() const { return path_; }
  std::string write(const std::string& name, const std::string& text) const {
    std::string p = path_ + "/" + name;
    std::ofstream(p) << text;
    return p;
  }

 private:
  std::string path_;
};

TEST(TuningFile, RoundTripsAndAnswersLookups) {
  TuningFile back;
  ASSERT_EQ(TuningFile::fromJson(goodFile().toJson(), kKnown, &back), Status::kOk) << lastErrorMessage();
  ASSERT_EQ(back.tables.size(), 1u);
  EXPECT_EQ(back.tpcommVersion, "9.8.7");
  EXPECT_EQ(back.driver, "580.159.04");
  const TuningTable* t = back.find("0123456789abcdef");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(back.find("fedcba9876543210"), nullptr);
  EXPECT_EQ(t->ranks, 2);
  ASSERT_EQ(t->rows.size(), 4u);
  EXPECT_DOUBLE_EQ(t->rows[1].timeOf("lamport_p2p"), 7.0);
  EXPECT_DOUBLE_EQ(t->rows[3].timeOf("oneshot_p2p"), 7.25);
  EXPECT_LT(t->rows[3].timeOf("lamport_p2p"), 0);

  // Nearest measured size on a log scale, within a factor of 2 of the sweep's ends.
  struct Case {
    DataType dt;
    uint64_t bytes;
    uint64_t rowBytes;  // 0: no row
  };
  for (const Case& c : std::vector<Case>{{DataType::kBF16, 1024, 1024},
                                         {DataType::kF16, 2047, 1024},
                                         {DataType::kBF16, 2048, 1024},  // tie: the smaller
                                         {DataType::kBF16, 2049, 4096},
                                         {DataType::kBF16, 512, 1024},
                                         {DataType::kBF16, 511, 0},
                                         {DataType::kBF16, 32768, 16384},
                                         {DataType::kBF16, 32769, 0},
                                         {DataType::kF32, 4096, 4096},
                                         {DataType::kF32, 8192, 4096},
                                         {DataType::kF32, 8193, 0}}) {
    const TuningRow* r = t->rowFor(c.dt, c.bytes);
    EXPECT_EQ(r ? r->bytes : 0, c.rowBytes) << dataTypeName(c.dt) << " " << c.bytes << " bytes";
  }
  // Only eager all-reduces were measured.
  AlgoQuery q{CollKind::kAllReduce, DataType::kBF16, ReduceOp::kMax, 4096, false};
  EXPECT_DOUBLE_EQ(t->measuredUs(q, "lamport_p2p"), 7.0);
  q.capturing = true;
  EXPECT_LT(t->measuredUs(q, "lamport_p2p"), 0);
  q.capturing = false;
  q.kind = CollKind::kReduceScatter;
  EXPECT_LT(t->measuredUs(q, "lamport_p2p"), 0);
}

struct BadFile {
  const char* name;
  std::function<void(nlohmann::json&)> mutate;
  const char* reason;  // must appear in the error
};

const BadFile kBadFiles[] = {
    {"wrong format name", [](nlohmann::json& j) { j["format"] = "nccl-tune"; }, "format"},
    {"future format version", [](nlohmann::json& j) { j["format_version"] = 2; }, "format_version 2"},
    {"format version as text", [](nlohmann::json& j) { j["format_version"] = "1"; }, "format_version"},
    {"tables not an array", [](nlohmann::json& j) { j["tables"] = 7; }, "tables"},
    {"ranks as text", [](nlohmann::json& j) { j["tables"][0]["ranks"] = "two"; }, "ranks"},
    {"ranks missing", [](nlohmann::json& j) { j["tables"][0].erase("ranks"); }, "ranks"},
    {"ranks huge", [](nlohmann::json& j) { j["tables"][0]["ranks"] = 1.21e33; }, "ranks"},
    {"bad fingerprint", [](nlohmann::json& j) { j["tables"][0]["fingerprint"] = "../../etc"; }, "fingerprint"},
    {"dtype 8 bits", [](nlohmann::json& j) { j["tables"][0]["rows"][0]["dtype_bits"] = 8; }, "dtype_bits"},
    {"negative bytes", [](nlohmann::json& j) { j["tables"][0]["rows"][0]["bytes"] = -4; }, "bytes"},
    {"fractional bytes", [](nlohmann::json& j) { j["tables"][0]["rows"][0]["bytes"] = 1.5; }, "bytes"},
    {"negative time", [](nlohmann::json& j) { j["tables"][0]["rows"][0]["us"]["lamport_p2p"] = -3.0; }, "lamport_p2p"},
    {"zero time", [](nlohmann::json& j) { j["tables"][0]["rows"][0]["us"]["twoshot_p2p"] = 0; }, "twoshot_p2p"},
    {"huge time", [](nlohmann::json& j) { j["tables"][0]["rows"][0]["us"]["twoshot_p2p"] = 1e300; }, "twoshot_p2p"},
    {"time as text", [](nlohmann::json& j) { j["tables"][0]["rows"][0]["us"]["twoshot_p2p"] = "fast"; }, "twoshot_p2p"},
    {"time null", [](nlohmann::json& j) { j["tables"][0]["rows"][0]["us"]["twoshot_p2p"] = nullptr; }, "twoshot_p2p"},
    {"unknown algorithm", [](nlohmann::json& j) { j["tables"][0]["rows"][0]["us"]["warp_drive"] = 1.0; },
     "unknown algorithm 'warp_drive'"},
    {"no times", [](nlohmann::json& j) { j["tables"][0]["rows"][0]["us"] = nlohmann::json::object(); }, "us"},
    {"times not an object", [](nlohmann::json& j) { j["tables"][0]["rows"][0]["us"] = nlohmann::json::array({1, 2}); },
     "us"},
    {"duplicate row", [](nlohmann::json& j) { j["tables"][0]["rows"].push_back(j["tables"][0]["rows"][1]); },
     "duplicate row"},
    {"duplicate table", [](nlohmann::json& j) { j["tables"].push_back(j["tables"][0]); }, "second table"},
    {"too many rows",
     [](nlohmann::json& j) {
       nlohmann::json rows = nlohmann::json::array();
       for (int i = 0; i < 1100; ++i)
         rows.push_back({{"dtype_bits", 16}, {"bytes", i + 1}, {"us", {{"lamport_p2p", 1.0}}}});
       j["tables"][0]["rows"] = rows;
     },
     "more than 1024"},
    {"row not an object", [](nlohmann::json& j) { j["tables"][0]["rows"][0] = 5; }, "object"},
};

TEST(TuningFile, RefusesCorruptAndHostileFiles) {
  const nlohmann::json good = nlohmann::json::parse(goodFile().toJson());
  for (const BadFile& b : kBadFiles) {
    nlohmann::json j = good;
    b.mutate(j);
    TuningFile out;
    out.driver = "untouched";
    EXPECT_EQ(TuningFile::fromJson(j.dump(), kKnown, &out), Status::kInvalidArgument) << b.name;
    EXPECT_NE(std::string(lastErrorMessage()).find(b.reason), std::string::npos)
        << b.name << ": " << lastErrorMessage();
    EXPECT_EQ(out.driver, "untouched") << b.name << ": a refused file must leave the output alone";
  }
  // Text that is not the format at all.
  const std::string text = goodFile().toJson();
  for (const std::string& bad : {text.substr(0, text.size() / 2), std::string(""), std::string("[1,2,3]"),
                                 std::string("{\"format\": \"tpcomm-tune\", \"tables\": [1e999]}"),
                                 std::string(200, '[') + std::string(200, ']')}) {
    TuningFile out;
    EXPECT_EQ(TuningFile::fromJson(bad, kKnown, &out), Status::kInvalidArgument) << bad.substr(0, 60);
  }
}

TEST(TuningFile, LoadChecksKeysAndRefusesHostileFiles) {
  TempDir dir;
  const std::string path = tuningFilePath(dir.path());
  EXPECT_EQ(path, dir.path() + "/tune.json");
  TuningFile out;
  std::string why;
  EXPECT_EQ(loadTuningFile(path, "9.8.7", "580.159.04", kKnown, &out, &why), Status::kNotSupported);

  ASSERT_EQ(storeTuningFile(path, goodFile()), Status::kOk) << lastErrorMessage();
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "the tuning file is the user's own";
  ASSERT_EQ(loadTuningFile(path, "9.8.7", "580.159.04", kKnown, &out, &why), Status::kOk) << why;
  EXPECT_EQ(out.tables.size(), 1u);

  // Stale: another tpcomm or another driver.
  EXPECT_EQ(loadTuningFile(path, "9.8.8", "580.159.04", kKnown, &out, &why), Status::kInvalidArgument);
  EXPECT_NE(why.find("stale: measured by tpcomm 9.8.7, this is 9.8.8"), std::string::npos) << why;
  EXPECT_EQ(loadTuningFile(path, "9.8.7", "590.1", kKnown, &out, &why), Status::kInvalidArgument);
  EXPECT_NE(why.find("driver '580.159.04'"), std::string::npos) << why;

  // Truncated on disk.
  const std::string text = goodFile().toJson();
  dir.write("tune.json", text.substr(0, text.size() - 20));
  EXPECT_EQ(loadTuningFile(path, "9.8.7", "580.159.04", kKnown, &out, &why), Status::kInvalidArgument);
  EXPECT_NE(why.find("not valid JSON"), std::string::npos) << why;

  // Huge: refused by its size, before anything is parsed.
  {
    std::ofstream f(path, std::ios::trunc);
    f << text;
    f << std::string(kTuningFileMaxBytes, ' ');
  }
  EXPECT_EQ(loadTuningFile(path, "9.8.7", "580.159.04", kKnown, &out, &why), Status::kInvalidArgument);
  EXPECT_NE(why.find("bytes"), std::string::npos) << why;

  // A FIFO in its place must not block the open; a directory is not a file.
  std::remove(path.c_str());
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  EXPECT_EQ(loadTuningFile(path, "9.8.7", "580.159.04", kKnown, &out, &why), Status::kInvalidArgument);
  EXPECT_NE(why.find("not a regular file"), std::string::npos) << why;
  std::remove(path.c_str());
  ASSERT_EQ(mkdir(path.c_str(), 0700), 0);
  EXPECT_EQ(loadTuningFile(path, "9.8.7", "580.159.04", kKnown, &out, &why), Status::kInvalidArgument);
  rmdir(path.c_str());

  // The store replaces atomically and leaves no temp file behind.
  ASSERT_EQ(storeTuningFile(path, goodFile()), Status::kOk);
  ASSERT_EQ(storeTuningFile(path, goodFile()), Status::kOk);
  EXPECT_EQ(std::system(("test $(ls -A '" + dir.path() + "' | wc -l) -eq 1").c_str()), 0);
}

TEST(TuningFile, FingerprintFollowsLinksAndGpusNotProcesses) {
  const std::string h2 = topologyFingerprint(Topology::host(2, true));
  EXPECT_EQ(h2.size(), 16u);
  EXPECT_EQ(h2, topologyFingerprint(Topology::host(2, false))) << "threads or processes run the same paths";
  EXPECT_NE(h2, topologyFingerprint(Topology::host(3, true)));
  Topology nv = Topology::uniform(2, LinkKind::kNvlink, 18);
  nv.ranks[0].uuid = "GPU-a";
  nv.ranks[1].uuid = "GPU-b";
  const std::string base = topologyFingerprint(nv);
  EXPECT_NE(base, h2);
  Topology fewer = nv;
  fewer.links[0][1].nvlinks = fewer.links[1][0].nvlinks = 12;
  EXPECT_NE(topologyFingerprint(fewer), base);
  Topology pcie = nv;
  pcie.links[0][1].kind = pcie.links[1][0].kind = LinkKind::kPcieP2p;
  EXPECT_NE(topologyFingerprint(pcie), base);
  Topology other = nv;
  other.ranks[1].uuid = "GPU-c";
  EXPECT_NE(topologyFingerprint(other), base) << "another GPU";
  Topology moved = nv;
  moved.ranks[1].busId = "0000:99:00.0";
  moved.ranks[1].numaNode = 3;
  EXPECT_EQ(topologyFingerprint(moved), base) << "the UUID names the GPU";
}

}  // namespace
}  // namespace tpcomm
