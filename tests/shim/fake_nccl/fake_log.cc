// fake_log.cc: the NCCL test double's call log (in memory, and one line per call appended to the
// file FAKE_NCCL_LOG names), error injection, the last error message, and the set of live
// communicators (a handle that is not in it, e.g. one already destroyed, is refused).
#include <fcntl.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "fake_internal.h"

namespace fakenccl {
namespace {

struct Log {
  std::mutex mu;
  std::vector<fakeNcclCall> calls;
  uint64_t seq = 0;
  std::map<std::string, std::pair<ncclResult_t, int>> inject;  // fn -> (result, times left)
  std::set<const ncclComm*> live;
};

Log& theLog() {
  static Log* log = new Log;  // never destroyed: calls may come during exit
  return *log;
}

thread_local std::string tLastError;

void appendToFile(const fakeNcclCall& c) {
  const char* path = std::getenv("FAKE_NCCL_LOG");
  if (!path || !*path) return;
  char line[512];
  int n = std::snprintf(
      line, sizeof(line),
      "seq=%llu pid=%d fn=%s comm=%p world=%016llx rank=%d nranks=%d device=%d count=%zu dtype=%d "
      "op=%d root=%d color=%d key=%d parent=%p blocking=%d send=%p recv=%p stream=%p group=%d result=%d\n",
      static_cast<unsigned long long>(c.seq), static_cast<int>(getpid()), c.fn, static_cast<void*>(c.comm),
      static_cast<unsigned long long>(c.world), c.rank, c.nranks, c.device, c.count, c.dtype, c.op, c.root, c.color,
      c.key, static_cast<void*>(c.parent), c.blocking, c.sendbuff, c.recvbuff, static_cast<void*>(c.stream), c.inGroup,
      static_cast<int>(c.result));
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  if (write(fd, line, static_cast<size_t>(n)) != n) {  // one write per line: lines from processes never interleave
  }
  close(fd);
}

}  // namespace

fakeNcclCall callRecord(const char* fn, const ncclComm* comm) {
  fakeNcclCall c;
  std::memset(&c, 0, sizeof(c));
  std::snprintf(c.fn, sizeof(c.fn), "%s", fn);
  c.rank = c.nranks = c.device = c.dtype = c.op = c.root = c.color = c.key = c.blocking = -1;
  if (comm) {
    c.comm = const_cast<ncclComm*>(comm);
    c.world = comm->world.id;
    c.rank = comm->rank;
    c.nranks = comm->nranks;
    c.device = comm->device;
  }
  return c;
}

void logCall(fakeNcclCall* c) {
  {
    Log& l = theLog();
    std::lock_guard<std::mutex> lock(l.mu);
    c->seq = ++l.seq;
    l.calls.push_back(*c);
  }
  appendToFile(*c);
}

bool injectedFailure(const char* fn, ncclResult_t* r) {
  Log& l = theLog();
  std::lock_guard<std::mutex> lock(l.mu);
  auto it = l.inject.find(fn);
  if (it == l.inject.end() || it->second.second <= 0) return false;
  *r = it->second.first;
  if (--it->second.second == 0) l.inject.erase(it);
  setLastError("fake NCCL: %s: injected failure", fn);
  return true;
}

void setLastError(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  tLastError = buf;
}

const char* lastError() { return tLastError.c_str(); }

int64_t envInt(const char* name, int64_t dflt) {
  const char* v = std::getenv(name);
  if (!v || !*v) return dflt;
  char* end = nullptr;
  long long x = std::strtoll(v, &end, 10);
  return end && *end == '\0' ? static_cast<int64_t>(x) : dflt;
}

ncclComm* live(ncclComm_t c) {
  Log& l = theLog();
  std::lock_guard<std::mutex> lock(l.mu);
  return c && l.live.count(c) && c->magic == kCommLive ? c : nullptr;
}

void addLive(ncclComm* c) {
  Log& l = theLog();
  std::lock_guard<std::mutex> lock(l.mu);
  l.live.insert(c);
}

void retire(ncclComm* c) {
  Log& l = theLog();
  std::lock_guard<std::mutex> lock(l.mu);
  l.live.erase(c);
  c->magic = kCommDead;
}

}  // namespace fakenccl

using namespace fakenccl;

extern "C" {

int fakeNcclIsFake(void) { return 1; }

int fakeNcclHostOnly(void) { return hostOnly() ? 1 : 0; }

size_t fakeNcclLogCount(void) {
  Log& l = theLog();
  std::lock_guard<std::mutex> lock(l.mu);
  return l.calls.size();
}

int fakeNcclLogGet(size_t index, fakeNcclCall* out) {
  Log& l = theLog();
  std::lock_guard<std::mutex> lock(l.mu);
  if (!out || index >= l.calls.size()) return -1;
  *out = l.calls[index];
  return 0;
}

void fakeNcclLogClear(void) {
  Log& l = theLog();
  std::lock_guard<std::mutex> lock(l.mu);
  l.calls.clear();
}

void fakeNcclInjectError(const char* fn, ncclResult_t result, int times) {
  if (!fn) return;
  Log& l = theLog();
  std::lock_guard<std::mutex> lock(l.mu);
  if (times <= 0)
    l.inject.erase(fn);
  else
    l.inject[fn] = {result, times};
}

ncclResult_t fakeNcclSetAsyncError(ncclComm_t comm, ncclResult_t result) {
  ncclComm* c = live(comm);
  if (!c) return ncclInvalidArgument;
  c->asyncError = result;
  return ncclSuccess;
}

}  // extern "C"
