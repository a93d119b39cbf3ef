// cpu_group.h: runs a function on `tp` CPU ranks, each a thread holding a tpcomm host
// communicator (device -1) of one group -- how the CPU reference runs tensor parallel.
#pragma once

#include <functional>
#include <string>

#include "tpcomm/tpcomm.h"

namespace qwen {

/// The host ranks' communicator config for `compression`: none is the default config; fp8/int8
/// force "staged_host+fp8|staged_host" (or +int8): by cost host ranks never pick a compressed
/// algorithm (their "wire" is memory; docs/compression.md), but the decoder's agreement under
/// compression can then be tried without a GPU, and a call that asks for no compression (the
/// argmax exchange) runs plain staged_host.
tpcomm::Config hostRankConfig(tpcomm::Compression compression);

/// Calls fn(rank, comm) on tp threads (comm is null when tp == 1) and joins them; the ranks'
/// communicators are made with `config`. Returns false with the first failing rank's message
/// when communicator creation or any fn fails.
bool runCpuTpGroup(int tp, const std::function<bool(int rank, tpcomm::Communicator* comm, std::string* error)>& fn,
                   std::string* error, const tpcomm::Config& config = tpcomm::Config());

}  // namespace qwen
