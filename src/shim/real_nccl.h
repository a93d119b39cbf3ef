// real_nccl: the NCCL underneath libtpcomm_nccl.so. The shim exports only the entry points it
// intercepts; it reaches the real ones, and the few others it calls itself, through this table
// of function pointers resolved with dlsym. Where from (first that works, never the shim
// itself): TPCOMM_NCCL_LIBRARY (a path); the next definition after the shim in the process's
// lookup order (RTLD_NEXT: the engine's own libnccl under LD_PRELOAD); dlopen("libnccl.so.2")
// (under the engine's already-loaded NCCL this returns that same library); dlopen("libnccl.so").
#pragma once

#include <nccl.h>

#include <string>

#include "tpcomm/nccl_bootstrap.h"
#include "tpcomm/status.h"

namespace tpcomm {
namespace shim {

// The functions the NCCL bootstrap needs (NcclFunctions, tpcomm/nccl_bootstrap.h) are the base:
// one table, so a RealNccl is handed to makeNcclBootstrap as it is.
struct RealNccl : NcclFunctions {
  std::string path;        ///< file the functions came from
  std::string how;         ///< "TPCOMM_NCCL_LIBRARY", "RTLD_NEXT", "dlopen(libnccl.so.2)", ...
  void* handle = nullptr;  ///< dlopen handle (kept open for the life of the process)
  int version = 0;         ///< ncclGetVersion's code, e.g. 22809

  // Intercepted by the shim (the real ones, called for what tpcomm does not run).
  decltype(&ncclCommInitRank) commInitRank = nullptr;
  decltype(&ncclCommInitRankConfig) commInitRankConfig = nullptr;  // optional (NCCL >= 2.14)
  decltype(&ncclCommInitAll) commInitAll = nullptr;
  decltype(&ncclCommSplit) commSplit = nullptr;  // optional (NCCL >= 2.18)
  decltype(&ncclCommDestroy) commDestroy = nullptr;
  decltype(&ncclCommFinalize) commFinalize = nullptr;  // optional (NCCL >= 2.14)
  // commAbort: NcclFunctions.
  decltype(&ncclGroupStart) groupStart = nullptr;
  decltype(&ncclGroupEnd) groupEnd = nullptr;
  decltype(&ncclAllReduce) allReduce = nullptr;
  decltype(&ncclReduceScatter) reduceScatter = nullptr;
  // allGather: NcclFunctions (the bootstrap uses it too).
  // Not intercepted; the shim calls it itself (the rest are in NcclFunctions).
  decltype(&ncclGetVersion) getVersion = nullptr;

  /// The subset the NCCL bootstrap needs.
  const NcclFunctions& bootstrapFunctions() const { return *this; }
};

/// Resolves the table from the library at `path` (dlopen by path; "" means the default search
/// above, without the environment). kNotSupported with a message when the library cannot be
/// loaded, is the shim itself, or lacks a required function. Pure apart from dlopen: tests call it.
Status loadRealNccl(const std::string& path, RealNccl* out);

/// The process's real NCCL, resolved once on first use (TPCOMM_NCCL_LIBRARY, else the default
/// search). nullptr when none was found; the reason was logged at WARN.
const RealNccl* realNccl();

/// Whether `addr` lies in the shim's own library (used to skip ourselves).
bool isInShim(const void* addr);

}  // namespace shim
}  // namespace tpcomm
