#include "common/params.h"

#include <cctype>
#include <cstdlib>
#include <mutex>

#include "common/log.h"

namespace tpcomm {
namespace {

std::mutex gMutex;
std::vector<ParamInfo>* gParams = nullptr;

std::vector<ParamInfo> readParams() {
  std::vector<ParamInfo> table = {
#define TPCOMM_PARAM_ROW(id, name, def, help) {name, def, help, def, false},
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

int64_t paramInt(ParamId id) {
  const ParamInfo& p = params()[static_cast<int>(id)];
  uint64_t v = 0;
  if (parseSize(p.value, &v) && v <= static_cast<uint64_t>(INT64_MAX)) return static_cast<int64_t>(v);
  static std::once_flag warned[static_cast<int>(ParamId::kCount)];
  std::call_once(warned[static_cast<int>(id)], [&] {
    TPCOMM_WARN(kInit, "TPCOMM_%s='%s' is not a non-negative integer; using default %s", p.name,
                p.value.c_str(), p.defaultValue);
  });
  parseSize(p.defaultValue, &v);
  return static_cast<int64_t>(v);
}

}  // namespace tpcomm
