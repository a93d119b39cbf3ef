// Every environment parameter of tpcomm, in one table: name (after the TPCOMM_ prefix), default,
// help. Values are parsed by value, never by presence: TPCOMM_X=0 means off. Read once and
// cached; tests may call reloadParams() after changing the environment.
//
// One rule for a bad value, whatever the variable: a variable set to a value tpcomm cannot use
// (not a number, out of range, not a multiple it needs, an unknown name) makes
// Communicator::create fail with kInvalidArgument on every rank, the message naming the variable,
// the value and what is accepted (checkParams), unless code set the same thing explicitly
// (Config::algo, Config::compression, Config::timeoutMs win over the environment, so create does
// not read those variables then). Code that reads a parameter outside create (the
// bootstraps, the NCCL drop-in's set-up, tpcomm-doctor) warns once with the same text and goes on
// with the default. A variable set to the empty string counts as unset (its default), as in NCCL.
// tpcomm-doctor --params shows each value in force and, beside it, what was rejected and why; the
// doctor exits 2 while one is rejected.
#pragma once

#include <cstdint>
#include <climits>
#include <string>
#include <vector>

#include "tpcomm/status.h"

namespace tpcomm {

// X(Id, "NAME", "default", kind, min, max, "help"). kind: kText (free text; paramProblem checks
// the ones with a fixed vocabulary or a path, TPCOMM_ALGO is checked by its parser at create),
// kBool (0 or 1), kInt (decimal), kSize (bytes; K/M/G binary suffixes). min and max bound
// kBool/kInt/kSize values: every maximum fits the type the value is used as (int for counts,
// milliseconds and blocks; size_t for bytes) and keeps the products the transports form from
// them (e.g. chunk x slots x ranks) far from overflow and create's set-up time short
// (TPCOMM_STAGED_CHUNK_BYTES: the host segment is (ranks + 1) x slots x chunk bytes; 1 GiB made
// create take 35 s). A size may also have to be a multiple of a unit (paramRangeText says so).
#define TPCOMM_PARAM_TABLE(X)                                                                    \
  X(Debug, "DEBUG", "WARN", kText, 0, 0, "log level: NONE, WARN, INFO, TRACE (like NCCL_DEBUG)")              \
  X(DebugSubsys, "DEBUG_SUBSYS", "ALL", kText, 0, 0, "comma list of INIT,TOPO,TUNE,COLL,BOOT,ALL; ^ excludes") \
  X(Algo, "ALGO", "", kText, 0, 0, "selection override: '0-64K:oneshot_p2p,64K-inf:twoshot_p2p' or '^ring_nccl'") \
  X(TimeoutMs, "TIMEOUT_MS", "10000", kInt, 1, INT32_MAX, "bound on every wait for a peer (ms)")                     \
  X(Nccl, "NCCL", "1", kBool, 0, 1, "create an NCCL communicator for the ring_nccl path (0: never)")          \
  X(Multicast, "MULTICAST", "1", kBool, 0, 1, "allow NVSwitch multicast where it can run (devices report it, > 2 GPU ranks on one NVSwitch); 0, or NCCL_NVLS_ENABLE=0, closes it (docs/multicast.md)") \
  X(StagedChunkBytes, "STAGED_CHUNK_BYTES", "1048576", kSize, 4096, 64ll << 20, "staged_host: bytes per pipeline slot per rank (multiple of 4096, at most 64M: the host segment holds (ranks + 1) x slots of it; unset: 4M in the copy-engine mode)") \
  X(StagedSlots, "STAGED_SLOTS", "4", kInt, 2, 64, "staged_host: pipeline slots per rank (>= 2)")             \
  X(StagedBlocks, "STAGED_BLOCKS", "16", kInt, 1, 1024, "staged_host: CUDA blocks per role (publish, reduce)")  \
  X(StagedCopyEngines, "STAGED_COPY_ENGINES", "0", kBool, 0, 1, "staged_host on GPU ranks: the copy engines move the bytes (experimental, docs/host_staged.md)") \
  X(StagedCeSplit, "STAGED_CE_SPLIT", "4", kInt, 1, 32, "staged_host's copy-engine mode: split a call into at least this many chunks of >= 2 MiB of input, so the copies out of one overlap the copies in of another (1: whole slots)") \
  X(P2pBlocks, "P2P_BLOCKS", "32", kInt, 1, 1024, "CUDA blocks of the one-shot and Lamport P2P kernels")     \
  X(Pdl, "PDL", "1", kBool, 0, 1, "programmatic dependent launch of the P2P kernels on sm_90+ (0: off)")        \
  X(TwoshotBlocks, "TWOSHOT_BLOCKS", "128", kInt, 1, 1024, "CUDA blocks of the two-shot P2P kernel")            \
  X(FusedBlocksPerRow, "FUSED_BLOCKS_PER_ROW", "2", kInt, 0, 1024, "allReduceResidualRmsNorm runs a fused P2P kernel only when its blocks >= this x rows, else all-reduce + norm kernel (0: always fused)") \
  X(LamportMaxBytes, "LAMPORT_MAX_BYTES", "2097152", kSize, 0, 1ll << 30, "largest message for lamport_p2p (scratch: 3 x ranks x this)") \
  X(OneshotMaxBytes, "ONESHOT_MAX_BYTES", "2097152", kSize, 0, 1ll << 30, "largest message for oneshot_p2p (scratch: 2 x ranks x this)") \
  X(LlMaxBytes, "LL_MAX_BYTES", "524288", kSize, 0, 1ll << 30, "largest reduce-scatter input / all-gather output for ll_p2p (scratch: about 4 x this)") \
  X(TwoshotChunkBytes, "TWOSHOT_CHUNK_BYTES", "33554432", kSize, 4096, 1ll << 30, "twoshot_p2p bytes per chunk (scratch: about 4 x this)") \
  X(TopoCache, "TOPO_CACHE", "1", kBool, 0, 1, "reuse the cached topology probe ($XDG_CACHE_HOME/tpcomm); 0: re-probe and refresh it") \
  X(TopoTimeoutMs, "TOPO_TIMEOUT_MS", "8000", kInt, 1, INT32_MAX, "time limit of the P2P-check child process (keep below TIMEOUT_MS)") \
  X(TopoHelper, "TOPO_HELPER", "", kText, 0, 0, "path of the probe helper (tpcomm-doctor); default: found beside libtpcomm") \
  X(Tune, "TUNE", "1", kBool, 0, 1, "order algorithms by the times tpcomm-doctor --tune measured ($XDG_CACHE_HOME/tpcomm/tune.json) where it covers a call; 0: the cost model only") \
  X(Shim, "SHIM", "1", kBool, 0, 1, "libtpcomm_nccl.so routes eligible ncclAllReduce calls to tpcomm (0: pure passthrough)") \
  X(NcclLibrary, "NCCL_LIBRARY", "", kText, 0, 0, "path of the real NCCL under libtpcomm_nccl.so; default: the engine's loaded libnccl.so.2") \
  X(SocketFamily, "SOCKET_FAMILY", "", kText, 0, 0, "socket bootstrap: AF_INET, AF_INET6 or empty (either)") \
  X(SocketIfname, "SOCKET_IFNAME", "", kText, 0, 0, "socket bootstrap: interfaces, as NCCL_SOCKET_IFNAME (prefixes; ^ excludes, = exact)") \
  X(AllowSharedDevice, "ALLOW_SHARED_DEVICE", "0", kBool, 0, 1, "let createGroup put several ranks on one GPU (tests: proves the multi-rank protocols on one GPU, not their speed)") \
  X(Deterministic, "DETERMINISTIC", "0", kBool, 0, 1, "1: only algorithms that keep the determinism contract (docs/determinism.md); a call none can serve fails instead of falling back to NCCL") \
  X(Compression, "COMPRESSION", "none", kText, 0, 0, "compressed all-reduce: none, fp8 (e4m3) or int8 (block-scaled, opt-in, bf16/f16/f32 sums only; docs/compression.md). Same on every rank") \
  X(CheckCalls, "CHECK_CALLS", "0", kBool, 0, 1, "GPU paths (the P2P kernels, staged_host's kernels): every rank checks that all ranks make the same call (count, dtype, op, fused, wire format) before touching data (a debug mode; host paths always check)")

enum class ParamId : int {
#define TPCOMM_PARAM_ENUM(id, name, def, kind, lo, hi, help) k##id,
  TPCOMM_PARAM_TABLE(TPCOMM_PARAM_ENUM)
#undef TPCOMM_PARAM_ENUM
      kCount
};

/// How a parameter's text is read.
enum class ParamKind : int { kText, kBool, kInt, kSize };

struct ParamInfo {
  const char* name;          // without the TPCOMM_ prefix
  const char* defaultValue;  // as text
  ParamKind kind;
  int64_t min, max;          // accepted range (kBool, kInt, kSize)
  const char* help;
  std::string value;         // in force (environment or default)
  bool fromEnv;
};

/// The table with the values in force.
const std::vector<ParamInfo>& params();
/// Re-reads the environment (tests).
void reloadParams();
/// Text value of a parameter (the default when unset or set to "").
const std::string& paramString(ParamId id);
/// Integer value of a kBool/kInt/kSize parameter, always within its [min, max]. A rejected value
/// logs one warning naming the parameter, the value and what is accepted, and yields the
/// default (create refuses it: checkParams).
int64_t paramInt(ParamId id);
/// "" when the value in force is acceptable, else what is wrong with it, e.g.
/// "TPCOMM_TIMEOUT_MS='4294967296': expected an integer in [1, 2147483647]". Every numeric
/// parameter; TPCOMM_DEBUG, TPCOMM_DEBUG_SUBSYS, TPCOMM_COMPRESSION and TPCOMM_SOCKET_FAMILY by
/// their vocabulary; TPCOMM_TOPO_HELPER and TPCOMM_NCCL_LIBRARY (a path with a '/') must name an
/// existing file. TPCOMM_ALGO is not covered here: its parser needs the registry's names.
std::string paramProblem(ParamId id);
/// Every rejected value of the table, one paramProblem() line each.
std::vector<std::string> paramProblems();
/// kOk, or kInvalidArgument naming every rejected value and what is accepted (Communicator::create
/// calls it before any other work; `what` leads the message, e.g. "create"). `notRead`: parameters
/// the caller does not read because code set the same thing explicitly (Config::compression,
/// Config::timeoutMs: an explicit argument wins over the environment).
Status checkParams(const char* what, const std::vector<ParamId>& notRead = {});
/// "" when `text` names a compression format (TPCOMM_COMPRESSION), else what is wrong with it.
std::string compressionProblem(const std::string& text);
/// What a value must be: "an integer in [1, 2147483647]" (kBool: "0 or 1"; kSize: byte counts
/// with suffixes and the unit they must be a multiple of); for kText the accepted vocabulary or
/// "" (free text).
std::string paramRangeText(const ParamInfo& p);

/// Strict integer parse with optional K/M/G (binary) suffix; false on any junk.
bool parseSize(const std::string& text, uint64_t* out);

}  // namespace tpcomm
