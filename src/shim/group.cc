// group: per-thread group state (see group.h). Thread-local like NCCL's own group state: a
// group belongs to the thread that opened it.
#include "shim/group.h"

#include <algorithm>

namespace tpcomm {
namespace shim {
namespace {

struct ThreadGroupState {
  int depth = 0;
  uint64_t creation = 0;
  GroupWork work;
};

ThreadGroupState& state() {
  thread_local ThreadGroupState s;
  return s;
}

}  // namespace

int groupDepth() { return state().depth; }
uint64_t groupCreation() { return state().creation; }

void groupEnter() {
  ThreadGroupState& s = state();
  if (s.depth++ == 0) s.creation = nextCreation();
}

bool groupLeave(GroupWork* work) {
  ThreadGroupState& s = state();
  if (s.depth == 0) return false;  // unbalanced: the real NCCL reported it
  if (--s.depth > 0) return false;
  s.creation = 0;
  *work = std::move(s.work);
  s.work = GroupWork{};
  return true;
}

void groupDefer(const DeferredAllReduce& call) { state().work.calls.push_back(call); }

void groupWantSetup(const std::shared_ptr<ShimComm>& comm) {
  auto& v = state().work.setups;
  if (std::find(v.begin(), v.end(), comm) == v.end()) v.push_back(comm);
}

}  // namespace shim
}  // namespace tpcomm
