// Stale /dev/shm segments: a process that died between creating its
// staged_host segment and unlinking it leaves /dev/shm/tpcomm-<pid>-*; the next create (and
// tpcomm-doctor --clean) removes those whose pid is gone, and nothing else.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>

#include "transports/host_staged.h"

namespace tpcomm {
namespace {

bool exists(const std::string& name) {
  struct stat st;
  return stat(("/dev/shm" + name).c_str(), &st) == 0;
}

bool make(const std::string& name) {
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return false;
  bool ok = ftruncate(fd, 4096) == 0;
  close(fd);
  return ok;
}

TEST(ShmCleanup, RemovesSegmentsOfDeadProcessesOnly) {
  struct stat st;
  if (stat("/dev/shm", &st) != 0) GTEST_SKIP() << "no /dev/shm";
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);  // reaped: its pid is gone
  const std::string dead = "/tpcomm-" + std::to_string(child) + "-0-deadbeef";
  const std::string mine = "/tpcomm-" + std::to_string(getpid()) + "-0-cafef00d";
  const std::string other = "/tpcomm-notapid-0-00000000";
  ASSERT_TRUE(make(dead) && make(mine) && make(other)) << "shm_open failed";
  std::string report;
  EXPECT_GE(HostStagedTransport::removeStaleSegments(&report), 1);
  EXPECT_FALSE(exists(dead)) << "the dead process's segment is still there";
  EXPECT_TRUE(exists(mine)) << "a live process's segment was removed";
  EXPECT_TRUE(exists(other)) << "a segment without a pid in its name was removed";
  EXPECT_NE(report.find(dead.substr(1)), std::string::npos) << report;
  shm_unlink(mine.c_str());
  shm_unlink(other.c_str());
}

}  // namespace
}  // namespace tpcomm
