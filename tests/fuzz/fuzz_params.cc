// libFuzzer target: environment parameters (src/common/params.h, log.h). The input becomes the
// value of one numeric parameter (chosen by its first byte) and of TPCOMM_DEBUG_SUBSYS; every
// value must be parsed without UB and paramInt() must stay within the parameter's range.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/log.h"
#include "common/params.h"

// setenv keeps every distinct value it was given (glibc), so a long run would grow without bound:
// each parameter gets one buffer of its own, rewritten in place and handed to putenv.
void setParamEnv(int id, const std::string& name, const std::string& value) {
  static std::vector<std::vector<char>> bufs(static_cast<size_t>(tpcomm::ParamId::kCount));
  std::vector<char>& b = bufs[static_cast<size_t>(id)];
  const std::string text = name + "=" + value;
  if (b.size() < text.size() + 1) {
    unsetenv(name.c_str());  // the environment must not point into a buffer about to move
    b.assign(text.size() + 1 + 4096, '\0');
  }
  std::memcpy(b.data(), text.c_str(), text.size() + 1);
  putenv(b.data());
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tpcomm;
  if (size == 0) return 0;
  static const int quiet = setenv("TPCOMM_DEBUG", "NONE", 1);  // refused values warn; keep output quiet
  (void)quiet;
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
  setParamEnv(static_cast<int>(id), name, text);
  reloadParams();
  const ParamInfo& p = params()[static_cast<int>(id)];
  if (p.kind != ParamKind::kText) {
    int64_t got = paramInt(id);
    if (got < p.min || got > p.max) __builtin_trap();
  }
  (void)paramProblem(id);
  unsetenv(name.c_str());  // removes the pointer only; the buffer stays for the next time
  return 0;
}
