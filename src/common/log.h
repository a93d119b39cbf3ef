// Logging in the manner of NCCL_DEBUG: TPCOMM_DEBUG=NONE|WARN|INFO|TRACE selects the level,
// TPCOMM_DEBUG_SUBSYS=INIT,TOPO,TUNE,COLL,BOOT (or ALL, ^X to exclude) the subsystems.
// Lines go to stderr as "host:pid:tid tpcomm LEVEL SUBSYS message".
#pragma once

#include <string>

namespace tpcomm {

enum class LogLevel : int { kNone = 0, kWarn = 1, kInfo = 2, kTrace = 3 };
enum LogSubsys : unsigned { kInit = 1u, kTopo = 2u, kTune = 4u, kColl = 8u, kBoot = 16u, kAllSubsys = 31u };

/// True when a message of this level and subsystem would be printed.
bool logEnabled(LogLevel level, unsigned subsys);
/// printf-style log line (use the macros).
void logMessage(LogLevel level, unsigned subsys, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));
/// Re-reads TPCOMM_DEBUG / TPCOMM_DEBUG_SUBSYS (after reloadParams()). An unknown level or
/// subsystem name is reported once with a warning (and the level falls back to WARN).
void reloadLogConfig();
/// "" when `value` is a valid TPCOMM_DEBUG (level=true) or TPCOMM_DEBUG_SUBSYS (level=false),
/// else what is wrong with it and what was expected.
std::string logConfigProblem(bool level, const std::string& value);

}  // namespace tpcomm

#define TPCOMM_LOG(level, subsys, ...)                                                \
  do {                                                                                \
    if (::tpcomm::logEnabled(level, ::tpcomm::subsys))                                \
      ::tpcomm::logMessage(level, ::tpcomm::subsys, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#define TPCOMM_WARN(subsys, ...) TPCOMM_LOG(::tpcomm::LogLevel::kWarn, subsys, __VA_ARGS__)
#define TPCOMM_INFO(subsys, ...) TPCOMM_LOG(::tpcomm::LogLevel::kInfo, subsys, __VA_ARGS__)
#define TPCOMM_TRACE(subsys, ...) TPCOMM_LOG(::tpcomm::LogLevel::kTrace, subsys, __VA_ARGS__)
