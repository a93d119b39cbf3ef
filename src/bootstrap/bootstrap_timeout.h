// The bound on a bootstrap's waits. An explicit value in code wins over the environment
// (docs/reliability.md): a communicator's Config::setupTimeoutMs, else its Config::timeoutMs,
// bounds every exchange its create and destroy make on the bootstrap (ScopedBootstrapTimeout,
// set by Communicator for its thread);
// otherwise the bootstrap's own explicit timeout (makeSocketBootstrap's and makeNcclBootstrap's
// timeoutMs); otherwise TPCOMM_TIMEOUT_MS. The bootstraps tpcomm makes read it at each exchange.
#pragma once

namespace tpcomm {

/// While alive, bootstrap exchanges made by this thread are bounded by `ms` (<= 0: no change).
/// Nests; the destructor restores the previous bound.
class ScopedBootstrapTimeout {
 public:
  /// `source` names where `ms` comes from in messages (a string literal, e.g. "Config::timeoutMs").
  ScopedBootstrapTimeout(int ms, const char* source);
  ~ScopedBootstrapTimeout();
  ScopedBootstrapTimeout(const ScopedBootstrapTimeout&) = delete;
  ScopedBootstrapTimeout& operator=(const ScopedBootstrapTimeout&) = delete;

 private:
  int previous_;
  const char* previousSource_;
};

/// The bound in force for an exchange on this thread: the innermost ScopedBootstrapTimeout's,
/// else `own` when > 0 (the bootstrap's explicit value), else TPCOMM_TIMEOUT_MS.
int bootstrapTimeoutMs(int own = 0);
/// Where the bound in force comes from, for messages: the scope's source ("Config::timeoutMs"),
/// "timeoutMs" (the bootstrap's own) or "TPCOMM_TIMEOUT_MS".
const char* bootstrapTimeoutSource(int own = 0);

}  // namespace tpcomm
