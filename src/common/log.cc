#include "common/log.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <sstream>
#include <string>

#include "common/params.h"

namespace tpcomm {
namespace {

std::atomic<int> gLevel{-1};
std::atomic<unsigned> gSubsys{kAllSubsys};

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

unsigned subsysBit(const std::string& name) {
  if (name == "INIT") return kInit;
  if (name == "TOPO") return kTopo;
  if (name == "TUNE") return kTune;
  if (name == "COLL") return kColl;
  if (name == "BOOT") return kBoot;
  if (name == "ALL") return kAllSubsys;
  return 0;
}

bool parseLevel(const std::string& text, int* out) {
  std::string level = upper(text);
  if (level == "NONE" || level == "0") *out = static_cast<int>(LogLevel::kNone);
  else if (level == "WARN" || level.empty()) *out = static_cast<int>(LogLevel::kWarn);
  else if (level == "INFO") *out = static_cast<int>(LogLevel::kInfo);
  else if (level == "TRACE") *out = static_cast<int>(LogLevel::kTrace);
  else return false;
  return true;
}

// Subsystem mask of "INIT,TOPO" / "^COLL"; *bad names the first unknown item.
unsigned parseSubsys(const std::string& text, std::string* bad) {
  std::string list = upper(text);
  bool invert = !list.empty() && list[0] == '^';
  if (invert) list.erase(0, 1);
  unsigned mask = 0;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    unsigned bit = subsysBit(item);
    if (!bit && bad && bad->empty()) *bad = item.empty() ? "(empty item)" : item;
    mask |= bit;
  }
  if (invert) mask = kAllSubsys & ~mask;
  if (list.empty()) mask = kAllSubsys;
  return mask;
}

void configure() {
  const std::string levelText = paramString(ParamId::kDebug), subsysText = paramString(ParamId::kDebugSubsys);
  int l = static_cast<int>(LogLevel::kWarn);
  bool levelOk = parseLevel(levelText, &l);
  std::string bad;
  gSubsys.store(parseSubsys(subsysText, &bad));
  gLevel.store(l);
  // Report a bad value once per value: logMessage directly (logEnabled would re-enter here).
  static std::mutex* mu = new std::mutex;         // never destroyed: logging may run at exit
  static std::string* reported = new std::string;
  std::string key = levelText + '\n' + subsysText;
  std::lock_guard<std::mutex> lock(*mu);
  if (*reported == key) return;
  *reported = key;
  if (!levelOk)
    logMessage(LogLevel::kWarn, kInit, __FILE__, __LINE__, "%s; WARN is used here, and Communicator::create refuses it",
               logConfigProblem(true, levelText).c_str());
  if (!bad.empty() && l != static_cast<int>(LogLevel::kNone))
    logMessage(LogLevel::kWarn, kInit, __FILE__, __LINE__,
               "%s; the unknown name is ignored here, and Communicator::create refuses it",
               logConfigProblem(false, subsysText).c_str());
}

const char* levelName(LogLevel l) {
  switch (l) {
    case LogLevel::kWarn:
      return "WARN";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kTrace:
      return "TRACE";
    default:
      return "";
  }
}

const char* subsysName(unsigned s) {
  switch (s) {
    case kInit:
      return "INIT";
    case kTopo:
      return "TOPO";
    case kTune:
      return "TUNE";
    case kColl:
      return "COLL";
    case kBoot:
      return "BOOT";
    default:
      return "ALL";
  }
}

}  // namespace

void reloadLogConfig() { configure(); }

std::string logConfigProblem(bool level, const std::string& value) {
  if (level) {
    int l;
    if (parseLevel(value, &l)) return "";
    return "TPCOMM_DEBUG='" + value + "': expected NONE, WARN, INFO or TRACE";
  }
  std::string bad;
  parseSubsys(value, &bad);
  if (bad.empty()) return "";
  return "TPCOMM_DEBUG_SUBSYS='" + value + "': unknown subsystem '" + bad +
         "'; expected a comma list of INIT, TOPO, TUNE, COLL, BOOT, ALL (^ to exclude)";
}

bool logEnabled(LogLevel level, unsigned subsys) {
  if (gLevel.load(std::memory_order_relaxed) < 0) configure();
  if (static_cast<int>(level) > gLevel.load(std::memory_order_relaxed)) return false;
  // Warnings always print regardless of the subsystem filter.
  return level == LogLevel::kWarn || (gSubsys.load(std::memory_order_relaxed) & subsys) != 0;
}

void logMessage(LogLevel level, unsigned subsys, const char* file, int line, const char* fmt, ...) {
  char host[64] = "?";
  gethostname(host, sizeof(host) - 1);
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  const char* base = std::strrchr(file, '/');
  std::fprintf(stderr, "%s:%d:%ld tpcomm %s %s %s (%s:%d)\n", host, static_cast<int>(getpid()),
               static_cast<long>(syscall(SYS_gettid)), levelName(level), subsysName(subsys), msg,
               base ? base + 1 : file, line);
}

}  // namespace tpcomm
