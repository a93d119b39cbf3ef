// libFuzzer target: environment parameters (src/common/params.h, log.h). The input becomes the
// value of one numeric parameter (chosen by its first byte) and of TPCOMM_DEBUG_SUBSYS; every
// value must be parsed without UB and paramInt() must stay within the parameter's range.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/log.h"
#include "common/params.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tpcomm;
  if (size == 0) return 0;
  setenv("TPCOMM_DEBUG", "NONE", 1);  // refused values warn; keep the fuzzer's output quiet
  std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  text = text.substr(0, text.find('\0'));  // environment values end at NUL
  uint64_t v = 0;
  (void)parseSize(text, &v);
  (void)logConfigProblem(true, text);
  (void)logConfigProblem(false, text);
  const int n = static_cast<int>(ParamId::kCount);
  const ParamId id = static_cast<ParamId>(data[0] % n);
  const std::string name = std::string("TPCOMM_") + params()[static_cast<int>(id)].name;
  if (id == ParamId::kDebug) return 0;
  setenv(name.c_str(), text.c_str(), 1);
  reloadParams();
  const ParamInfo& p = params()[static_cast<int>(id)];
  if (p.kind != ParamKind::kText) {
    int64_t got = paramInt(id);
    if (got < p.min || got > p.max) __builtin_trap();
  }
  (void)paramProblem(id);
  unsetenv(name.c_str());
  return 0;
}
