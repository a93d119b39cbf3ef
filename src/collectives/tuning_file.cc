// tuning_file.cc: see tuning_file.h.
#include "collectives/tuning_file.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "topology/json_fields.h"
#include "topology/topo_cache.h"

namespace tpcomm {

namespace jf = jsonfields;

namespace {

constexpr const char* kFormatName = "tpcomm-tune";
constexpr uint64_t kMaxRowBytes = uint64_t{1} << 40;

uint64_t fnv1a(uint64_t h, const std::string& s) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return (h ^ 0xff) * 1099511628211ull;  // a separator, so "ab"+"c" and "a"+"bc" differ
}

int dtypeBitsOf(DataType t) { return static_cast<int>(dataTypeSize(t) * 8); }

bool isHex16(const std::string& s) {
  return s.size() == 16 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// One table from JSON; throws JsonFieldError naming what is wrong.
TuningTable tableFromJson(const nlohmann::json& jt, size_t index, const std::vector<std::string>& known) {
  const std::string where = "tables[" + std::to_string(index) + "]";
  TuningTable t;
  t.fingerprint = jf::getString(jt, "fingerprint");
  if (!isHex16(t.fingerprint)) throw jf::JsonFieldError(where + ".fingerprint: expected 16 lowercase hex digits");
  t.ranks = static_cast<int>(jf::getInt(jt, "ranks", 0, 2, 1 << 20));
  if (t.ranks == 0) throw jf::JsonFieldError(where + ".ranks: missing");
  t.hostRanks = jf::getBool(jt, "host_ranks", false);
  const nlohmann::json& rows = jf::getArray(jt, "rows");
  if (rows.size() > kTuningMaxRows)
    throw jf::JsonFieldError(where + ".rows: " + std::to_string(rows.size()) + " rows, more than " +
                             std::to_string(kTuningMaxRows));
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::string rw = where + ".rows[" + std::to_string(i) + "]";
    TuningRow r;
    r.dtypeBits = static_cast<int>(jf::getInt(rows[i], "dtype_bits", 0, 16, 32));
    if (r.dtypeBits != 16 && r.dtypeBits != 32) throw jf::JsonFieldError(rw + ".dtype_bits: expected 16 or 32");
    r.bytes = static_cast<uint64_t>(jf::getInt(rows[i], "bytes", 0, 1, static_cast<int64_t>(kMaxRowBytes)));
    if (r.bytes == 0) throw jf::JsonFieldError(rw + ".bytes: missing");
    const nlohmann::json& times = jf::getObject(rows[i], "us");
    if (times.empty()) throw jf::JsonFieldError(rw + ".us: expected at least one algorithm's time");
    for (auto it = times.begin(); it != times.end(); ++it) {
      if (std::find(known.begin(), known.end(), it.key()) == known.end())
        throw jf::JsonFieldError(rw + ".us: unknown algorithm '" + it.key() + "'");
      const double us = jf::getDouble(times, it.key().c_str(), -1);
      if (!(us > 0) || us > kTuningMaxUs)
        throw jf::JsonFieldError(rw + ".us." + it.key() + ": expected a time in (0, 1e9] microseconds");
      r.timesUs.emplace_back(it.key(), us);
    }
    for (const TuningRow& prev : t.rows)
      if (prev.dtypeBits == r.dtypeBits && prev.bytes == r.bytes)
        throw jf::JsonFieldError(rw + ": duplicate row (" + std::to_string(r.dtypeBits) + "-bit, " +
                                 std::to_string(r.bytes) + " bytes)");
    t.rows.push_back(std::move(r));
  }
  return t;
}

}  // namespace

double TuningRow::timeOf(const std::string& algo) const {
  for (const auto& [name, us] : timesUs)
    if (name == algo) return us;
  return -1;
}

const TuningRow* TuningTable::rowFor(DataType dtype, uint64_t bytes) const {
  const int bits = dtypeBitsOf(dtype);
  const TuningRow* best = nullptr;
  uint64_t lo = UINT64_MAX, hi = 0;
  double bestDist = 0;
  const double lb = std::log2(static_cast<double>(std::max<uint64_t>(bytes, 1)));
  for (const TuningRow& r : rows) {
    if (r.dtypeBits != bits) continue;
    lo = std::min(lo, r.bytes);
    hi = std::max(hi, r.bytes);
    const double d = std::fabs(std::log2(static_cast<double>(r.bytes)) - lb);
    if (!best || d < bestDist || (d == bestDist && r.bytes < best->bytes)) {
      best = &r;
      bestDist = d;
    }
  }
  // bytes * 2 < lo, written so that no bytes overflows; hi <= 2^40, so hi * 2 cannot.
  if (!best || (bytes < lo && lo - bytes > bytes) || bytes > hi * 2) return nullptr;
  return best;
}

double TuningTable::measuredUs(const AlgoQuery& q, const std::string& algo) const {
  if (q.kind != CollKind::kAllReduce || q.capturing) return -1;
  const TuningRow* r = rowFor(q.dtype, q.bytes);
  return r ? r->timeOf(algo) : -1;
}

const TuningTable* TuningFile::find(const std::string& fingerprint) const {
  for (const TuningTable& t : tables)
    if (t.fingerprint == fingerprint) return &t;
  return nullptr;
}

