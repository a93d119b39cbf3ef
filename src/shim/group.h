// group: NCCL's group semantics on the shim's side. ncclGroupStart/End always go to the real
// NCCL too (its own depth stays right); the shim keeps a per-thread depth beside it. Inside a
// group, NCCL only enqueues at the outermost ncclGroupEnd, so the shim does the same with the
// calls it routes to tpcomm: they are queued and launched, in call order, after the real
// ncclGroupEnd returns. Communicators created inside a group share that group's creation
// number (one llama.cpp-style clique), and lazy set-ups asked for inside a group run after
// the outermost ncclGroupEnd, never inside it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "shim/comm_table.h"
#include "tpcomm/types.h"

namespace tpcomm {
namespace shim {

/// One ncclAllReduce routed to tpcomm and held until the outermost ncclGroupEnd.
struct DeferredAllReduce {
  std::shared_ptr<ShimComm> comm;
  const void* send;
  void* recv;
  size_t count;
  DataType dtype;
  ReduceOp op;
  cudaStream_t stream;
  Collective kind = Collective::kAllReduce;  ///< count is the call's own (reduce-scatter: recvcount)
};

/// What the outermost ncclGroupEnd has to finish.
struct GroupWork {
  std::vector<DeferredAllReduce> calls;
  std::vector<std::shared_ptr<ShimComm>> setups;
};

/// This thread's group depth (0: outside any group).
int groupDepth();
/// Creation number of the current outermost group (0 outside).
uint64_t groupCreation();
/// ncclGroupStart succeeded: one level deeper.
void groupEnter();
/// ncclGroupEnd returned: one level up. True (and `work` filled) when it was the outermost.
bool groupLeave(GroupWork* work);
/// Queues a tpcomm call until the outermost ncclGroupEnd.
void groupDefer(const DeferredAllReduce& call);
/// Asks for `comm`'s set-up after the outermost ncclGroupEnd (once per group).
void groupWantSetup(const std::shared_ptr<ShimComm>& comm);

}  // namespace shim
}  // namespace tpcomm
