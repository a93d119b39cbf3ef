// json_fields.h: strict field readers for the topology JSON formats (machine probe, cache file,
// Topology fixtures). nlohmann's value() converts a float to an int with a plain cast (undefined
// for 1.21e33: UBSan) and throws type_error.302 on a wrong type; these check the type and the
// range and throw JsonFieldError naming the field, which the parsers turn into kInvalidArgument.
// A missing field gives the default; null counts as missing.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tpcomm {
namespace jsonfields {

struct JsonFieldError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline const nlohmann::json* find(const nlohmann::json& obj, const char* key) {
  if (!obj.is_object()) throw JsonFieldError(std::string("expected an object holding '") + key + "'");
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

[[noreturn]] inline void wrongType(const char* key, const char* want) {
  throw JsonFieldError(std::string("field '") + key + "': expected " + want);
}

/// An integer in [lo, hi]; an integral float in range is accepted (1.0), any other float not.
inline int64_t getInt(const nlohmann::json& obj, const char* key, int64_t def,
                      int64_t lo = std::numeric_limits<int32_t>::min(),
                      int64_t hi = std::numeric_limits<int32_t>::max()) {
  const nlohmann::json* v = find(obj, key);
  if (!v) return def;
  std::string range = "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  if (v->is_number_unsigned()) {
    uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(hi)) wrongType(key, range.c_str());
    return static_cast<int64_t>(u);
  }
  if (v->is_number_integer()) {
    int64_t i = v->get<int64_t>();
    if (i < lo || i > hi) wrongType(key, range.c_str());
    return i;
  }
  if (v->is_number_float()) {
    double d = v->get<double>();
    // Compare as doubles before any cast: the cast of an out-of-range double is undefined.
    if (!std::isfinite(d) || d != std::floor(d) || d < static_cast<double>(lo) || d > static_cast<double>(hi))
      wrongType(key, range.c_str());
    return static_cast<int64_t>(d);
  }
  wrongType(key, range.c_str());
}

inline int getI32(const nlohmann::json& obj, const char* key, int def) {
  return static_cast<int>(getInt(obj, key, def));
}

inline unsigned getU32(const nlohmann::json& obj, const char* key, unsigned def) {
  return static_cast<unsigned>(getInt(obj, key, def, 0, std::numeric_limits<uint32_t>::max()));
}

inline bool getBool(const nlohmann::json& obj, const char* key, bool def) {
  const nlohmann::json* v = find(obj, key);
  if (!v) return def;
  if (!v->is_boolean()) wrongType(key, "true or false");
  return v->get<bool>();
}

/// A finite number.
inline double getDouble(const nlohmann::json& obj, const char* key, double def) {
  const nlohmann::json* v = find(obj, key);
  if (!v) return def;
  if (!v->is_number()) wrongType(key, "a number");
  double d = v->get<double>();
  if (!std::isfinite(d)) wrongType(key, "a finite number");
  return d;
}

inline std::string getString(const nlohmann::json& obj, const char* key, const std::string& def = std::string()) {
  const nlohmann::json* v = find(obj, key);
  if (!v) return def;
  if (!v->is_string()) wrongType(key, "a string");
  return v->get<std::string>();
}

/// The array (array true) or object at key; an empty one when missing.
inline const nlohmann::json& getContainer(const nlohmann::json& obj, const char* key, bool array) {
  static const nlohmann::json kEmptyArray = nlohmann::json::array(), kEmptyObject = nlohmann::json::object();
  const nlohmann::json* v = find(obj, key);
  if (!v) return array ? kEmptyArray : kEmptyObject;
  if (array ? !v->is_array() : !v->is_object()) wrongType(key, array ? "an array" : "an object");
  return *v;
}
inline const nlohmann::json& getArray(const nlohmann::json& obj, const char* key) {
  return getContainer(obj, key, true);
}
inline const nlohmann::json& getObject(const nlohmann::json& obj, const char* key) {
  return getContainer(obj, key, false);
}

/// The measured link fields both JSON forms carry (the machine probe's pairs, the topology's
/// links): pci_path, ce_gbs, sm_gbs, rtt_us (0: not measured).
template <typename Link>
void getLinkMeasures(const nlohmann::json& obj, Link* link) {
  link->pciPath = getString(obj, "pci_path");
  link->ceGBs = getDouble(obj, "ce_gbs", 0.0);
  link->smGBs = getDouble(obj, "sm_gbs", 0.0);
  link->rttUs = getDouble(obj, "rtt_us", 0.0);
}

inline std::vector<std::string> getStrings(const nlohmann::json& obj, const char* key) {
  std::vector<std::string> out;
  for (const nlohmann::json& s : getArray(obj, key)) {
    if (!s.is_string()) wrongType(key, "an array of strings");
    out.push_back(s.get<std::string>());
  }
  return out;
}

/// Nesting depth of JSON text, counted without parsing (brackets outside strings): lets a
/// parser refuse deeply nested input before nlohmann's recursive parts see it.
inline size_t jsonDepth(const std::string& text) {
  size_t depth = 0, most = 0;
  bool inString = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (inString) {
      if (c == '\\') ++i;
      else if (c == '"') inString = false;
    } else if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      if (++depth > most) most = depth;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return most;
}

}  // namespace jsonfields
}  // namespace tpcomm
