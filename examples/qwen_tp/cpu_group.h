// cpu_group.h: runs a function on `tp` CPU ranks, each a thread holding a tpcomm host
// communicator (device -1) of one group -- how the CPU reference runs tensor parallel.
#pragma once

#include <functional>
#include <string>

namespace tpcomm {
class Communicator;
}

namespace qwen {

/// Calls fn(rank, comm) on tp threads (comm is null when tp == 1) and joins them. Returns false
/// with the first failing rank's message when communicator creation or any fn fails.
bool runCpuTpGroup(int tp, const std::function<bool(int rank, tpcomm::Communicator* comm, std::string* error)>& fn,
                   std::string* error);

}  // namespace qwen
