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
/// Puts `prefix` before this thread's last error message, after its status name ("kTimeout:
/// create, probing the topology: ..."), without logging it again. Returns `s`.
Status prefixError(Status s, const char* prefix);

/// kCudaError for a failed CUDA runtime call `what` (error code `err`, a cudaError_t), with
/// CUDA's own text; clears CUDA's sticky last error. Defined in cuda_error.cc (CUDA builds).
Status cudaFailure(int err, const char* what, const char* file, int line, const char* context = nullptr);
/// kNotSupported: `what` needs CUDA and this build has none.
Status builtWithoutCuda(const char* what, const char* file, int line);

}  // namespace tpcomm

#define TPCOMM_ERROR(status, ...) ::tpcomm::setError(::tpcomm::Status::status, __FILE__, __LINE__, __VA_ARGS__)
#define TPCOMM_INVALID(...) TPCOMM_ERROR(kInvalidArgument, __VA_ARGS__)

// Propagates a non-kOk status.
#define TPCOMM_TRY(expr)                                      \
  do {                                                        \
    ::tpcomm::Status tpcomm_s_ = (expr);                      \
    if (tpcomm_s_ != ::tpcomm::Status::kOk) return tpcomm_s_; \
  } while (0)

// The one CUDA check: returns kCudaError naming the call and CUDA's message when it fails.
#define TPCOMM_CUDA_TRY(call)                                                               \
  do {                                                                                      \
    const int tpcomm_e_ = static_cast<int>(call);                                           \
    if (tpcomm_e_ != 0) return ::tpcomm::cudaFailure(tpcomm_e_, #call, __FILE__, __LINE__); \
  } while (0)

// The same, the message led by what the caller was doing (a C string), e.g. "create: device 0".
#define TPCOMM_CUDA_TRY_IN(call, context)                                                            \
  do {                                                                                               \
    const int tpcomm_e_ = static_cast<int>(call);                                                    \
    if (tpcomm_e_ != 0) return ::tpcomm::cudaFailure(tpcomm_e_, #call, __FILE__, __LINE__, context); \
  } while (0)

// A call into a .cu file: the call itself in CUDA builds, kNotSupported in host-only builds
// (so host-only builds need no stub definitions of the kernels' launchers).
#ifdef TPCOMM_HAVE_CUDA
#define TPCOMM_CUDA_ONLY(call) (call)
#else
#define TPCOMM_CUDA_ONLY(call) ::tpcomm::builtWithoutCuda(#call, __FILE__, __LINE__)
#endif
