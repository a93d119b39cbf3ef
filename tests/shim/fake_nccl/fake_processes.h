// fake_processes.h: ranks of the NCCL test double as processes, for the tests. A test re-runs its
// own program once per rank with FAKE_NCCL_TEST_RANK="rank nranks unique-id-in-hex" in the
// child's environment (the rest of the environment, LD_PRELOAD included, is inherited); the child
// reads it back with rankFromEnv and meets its peers in the double's shared memory.
#pragma once

#include <nccl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

namespace fake_processes {

constexpr const char* kRankVariable = "FAKE_NCCL_TEST_RANK";

/// Runs /proc/self/exe once per rank with `args` (argv[1..]); returns each child's exit code
/// (-1 when it did not exit normally, e.g. killed by a signal).
inline std::vector<int> runRanks(int n, const ncclUniqueId& id, const std::vector<std::string>& args) {
  std::string hex;
  for (unsigned char ch : id.internal) {
    char b[3];
    std::snprintf(b, sizeof(b), "%02x", ch);
    hex += b;
  }
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pid_t p = fork();
    if (p == 0) {
      std::string spec = std::to_string(r) + " " + std::to_string(n) + " " + hex;
      setenv(kRankVariable, spec.c_str(), 1);
      std::vector<char*> argv{const_cast<char*>("rank")};
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv("/proc/self/exe", argv.data());
      _exit(127);
    }
    pids.push_back(p);
  }
  std::vector<int> codes;
  for (pid_t p : pids) {
    int status = 0;
    bool ok = p > 0 && waitpid(p, &status, 0) == p && WIFEXITED(status);
    codes.push_back(ok ? WEXITSTATUS(status) : -1);
  }
  return codes;
}

/// This process's rank, size and unique id when runRanks started it; false otherwise.
inline bool rankFromEnv(int* rank, int* nranks, ncclUniqueId* id) {
  const char* spec = std::getenv(kRankVariable);
  if (!spec) return false;
  std::istringstream in(spec);
  std::string hex;
  if (!(in >> *rank >> *nranks >> hex) || hex.size() != 2 * sizeof(id->internal)) return false;
  for (size_t i = 0; i < sizeof(id->internal); ++i)
    id->internal[i] = static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return true;
}

}  // namespace fake_processes
