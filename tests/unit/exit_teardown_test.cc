// A Communicator owned by an object of static storage duration (the GPU tests' groupFor() caches,
// an engine's singleton) is destroyed during exit(), after the main thread's thread_locals. Its
// destroy() and any later API call must not touch destroyed thread-local state: the last-error
// message used to be a thread_local std::string, so this ended in a write into (and, with a new
// message, a second free of) its freed buffer, i.e. heap corruption reported by glibc at exit.
// Own main(), not gtest: the check runs in a static destructor, after main() has returned. Exit
// code 0: passed; 1: a wrong result; a glibc abort or a sanitizer report: the bug.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "tpcomm/tpcomm.h"

namespace {

using tpcomm::Bootstrap;
using tpcomm::Communicator;
using tpcomm::Status;

void fail(const char* what) {
  std::fprintf(stderr, "exit_teardown_test: FAILED: %s (last error: '%s')\n", what, tpcomm::lastErrorMessage());
  std::fflush(stderr);
  std::_Exit(1);
}

struct StaticGroup {
  std::unique_ptr<Bootstrap> bootstrap;
  std::unique_ptr<Communicator> comm;
  ~StaticGroup() {
    if (!comm) return;
    comm->destroy();  // clearError() first
    float x = 0;
    // A message long enough to live on the heap, stored after the thread_locals are gone.
    if (comm->allReduce(&x, &x, 1, tpcomm::DataType::kF32, tpcomm::ReduceOp::kSum, nullptr) != Status::kInvalidArgument)
      fail("allReduce after destroy() was not rejected");
    if (!std::strstr(tpcomm::lastErrorMessage(), "destroyed")) fail("the message does not say 'destroyed'");
    comm.reset();
    std::printf("exit_teardown_test: passed\n");
    std::fflush(stdout);
  }
};

StaticGroup& group() {
  static StaticGroup g;
  return g;
}

}  // namespace

int main() {
  StaticGroup& g = group();
  if (tpcomm::makeThreadBootstrap(tpcomm::ThreadGroup::create(1), 0, &g.bootstrap) != Status::kOk)
    fail("makeThreadBootstrap");
  if (Communicator::create(*g.bootstrap, -1, tpcomm::Config{}, &g.comm) != Status::kOk) fail("create");
  // Leave a long message on the main thread (as a timed-out collective's checkError() does), so
  // the thread-local state owns heap memory when the thread_locals are destroyed at exit.
  float x = 0;
  if (g.comm->allReduce(nullptr, &x, 1, tpcomm::DataType::kF32, tpcomm::ReduceOp::kSum, nullptr) !=
      Status::kInvalidArgument)
    fail("allReduce with a null send was not rejected");
  // Longer than libstdc++'s 15-character small-string buffer: a std::string would own heap memory.
  if (std::strlen(tpcomm::lastErrorMessage()) <= 15) fail("expected a long error message");
  return 0;  // thread_locals die, then ~StaticGroup runs the checks above
}
