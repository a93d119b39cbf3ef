#include "common/params.h"

#include <cctype>
#include <cstdlib>
#include <mutex>

#include "common/log.h"
#include "tpcomm/types.h"

namespace tpcomm {
namespace {

std::mutex gMutex;
std::vector<ParamInfo>* gParams = nullptr;

std::vector<ParamInfo> readParams() {
  std::vector<ParamInfo> table = {
#define TPCOMM_PARAM_ROW(id, name, def, kind, lo, hi, help) {name, def, ParamKind::kind, lo, hi, help, def, false},
      TPCOMM_PARAM_TABLE(TPCOMM_PARAM_ROW)
#undef TPCOMM_PARAM_ROW
  };
  for (ParamInfo& p : table) {
    std::string env = std::string("TPCOMM_") + p.name;
    if (const char* v = std::getenv(env.c_str())) {
      p.value = v;
      p.fromEnv = true;
    }
  }
  return table;
}

}  // namespace

const std::vector<ParamInfo>& params() {
  std::lock_guard<std::mutex> lock(gMutex);
  if (!gParams) gParams = new std::vector<ParamInfo>(readParams());
  return *gParams;
}

void reloadParams() {
  {
    std::lock_guard<std::mutex> lock(gMutex);
    std::vector<ParamInfo> fresh = readParams();
    if (gParams) {
      *gParams = std::move(fresh);
    } else {
      gParams = new std::vector<ParamInfo>(std::move(fresh));
    }
  }
  reloadLogConfig();
}

const std::string& paramString(ParamId id) { return params()[static_cast<int>(id)].value; }

bool parseSize(const std::string& text, uint64_t* out) {
  size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  if (i == text.size() || !std::isdigit(static_cast<unsigned char>(text[i]))) return false;
  uint64_t v = 0;
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
    uint64_t d = static_cast<uint64_t>(text[i] - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  uint64_t mult = 1;
  if (i < text.size()) {
    switch (std::toupper(static_cast<unsigned char>(text[i]))) {
      case 'K': mult = 1ull << 10; ++i; break;
      case 'M': mult = 1ull << 20; ++i; break;
      case 'G': mult = 1ull << 30; ++i; break;
      default: break;
    }
    if (mult != 1 && i < text.size() && std::toupper(static_cast<unsigned char>(text[i])) == 'B') ++i;
  }
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  if (i != text.size()) return false;
  if (v != 0 && mult > UINT64_MAX / v) return false;
  *out = v * mult;
  return true;
}

namespace {

bool allDigits(const std::string& text) {
  size_t b = text.find_first_not_of(" \t"), e = text.find_last_not_of(" \t");
  if (b == std::string::npos) return false;
  for (size_t i = b; i <= e; ++i)
    if (!std::isdigit(static_cast<unsigned char>(text[i]))) return false;
  return true;
}

// The value of a numeric parameter's text, if it is one and within range.
bool parseParam(const ParamInfo& p, const std::string& text, int64_t* out) {
  uint64_t v = 0;
  if (p.kind == ParamKind::kText) return false;
  if (p.kind != ParamKind::kSize && !allDigits(text)) return false;  // K/M/G only for sizes
  if (!parseSize(text, &v)) return false;
  if (v < static_cast<uint64_t>(p.min) || v > static_cast<uint64_t>(p.max)) return false;
  *out = static_cast<int64_t>(v);
  return true;
}

std::string numericProblem(const ParamInfo& p) {
  int64_t v = 0;
  if (parseParam(p, p.value, &v)) return "";
  return std::string("TPCOMM_") + p.name + "='" + p.value + "': expected " + paramRangeText(p) + "; using the default " +
         p.defaultValue;
}

}  // namespace

std::string paramRangeText(const ParamInfo& p) {
  switch (p.kind) {
    case ParamKind::kText: return "";
    case ParamKind::kBool: return "0 or 1";
    case ParamKind::kInt: return "an integer in [" + std::to_string(p.min) + ", " + std::to_string(p.max) + "]";
    case ParamKind::kSize:
      return "a byte count in [" + std::to_string(p.min) + ", " + std::to_string(p.max) + "] (K/M/G suffixes allowed)";
  }
  return "";
}

std::string compressionProblem(const std::string& text) {
  Compression c;
  if (parseCompression(text.c_str(), &c)) return "";
  return "TPCOMM_COMPRESSION='" + text + "': expected none, fp8 (or fp8_e4m3) or int8";
}

int64_t paramInt(ParamId id) {
  const ParamInfo& p = params()[static_cast<int>(id)];
  int64_t v = 0;
  if (parseParam(p, p.value, &v)) return v;
  // Warn once per parameter and value (a test or the doctor may change the environment).
  // Never destroyed: paramInt may run from static destructors (a Communicator freed at exit).
  static std::mutex* warnMu = new std::mutex;
  static auto* warnedFor = new std::vector<std::pair<bool, std::string>>(static_cast<size_t>(ParamId::kCount));
  bool warn = false;
  {
    std::lock_guard<std::mutex> lock(*warnMu);
    auto& w = (*warnedFor)[static_cast<size_t>(id)];
    if (!w.first || w.second != p.value) {
      warn = true;
      w = {true, p.value};
    }
  }
  if (warn) TPCOMM_WARN(kInit, "%s", numericProblem(p).c_str());
  uint64_t d = 0;
  parseSize(p.defaultValue, &d);  // defaults are within range (params_test checks)
  return static_cast<int64_t>(d);
}

std::string paramProblem(ParamId id) {
  const ParamInfo& p = params()[static_cast<int>(id)];
  if (p.kind != ParamKind::kText) return numericProblem(p);
  if (id == ParamId::kDebug || id == ParamId::kDebugSubsys) return logConfigProblem(id == ParamId::kDebug, p.value);
  if (id == ParamId::kCompression) return compressionProblem(p.value);
  return "";
}

}  // namespace tpcomm
