#include "collectives/algo_override.h"

#include <algorithm>
#include <sstream>

#include "common/error.h"
#include "common/params.h"

namespace tpcomm {
namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

std::vector<std::string> split(const std::string& s, char sep) {
  // An empty string is one empty item (so "^" and "0-64K:" reach the empty-name check).
  if (s.empty()) return {""};
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) out.push_back(trim(item));
  if (!s.empty() && s.back() == sep) out.push_back("");
  return out;
}

Status checkName(const std::string& name, const std::vector<std::string>& known, const std::string& text) {
  if (name.empty()) return TPCOMM_INVALID("TPCOMM_ALGO='%s': empty algorithm name", text.c_str());
  if (std::find(known.begin(), known.end(), name) != known.end()) return Status::kOk;
  std::string list;
  for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
  return TPCOMM_INVALID("TPCOMM_ALGO='%s': unknown algorithm '%s' (known: %s)", text.c_str(), name.c_str(),
                        list.c_str());
}

Status parseBound(const std::string& s, const std::string& text, uint64_t* out) {
  if (s == "inf" || s == "INF") {
    *out = UINT64_MAX;
    return Status::kOk;
  }
  if (!parseSize(s, out))
    return TPCOMM_INVALID("TPCOMM_ALGO='%s': size '%s' is not a byte count (e.g. 0, 4096, 64K, 2M, 1G, inf)",
                          text.c_str(), s.c_str());
  return Status::kOk;
}

}  // namespace

std::vector<std::string> AlgoOverride::forcedFor(uint64_t bytes) const {
  for (const AlgoRule& r : rules)
    if (bytes >= r.lo && (bytes < r.hi || r.hi == UINT64_MAX)) return r.names;
  return {};
}

bool AlgoOverride::excludes(const std::string& name) const {
  return exclude && std::find(excluded.begin(), excluded.end(), name) != excluded.end();
}

Status parseAlgoOverride(const std::string& raw, const std::vector<std::string>& known, AlgoOverride* out) {
  AlgoOverride o;
  std::string text = trim(raw);
  if (text.empty()) {
    *out = o;
    return Status::kOk;
  }
  if (text[0] == '^') {
    o.exclude = true;
    for (const std::string& name : split(text.substr(1), ',')) {
      TPCOMM_TRY(checkName(name, known, raw));
      o.excluded.push_back(name);
    }
    *out = o;
    return Status::kOk;
  }
  for (const std::string& entry : split(text, ',')) {
    if (entry.empty()) return TPCOMM_INVALID("TPCOMM_ALGO='%s': empty entry (stray comma?)", raw.c_str());
    if (entry.find('^') != std::string::npos)
      return TPCOMM_INVALID("TPCOMM_ALGO='%s': '^' (exclude) must prefix the whole string, not one entry", raw.c_str());
    AlgoRule rule;
    std::string names = entry;
    size_t colon = entry.find(':');
    if (colon != std::string::npos) {
      std::string range = trim(entry.substr(0, colon));
      names = trim(entry.substr(colon + 1));
      size_t dash = range.find('-');
      if (dash == std::string::npos)
        return TPCOMM_INVALID("TPCOMM_ALGO='%s': range '%s' must be LO-HI (e.g. 0-64K)", raw.c_str(), range.c_str());
      TPCOMM_TRY(parseBound(trim(range.substr(0, dash)), raw, &rule.lo));
      TPCOMM_TRY(parseBound(trim(range.substr(dash + 1)), raw, &rule.hi));
      if (rule.lo == UINT64_MAX)
        return TPCOMM_INVALID("TPCOMM_ALGO='%s': range '%s' cannot start at inf", raw.c_str(), range.c_str());
      if (rule.hi <= rule.lo)
        return TPCOMM_INVALID("TPCOMM_ALGO='%s': range '%s' is empty (HI must exceed LO)", raw.c_str(), range.c_str());
    }
    for (const std::string& name : split(names, '|')) {
      TPCOMM_TRY(checkName(name, known, raw));
      rule.names.push_back(name);
    }
    for (const AlgoRule& r : o.rules)
      if (rule.lo < r.hi && r.lo < rule.hi)
        return TPCOMM_INVALID("TPCOMM_ALGO='%s': range of '%s' overlaps an earlier range", raw.c_str(), entry.c_str());
    o.rules.push_back(rule);
  }
  *out = o;
  return Status::kOk;
}

}  // namespace tpcomm
