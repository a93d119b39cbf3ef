#include "common/params.h"

#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <mutex>

#include "common/error.h"
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
    const char* v = std::getenv(env.c_str());
    if (v && *v) {  // set but empty: the default, as if unset
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

// The unit a size must be a multiple of (1: any).
uint64_t sizeUnit(const ParamInfo& p) {
  // staged_host's slots are page-aligned pieces of one shared segment (host_staged.cc).
  return std::string(p.name) == "STAGED_CHUNK_BYTES" ? 4096 : 1;
}

// The value of a numeric parameter's text, if it is one and acceptable.
bool parseParam(const ParamInfo& p, const std::string& text, int64_t* out) {
  uint64_t v = 0;
  if (p.kind == ParamKind::kText) return false;
  if (p.kind != ParamKind::kSize && !allDigits(text)) return false;  // K/M/G only for sizes
  if (!parseSize(text, &v)) return false;
  if (v < static_cast<uint64_t>(p.min) || v > static_cast<uint64_t>(p.max)) return false;
  if (v % sizeUnit(p) != 0) return false;
  *out = static_cast<int64_t>(v);
  return true;
}

std::string quoted(const ParamInfo& p) { return std::string("TPCOMM_") + p.name + "='" + p.value + "'"; }

std::string numericProblem(const ParamInfo& p) {
  int64_t v = 0;
  if (parseParam(p, p.value, &v)) return "";
  return quoted(p) + ": expected " + paramRangeText(p);
}

// A path parameter: set, it must name an existing file (`mode`: R_OK or X_OK).
std::string pathProblem(const ParamInfo& p, int mode, const char* whatFile) {
  if (!p.fromEnv || access(p.value.c_str(), mode) == 0) return "";
  return quoted(p) + ": expected " + whatFile + " (" + paramRangeText(p) + ")";
}

}  // namespace

std::string paramRangeText(const ParamInfo& p) {
  const std::string name = p.name;
  switch (p.kind) {
    case ParamKind::kText:
      if (name == "DEBUG") return "NONE, WARN, INFO or TRACE";
      if (name == "DEBUG_SUBSYS") return "a comma list of INIT, TOPO, TUNE, COLL, BOOT, ALL (^ to exclude)";
      if (name == "COMPRESSION") return "none, fp8 (or fp8_e4m3) or int8";
      if (name == "SOCKET_FAMILY") return "AF_INET, AF_INET6 or empty";
      if (name == "TOPO_HELPER") return "an executable file; unset: found beside libtpcomm";
      if (name == "NCCL_LIBRARY") return "an existing file, or a library name for dlopen (no '/')";
      return "";
    case ParamKind::kBool: return "0 or 1";
    case ParamKind::kInt: return "an integer in [" + std::to_string(p.min) + ", " + std::to_string(p.max) + "]";
    case ParamKind::kSize: {
      const uint64_t unit = sizeUnit(p);
      return "a byte count in [" + std::to_string(p.min) + ", " + std::to_string(p.max) + "]" +
             (unit > 1 ? ", a multiple of " + std::to_string(unit) : std::string()) + " (K/M/G suffixes allowed)";
    }
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
  if (warn)
    TPCOMM_WARN(kInit, "%s; ignored here (the default %s is used), and Communicator::create refuses it",
                numericProblem(p).c_str(), p.defaultValue);
  uint64_t d = 0;
  parseSize(p.defaultValue, &d);  // defaults are within range (params_test checks)
  return static_cast<int64_t>(d);
}

std::string paramProblem(ParamId id) {
  const ParamInfo& p = params()[static_cast<int>(id)];
  if (p.kind != ParamKind::kText) return numericProblem(p);
  switch (id) {
    case ParamId::kDebug:
    case ParamId::kDebugSubsys:
      return logConfigProblem(id == ParamId::kDebug, p.value);
    case ParamId::kCompression:
      return compressionProblem(p.value);
    case ParamId::kSocketFamily:
      return p.value.empty() || p.value == "AF_INET" || p.value == "AF_INET6"
                 ? ""
                 : quoted(p) + ": expected " + paramRangeText(p);
    case ParamId::kTopoHelper:
      return pathProblem(p, X_OK, "the path of an executable (tpcomm-doctor)");
    case ParamId::kNcclLibrary:
      return p.value.find('/') == std::string::npos ? "" : pathProblem(p, R_OK, "the path of an existing libnccl");
    default:
      return "";
  }
}

std::vector<std::string> paramProblems() {
  std::vector<std::string> out;
  for (int id = 0; id < static_cast<int>(ParamId::kCount); ++id) {
    std::string why = paramProblem(static_cast<ParamId>(id));
    if (!why.empty()) out.push_back(why);
  }
  return out;
}

Status checkParams(const char* what, const std::vector<ParamId>& notRead) {
  std::string all;
  for (int i = 0; i < static_cast<int>(ParamId::kCount); ++i) {
    const ParamId id = static_cast<ParamId>(i);
    bool skip = false;
    for (ParamId n : notRead) skip = skip || n == id;
    const std::string why = skip ? "" : paramProblem(id);
    if (!why.empty()) all += (all.empty() ? "" : "; ") + why;
  }
  if (all.empty()) return Status::kOk;
  return TPCOMM_INVALID(
      "%s: %s (unset a variable, or set it empty, for its default; tpcomm-doctor --params lists them)", what,
      all.c_str());
}

}  // namespace tpcomm
