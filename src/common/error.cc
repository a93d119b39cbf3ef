#include "common/error.h"

#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "common/enum_names.h"
#include "tpcomm/types.h"

namespace tpcomm {
namespace {
// A plain array, not a std::string: it must have no destructor. At exit() the main thread's
// thread_locals are destroyed before objects of static storage duration, and a static that owns
// a Communicator (a test's group cache, an engine's singleton) then runs destroy(), which calls
// clearError(): on a destroyed std::string that wrote into its freed heap buffer, corrupting
// malloc's free lists (glibc heap-corruption aborts at exit; tests/unit/exit_teardown_test.cc).
thread_local char tLastError[2048 + 32];
}  // namespace

Status setError(Status s, const char* file, int line, const char* fmt, ...) {
  char msg[2048];  // formatted apart from tLastError: an argument may be lastErrorMessage()
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  // The message alone: callers print the status beside it (statusName, the C API's code, the
  // Python exception's class), so a status name here would appear twice. The log line adds it.
  std::snprintf(tLastError, sizeof(tLastError), "%s", msg);
  if (s != Status::kNotSupported) {
    if (logEnabled(LogLevel::kWarn, kAllSubsys))
      logMessage(LogLevel::kWarn, kAllSubsys, file, line, "%s: %s", statusName(s), tLastError);
  } else if (logEnabled(LogLevel::kTrace, kColl)) {
    logMessage(LogLevel::kTrace, kColl, file, line, "%s: %s", statusName(s), tLastError);
  }
  return s;
}

void clearError() { tLastError[0] = '\0'; }

Status prefixError(Status s, const char* prefix) {
  char msg[sizeof(tLastError)];
  const char* name = statusName(s);
  const size_t n = std::strlen(name);
  const char* rest = std::strncmp(tLastError, name, n) == 0 && std::strncmp(tLastError + n, ": ", 2) == 0
                         ? tLastError + n + 2
                         : tLastError;
  std::snprintf(msg, sizeof(msg), "%s: %s: %s", name, prefix, rest);
  std::memcpy(tLastError, msg, sizeof(tLastError));
  return s;
}

const char* lastErrorMessage() { return tLastError; }

const char* statusName(Status s) {
  static const char* const kNames[] = {"kOk",          "kInvalidArgument", "kNotSupported", "kCudaError",
                                       "kSystemError", "kTimeout",         "kRemoteError",  "kInternal"};
  return enumName(s, kNames, "kUnknownStatus");  // in Status's order (include/tpcomm/status.h)
}

}  // namespace tpcomm

namespace tpcomm {

Status builtWithoutCuda(const char* what, const char* file, int line) {
  return setError(Status::kNotSupported, file, line, "%s: tpcomm was built without CUDA", what);
}

}  // namespace tpcomm
