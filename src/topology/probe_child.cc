// probe_child.cc: see probe_child.h.
#include "topology/probe_child.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <sstream>

#include "common/error.h"
#include "common/params.h"

extern char** environ;

namespace tpcomm {
namespace {

void splitLines(std::string* buf, std::vector<std::string>* lines) {
  size_t pos;
  while ((pos = buf->find('\n')) != std::string::npos) {
    lines->push_back(buf->substr(0, pos));
    buf->erase(0, pos + 1);
  }
}

bool executable(const std::string& p) { return !p.empty() && access(p.c_str(), X_OK) == 0; }

std::string dirOf(const std::string& p) {
  size_t s = p.rfind('/');
  return s == std::string::npos ? "." : p.substr(0, s);
}

}  // namespace

ChildRun runChild(const std::vector<std::string>& argv, const std::vector<std::string>& unsetEnv, int timeoutMs) {
  ChildRun run;
  auto t0 = std::chrono::steady_clock::now();
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    run.startError = std::string("pipe: ") + std::strerror(errno);
    return run;
  }
  if (pipe2(err, O_CLOEXEC) != 0) {
    run.startError = std::string("pipe: ") + std::strerror(errno);
    close(out[0]);
    close(out[1]);
    return run;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);  // own group: a timeout kills its children too
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> env;
  for (char** e = environ; e && *e; ++e) {
    bool drop = false;
    for (const std::string& u : unsetEnv) drop = drop || std::strncmp(*e, (u + "=").c_str(), u.size() + 1) == 0;
    if (!drop) env.push_back(*e);
  }
  env.push_back(nullptr);
  pid_t pid = -1;
  int rc = argv.empty() ? EINVAL : posix_spawn(&pid, args[0], &fa, &attr, args.data(), env.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  close(out[1]);
  close(err[1]);
  if (rc != 0) {
    run.startError = "posix_spawn " + (argv.empty() ? std::string("(no program)") : argv[0]) + ": " + std::strerror(rc);
    close(out[0]);
    close(err[0]);
    return run;
  }
  run.started = true;
  auto deadline = t0 + std::chrono::milliseconds(timeoutMs);
  std::string obuf, ebuf;
  bool oOpen = true, eOpen = true;
  while (oOpen || eOpen) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      run.timedOut = true;
      break;
    }
    pollfd fds[2] = {{oOpen ? out[0] : -1, POLLIN, 0}, {eOpen ? err[0] : -1, POLLIN, 0}};
    int n = poll(fds, 2, static_cast<int>(left));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    char buf[4096];
    for (int i = 0; i < 2; ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t got = read(fds[i].fd, buf, sizeof(buf));
      if (got <= 0) {
        (i == 0 ? oOpen : eOpen) = false;
        continue;
      }
      if (i == 0) {
        obuf.append(buf, static_cast<size_t>(got));
        splitLines(&obuf, &run.lines);
      } else {
        ebuf.append(buf, static_cast<size_t>(got));
        if (ebuf.size() > 2048) ebuf.erase(0, ebuf.size() - 2048);
      }
    }
  }
  if (run.timedOut) kill(-pid, SIGKILL);
  int status = 0;
  // After EOF on both pipes the child is exiting; bound this wait too.
  for (;;) {
    pid_t w = waitpid(pid, &status, run.timedOut ? 0 : WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) break;
    if (std::chrono::steady_clock::now() > deadline) {
      run.timedOut = true;
      kill(-pid, SIGKILL);
    } else {
      usleep(1000);
    }
  }
  if (run.timedOut) kill(-pid, SIGKILL);  // stray grandchildren of the group
  if (!obuf.empty()) run.lines.push_back(obuf);
  close(out[0]);
  close(err[0]);
  run.stderrTail = ebuf;
  if (WIFEXITED(status)) run.exitCode = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) run.signal = WTERMSIG(status);
  run.elapsedMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return run;
}

