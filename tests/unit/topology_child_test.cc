// topology_child_test.cc: the probe child protocol with fake children (/bin/sh scripts standing
// in for tpcomm-doctor --probe-child): a child that hangs is killed at the limit (with its own
// children) and the pair it was checking is reported as hung; corrupt, crashed and silent
// children are reported as such.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <string>

#include "topology/diagnose.h"
#include "topology/probe_child.h"

namespace tpcomm {
namespace {

// A two-GPU machine whose driver offers P2P both ways; checks not run.
MachineProbe twoGpus() {
  MachineProbe m;
  for (int i = 0; i < 2; ++i) {
    GpuFacts g;
    g.index = i;
    g.busId = i == 0 ? "0000:18:00.0" : "0000:3a:00.0";
    g.uuid = "GPU-" + std::to_string(i);
    m.gpus.push_back(g);
  }
  m.pairs.assign(2, std::vector<PairFacts>(2));
  m.pairs[0][1].canAccessPeer = m.pairs[1][0].canAccessPeer = true;
  m.pairs[0][1].nvlinks = m.pairs[1][0].nvlinks = 18;
  return m;
}

// Writes a script that prints the header and facts, then `body`.
std::string script(const std::string& name, const std::string& body) {
  std::string dir = ::testing::TempDir();
  std::string facts = dir + "/" + name + ".facts";
  std::ofstream(facts) << twoGpus().toJson() << "\n";
  std::string path = dir + "/" + name + ".sh";
  std::ofstream(path) << "#!/bin/sh\necho 'tpcomm-probe-child 1'\nprintf 'facts '\ncat '" << facts << "'\n" << body;
  return path;
}

// Running (a killed process may linger as a zombie until its new parent reaps it).
bool alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z' && line[close + 2] != 'X';
}

TEST(ProbeChild, HangingChildIsKilledAtTheLimitAndReported) {
  std::string sh = script("hang", "echo 'begin 0 1 kernel'\nsleep 30 &\necho \"pids $$ $!\"\nwait\n");
  ChildRun run = runChild({"/bin/sh", sh}, {}, 400);
  EXPECT_TRUE(run.started);
  EXPECT_TRUE(run.timedOut);
  EXPECT_GE(run.elapsedMs, 390);
  EXPECT_LT(run.elapsedMs, 5000);
  EXPECT_EQ(run.signal, SIGKILL);
  // Both the child and its own child (the sleep) are gone: the whole process group was killed.
  int shPid = 0, sleepPid = 0;
  for (const std::string& l : run.lines)
    if (l.rfind("pids ", 0) == 0) std::sscanf(l.c_str(), "pids %d %d", &shPid, &sleepPid);
  ASSERT_GT(shPid, 0);
  ASSERT_GT(sleepPid, 0);
  usleep(50000);
  EXPECT_FALSE(alive(shPid));
  EXPECT_FALSE(alive(sleepPid));

  MachineProbe m;
  ASSERT_EQ(assembleChildReport(run, 400, &m), Status::kOk);
  EXPECT_EQ(m.pairs[0][1].kernelCheck, P2pCheck::kHang);
  EXPECT_EQ(m.pairs[0][1].copyCheck, P2pCheck::kNotRun);
  EXPECT_EQ(m.pairs[1][0].kernelCheck, P2pCheck::kNotRun);
  EXPECT_EQ(m.checkError, "the P2P check was killed after 400 ms during the kernel check 0->1");
  EXPECT_FALSE(m.complete);
  EXPECT_FALSE(m.cacheable());
  EXPECT_TRUE(pairBroken(m, 0, 1));
  EXPECT_TRUE(pairBroken(m, 1, 0));  // offered by the driver, never verified because of the hang
  std::string why = pairProblem(m, 0, 1);
  EXPECT_EQ(why.rfind("P2P 0->1 hangs (kernel stores hung, the P2P check was killed after 400 ms", 0), 0u) << why;
  EXPECT_EQ(decideLink(m, 0, 1).kind, LinkKind::kPcie);
  EXPECT_EQ(decideLink(m, 1, 0).kind, LinkKind::kPcie);
}

TEST(ProbeChild, CorruptAndOkResults) {
  std::string sh = script("corrupt",
                          "echo 'begin 0 1 kernel'\n"
                          "echo 'result 0 1 kernel corrupt kernel: 7 of 262144 words wrong, first at word 3'\n"
                          "echo 'begin 0 1 copy'\necho 'result 0 1 copy ok '\n"
                          "echo 'begin 1 0 kernel'\necho 'result 1 0 kernel ok '\n"
                          "echo 'begin 1 0 copy'\necho 'result 1 0 copy ok '\n"
                          "echo 'begin 1 0 measure'\necho 'measure 1 0 397.5 420.25 1.36'\n"
                          "echo 'result 9 9 kernel ok'\necho 'garbage line'\necho done\n");
  ChildRun run = runChild({"/bin/sh", sh}, {}, 5000);
  ASSERT_FALSE(run.timedOut);
  EXPECT_EQ(run.exitCode, 0);
  MachineProbe m;
  ASSERT_EQ(assembleChildReport(run, 5000, &m), Status::kOk);
  EXPECT_TRUE(m.complete);
  EXPECT_TRUE(m.checkError.empty()) << m.checkError;
  EXPECT_EQ(m.pairs[0][1].kernelCheck, P2pCheck::kCorrupt);
  EXPECT_EQ(m.pairs[0][1].copyCheck, P2pCheck::kOk);
  EXPECT_EQ(m.pairs[0][1].checkDetail, "kernel: 7 of 262144 words wrong, first at word 3");
  EXPECT_TRUE(m.pairs[1][0].verified());
  EXPECT_DOUBLE_EQ(m.pairs[1][0].ceGBs, 397.5);
  EXPECT_DOUBLE_EQ(m.pairs[1][0].smGBs, 420.25);
  EXPECT_DOUBLE_EQ(m.pairs[1][0].rttUs, 1.36);
  EXPECT_TRUE(m.measured);
  EXPECT_TRUE(m.cacheable());  // corruption is a definitive answer
  EXPECT_EQ(decideLink(m, 1, 0).kind, LinkKind::kNvlink);
  EXPECT_EQ(decideLink(m, 0, 1).kind, LinkKind::kPcie);
}

TEST(ProbeChild, CrashDuringCheck) {
  std::string sh = script("crash", "echo 'begin 1 0 copy'\nkill -SEGV $$\n");
  ChildRun run = runChild({"/bin/sh", sh}, {}, 5000);
  EXPECT_FALSE(run.timedOut);
  EXPECT_EQ(run.signal, SIGSEGV);
  MachineProbe m;
  ASSERT_EQ(assembleChildReport(run, 5000, &m), Status::kOk);
  EXPECT_EQ(m.pairs[1][0].copyCheck, P2pCheck::kCudaError);
  EXPECT_NE(m.checkError.find("died (exit -1, signal 11) during the copy check 1->0"), std::string::npos) << m.checkError;
  EXPECT_FALSE(m.cacheable());
}

TEST(ProbeChild, SilentOrMissingChild) {
  std::string dir = ::testing::TempDir();
  std::string sh = dir + "/silent.sh";
  std::ofstream(sh) << "#!/bin/sh\necho oops >&2\nexit 3\n";
  ChildRun run = runChild({"/bin/sh", sh}, {}, 5000);
  EXPECT_EQ(run.exitCode, 3);
  EXPECT_EQ(run.stderrTail, "oops\n");
  MachineProbe m;
  EXPECT_EQ(assembleChildReport(run, 5000, &m), Status::kNotSupported);
  EXPECT_NE(m.checkError.find("ended without a report (exit 3"), std::string::npos) << m.checkError;

  ChildRun none = runChild({"/nonexistent/tpcomm-doctor", "--probe-child"}, {}, 1000);
  EXPECT_FALSE(none.started);
  EXPECT_NE(none.startError.find("/nonexistent/tpcomm-doctor"), std::string::npos);
  MachineProbe m2;
  EXPECT_EQ(assembleChildReport(none, 1000, &m2), Status::kNotSupported);
}

TEST(ProbeChild, EnvironmentIsFilteredForTheChild) {
  ::setenv("CUDA_VISIBLE_DEVICES", "1", 1);
  ::setenv("TPCOMM_PROBE_TEST_KEEP", "yes", 1);
  ChildRun run = runChild({"/bin/sh", "-c", "echo \"cvd=${CUDA_VISIBLE_DEVICES-unset} keep=$TPCOMM_PROBE_TEST_KEEP\""},
                          {"CUDA_VISIBLE_DEVICES"}, 5000);
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  ASSERT_EQ(run.lines.size(), 1u);
  EXPECT_EQ(run.lines[0], "cvd=unset keep=yes");
}

}  // namespace
}  // namespace tpcomm