std::string TuningFile::toJson() const {
  nlohmann::json j;
  j["format"] = kFormatName;
  j["format_version"] = kFormatVersion;
  j["tpcomm_version"] = tpcommVersion;
  j["driver"] = driver;
  j["created"] = created;
  j["tables"] = nlohmann::json::array();
  for (const TuningTable& t : tables) {
    nlohmann::json jt = {{"fingerprint", t.fingerprint}, {"ranks", t.ranks}, {"host_ranks", t.hostRanks}};
    jt["rows"] = nlohmann::json::array();
    for (const TuningRow& r : t.rows) {
      nlohmann::json us = nlohmann::json::object();
      for (const auto& [name, v] : r.timesUs) us[name] = v;
      jt["rows"].push_back({{"dtype_bits", r.dtypeBits}, {"bytes", r.bytes}, {"us", us}});
    }
    j["tables"].push_back(jt);
  }
  return j.dump(1) + "\n";
}

namespace {

// The parser without the error state: create reads the file on every rank and warns once
// itself, where setError would log a warning per rank.
bool parseTuningFile(const std::string& text, const std::vector<std::string>& knownAlgos, TuningFile* out,
                     std::string* why) {
  if (text.size() > kTuningFileMaxBytes) {
    *why = std::to_string(text.size()) + " bytes, more than " + std::to_string(kTuningFileMaxBytes);
    return false;
  }
  if (jf::jsonDepth(text) > 8) {
    *why = "nested deeper than the format (4 levels)";
    return false;
  }
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) {
    *why = "not valid JSON (truncated or damaged)";
    return false;
  }
  TuningFile f;
  try {
    if (jf::getString(j, "format") != kFormatName) throw jf::JsonFieldError("format: expected \"tpcomm-tune\"");
    const int64_t v = jf::getInt(j, "format_version", 0);
    if (v != TuningFile::kFormatVersion)
      throw jf::JsonFieldError("format_version " + std::to_string(v) + ": this tpcomm reads version " +
                               std::to_string(TuningFile::kFormatVersion));
    f.tpcommVersion = jf::getString(j, "tpcomm_version");
    f.driver = jf::getString(j, "driver");
    f.created = jf::getString(j, "created");
    const nlohmann::json& tables = jf::getArray(j, "tables");
    if (tables.size() > kTuningMaxTables)
      throw jf::JsonFieldError("tables: " + std::to_string(tables.size()) + ", more than " +
                               std::to_string(kTuningMaxTables));
    for (size_t i = 0; i < tables.size(); ++i) {
      TuningTable t = tableFromJson(tables[i], i, knownAlgos);
      if (f.find(t.fingerprint))
        throw jf::JsonFieldError("tables[" + std::to_string(i) + "]: a second table for fingerprint " + t.fingerprint);
      f.tables.push_back(std::move(t));
    }
  } catch (const std::exception& e) {  // JsonFieldError, or nlohmann's on a shape we did not foresee
    *why = e.what();
    return false;
  }
  *out = std::move(f);
  return true;
}

}  // namespace

Status TuningFile::fromJson(const std::string& text, const std::vector<std::string>& knownAlgos, TuningFile* out) {
  std::string why;
  if (!parseTuningFile(text, knownAlgos, out, &why)) return TPCOMM_INVALID("tuning file: %s", why.c_str());
  return Status::kOk;
}

std::string tuningFilePath(const std::string& cacheDir) { return cacheDir + "/tune.json"; }

std::string topologyFingerprint(const Topology& topo) {
  uint64_t h = fnv1a(1469598103934665603ull, "tpcomm-topology-v1 " + std::to_string(topo.nRanks()));
  for (const RankDevice& d : topo.ranks)
    h = fnv1a(h, d.cudaDevice < 0 ? std::string("host")
                                  : d.uuid + "|" + d.name + "|" + std::to_string(d.ccMajor) + "." +
                                        std::to_string(d.ccMinor) + "|" + std::to_string(d.smCount));
  for (size_t a = 0; a < topo.links.size(); ++a)
    for (size_t b = 0; b < topo.links[a].size(); ++b) {
      if (a == b) continue;  // the diagonal is "self" however it was filled
      const PeerLink& l = topo.links[a][b];
      h = fnv1a(h, std::to_string(static_cast<int>(l.kind)) + "," + std::to_string(l.nvlinks) + "," +
                       (l.p2pVerified ? "1" : "0"));
    }
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

Status loadTuningFile(const std::string& path, const std::string& tpcommVersion, const std::string& driver,
                      const std::vector<std::string>& knownAlgos, TuningFile* out, std::string* why) {
  std::string text;
  Status rs = readCacheFile(path, &text, why);  // regular file, non-blocking open, size cap
  if (rs == Status::kNotSupported) return rs;
  if (rs != Status::kOk) return rs;
  if (text.size() > kTuningFileMaxBytes) {
    *why = "it has " + std::to_string(text.size()) + " bytes, more than the " + std::to_string(kTuningFileMaxBytes) +
           " a tuning file can have";
    return Status::kInvalidArgument;
  }
  TuningFile f;
  if (!parseTuningFile(text, knownAlgos, &f, why)) return Status::kInvalidArgument;
  if (f.tpcommVersion != tpcommVersion) {
    *why = "stale: measured by tpcomm " + f.tpcommVersion + ", this is " + tpcommVersion;
    return Status::kInvalidArgument;
  }
  if (f.driver != driver) {
    *why = "stale: measured with NVIDIA driver '" + f.driver + "', this machine has '" + driver + "'";
    return Status::kInvalidArgument;
  }
  *out = std::move(f);
  return Status::kOk;
}

Status storeTuningFile(const std::string& path, const TuningFile& file) {
  return writeFileAtomically(path, file.toJson());
}

}  // namespace tpcomm
