// Every environment parameter of tpcomm, in one table: name (after the TPCOMM_ prefix), default,
// help. Values are parsed by value, never by presence: TPCOMM_X=0 means off. Read once and
// cached; tests may call reloadParams() after changing the environment.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tpcomm {

// X(Id, "NAME", "default", "help")
#define TPCOMM_PARAM_TABLE(X)                                                                    \
  X(Debug, "DEBUG", "WARN", "log level: NONE, WARN, INFO, TRACE (like NCCL_DEBUG)")              \
  X(DebugSubsys, "DEBUG_SUBSYS", "ALL", "comma list of INIT,TOPO,TUNE,COLL,BOOT,ALL; ^ excludes") \
  X(Algo, "ALGO", "", "selection override: '0-64K:oneshot_p2p,64K-inf:twoshot_p2p' or '^ring_nccl'") \
  X(TimeoutMs, "TIMEOUT_MS", "10000", "bound on every wait for a peer (ms)")                     \
  X(Nccl, "NCCL", "1", "create an NCCL communicator for the ring_nccl path (0: never)")          \
  X(Multicast, "MULTICAST", "1", "allow NVSwitch multicast where the device supports it (0: never)") \
  X(StagedChunkBytes, "STAGED_CHUNK_BYTES", "1048576", "staged_host: bytes per pipeline slot per rank") \
  X(StagedSlots, "STAGED_SLOTS", "4", "staged_host: pipeline slots per rank (>= 2)")             \
  X(StagedBlocks, "STAGED_BLOCKS", "16", "staged_host: CUDA blocks per role (publish, reduce)")  \
  X(P2pBlocks, "P2P_BLOCKS", "32", "CUDA blocks of the one-shot and Lamport P2P kernels")     \
  X(Pdl, "PDL", "1", "programmatic dependent launch of the P2P kernels on sm_90+ (0: off)")        \
  X(TwoshotBlocks, "TWOSHOT_BLOCKS", "128", "CUDA blocks of the two-shot P2P kernel")            \
  X(FusedBlocksPerRow, "FUSED_BLOCKS_PER_ROW", "2", "allReduceResidualRmsNorm runs a fused P2P kernel only when its blocks >= this x rows, else all-reduce + norm kernel (0: always fused)") \
  X(LamportMaxBytes, "LAMPORT_MAX_BYTES", "2097152", "largest message for lamport_p2p (scratch: 3 x ranks x this)") \
  X(OneshotMaxBytes, "ONESHOT_MAX_BYTES", "2097152", "largest message for oneshot_p2p (scratch: 2 x ranks x this)") \
  X(TwoshotChunkBytes, "TWOSHOT_CHUNK_BYTES", "33554432", "twoshot_p2p bytes per chunk (scratch: about 4 x this)") \
  X(TopoCache, "TOPO_CACHE", "1", "reuse the cached topology probe ($XDG_CACHE_HOME/tpcomm); 0: re-probe and refresh it") \
  X(TopoTimeoutMs, "TOPO_TIMEOUT_MS", "8000", "time limit of the P2P-check child process (keep below TIMEOUT_MS)") \
  X(TopoHelper, "TOPO_HELPER", "", "path of the probe helper (tpcomm-doctor); default: found beside libtpcomm") \
  X(SocketIfname, "SOCKET_IFNAME", "", "socket bootstrap interface, as NCCL_SOCKET_IFNAME: 'eth0' prefix, '=eth0' exact, '^docker,lo' exclude") \
  X(SocketFamily, "SOCKET_FAMILY", "", "socket bootstrap address family: AF_INET or AF_INET6 (empty: either, IPv4 first)") \
  X(Shim, "SHIM", "1", "libtpcomm_nccl.so routes eligible ncclAllReduce calls to tpcomm (0: pure passthrough)") \
  X(NcclLibrary, "NCCL_LIBRARY", "", "path of the real NCCL under libtpcomm_nccl.so; default: the engine's loaded libnccl.so.2")

enum class ParamId : int {
#define TPCOMM_PARAM_ENUM(id, name, def, help) k##id,
  TPCOMM_PARAM_TABLE(TPCOMM_PARAM_ENUM)
#undef TPCOMM_PARAM_ENUM
      kCount
};

struct ParamInfo {
  const char* name;          // without the TPCOMM_ prefix
  const char* defaultValue;  // as text
  const char* help;
  std::string value;         // in force (environment or default)
  bool fromEnv;
};

/// The table with the values in force.
const std::vector<ParamInfo>& params();
/// Re-reads the environment (tests).
void reloadParams();
/// Text value of a parameter.
const std::string& paramString(ParamId id);
/// Integer value; a malformed value logs a warning once and yields the default.
int64_t paramInt(ParamId id);

/// Strict integer parse with optional K/M/G (binary) suffix; false on any junk.
bool parseSize(const std::string& text, uint64_t* out);

}  // namespace tpcomm
