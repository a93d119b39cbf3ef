// Status plumbing: every failing path records a message (thread-local, returned by
// tpcomm::lastErrorMessage()) and returns its Status. No exceptions cross the API.
#pragma once

#include "common/log.h"
#include "tpcomm/status.h"

namespace tpcomm {

/// Records `fmt...` as this thread's last error and returns `s`. Errors other than
/// kNotSupported are also logged at WARN (kNotSupported is routine: the selector moves on).
Status setError(Status s, const char* file, int line, const char* fmt, ...) __attribute__((format(printf, 4, 5)));
/// Clears this thread's last error (start of each API call).
void clearError();

}  // namespace tpcomm

#define TPCOMM_ERROR(status, ...) ::tpcomm::setError(::tpcomm::Status::status, __FILE__, __LINE__, __VA_ARGS__)
#define TPCOMM_INVALID(...) TPCOMM_ERROR(kInvalidArgument, __VA_ARGS__)

// Propagates a non-kOk status.
#define TPCOMM_TRY(expr)                                      \
  do {                                                        \
    ::tpcomm::Status tpcomm_s_ = (expr);                      \
    if (tpcomm_s_ != ::tpcomm::Status::kOk) return tpcomm_s_; \
  } while (0)