Status assembleChildReport(const ChildRun& run, int timeoutMs, MachineProbe* out) {
  MachineProbe m;
  bool haveFacts = false, done = false;
  int curA = -1, curB = -1;
  std::string curStage;
  for (const std::string& line : run.lines) {
    std::istringstream ss(line);
    std::string tag;
    ss >> tag;
    if (tag == "facts") {
      Status s = MachineProbe::fromJson(line.substr(6), &m);
      if (s != Status::kOk) return s;
      haveFacts = true;
      continue;
    }
    if (!haveFacts) continue;
    int a = -1, b = -1;
    std::string stage;
    if (tag == "begin" || tag == "result" || tag == "measure") {
      ss >> a >> b;
      if (a < 0 || b < 0 || a >= m.nGpus() || b >= m.nGpus() || a == b) continue;
    }
    if (tag == "begin") {
      ss >> curStage;
      curA = a;
      curB = b;
    } else if (tag == "result") {
      std::string res, detail;
      ss >> stage >> res;
      std::getline(ss, detail);
      if (!detail.empty() && detail[0] == ' ') detail.erase(0, 1);
      PairFacts& p = m.pairs[a][b];
      P2pCheck c = P2pCheck::kNotRun;
      parseP2pCheck(res, &c);
      (stage == "kernel" ? p.kernelCheck : p.copyCheck) = c;
      if (!detail.empty()) p.checkDetail += (p.checkDetail.empty() ? "" : "; ") + detail;
      curA = curB = -1;
    } else if (tag == "measure") {
      PairFacts& p = m.pairs[a][b];
      ss >> p.ceGBs >> p.smGBs >> p.rttUs;
      m.measured = true;
      curA = curB = -1;
    } else if (tag == "done") {
      done = true;
    }
  }
  if (!haveFacts) {
    out->checkError = !run.started ? run.startError
                      : run.timedOut ? "the probe child reported nothing within " + std::to_string(timeoutMs) + " ms"
                                     : "the probe child ended without a report (exit " + std::to_string(run.exitCode) +
                                           ", signal " + std::to_string(run.signal) + "): " + run.stderrTail;
    return TPCOMM_ERROR(kNotSupported, "topology probe child: %s", out->checkError.c_str());
  }
  char what[160] = "";
  if (curA >= 0) std::snprintf(what, sizeof(what), " during the %s check %d->%d", curStage.c_str(), curA, curB);
  if (run.timedOut) {
    m.checkError = "the P2P check was killed after " + std::to_string(timeoutMs) + " ms" + what;
  } else if (!done || run.exitCode != 0) {
    m.checkError = "the P2P check process died (exit " + std::to_string(run.exitCode) + ", signal " +
                   std::to_string(run.signal) + ")" + what;
  }
  if (curA >= 0 && !m.checkError.empty()) {
    PairFacts& p = m.pairs[curA][curB];
    P2pCheck c = run.timedOut ? P2pCheck::kHang : P2pCheck::kCudaError;
    if (curStage == "copy") p.copyCheck = c;
    else p.kernelCheck = c;  // a hung measurement is a hung peer write too
    p.checkDetail += (p.checkDetail.empty() ? "" : "; ") + m.checkError;
  }
  m.complete = done && run.exitCode == 0 && !run.timedOut;
  *out = std::move(m);
  return Status::kOk;
}

std::string findProbeHelper() {
  const std::string& forced = paramString(ParamId::kTopoHelper);
  if (!forced.empty()) return executable(forced) ? forced : "";
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    self[n] = '\0';
    std::string s = self;
    if (s.size() >= 13 && s.compare(s.size() - 13, 13, "tpcomm-doctor") == 0) return s;
  }
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&findProbeHelper), &info) && info.dli_fname) {
    char real[PATH_MAX];
    std::string lib = realpath(info.dli_fname, real) ? real : info.dli_fname;
    std::string d = dirOf(lib);
    for (const char* rel : {"/tpcomm-doctor", "/tools/tpcomm-doctor", "/../bin/tpcomm-doctor",
                            "/../libexec/tpcomm/tpcomm-doctor"})
      if (executable(d + rel)) return d + rel;
  }
  return "";
}

}  // namespace tpcomm
