// bench_args: command line of allreduce_perf. The flags and their defaults are nccl-tests'
// all_reduce_perf ones (-b -e -f -i -n -w -c -d -o -G -g -t), so a command line written for
// nccl-tests runs unchanged, -d all / -o all, -J (JSON) and -R (buffer registration: only 0, as
// tpcomm registers nothing) included; tpcomm's extras are -A (which implementation),
// -K (repeats), --vs-best, --json, --host and --compression (accuracy columns instead of #wrong).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "tpcomm/types.h"

namespace tpcomm_bench {

/// The collective a binary times, from its name: allreduce_perf, reduce_scatter_perf and
/// all_gather_perf are the same program (nccl-tests' all_reduce_perf, reduce_scatter_perf,
/// all_gather_perf).
enum class Coll { kAllReduce, kReduceScatter, kAllGather };

/// From argv[0]'s file name; all-reduce unless it ends in reduce_scatter_perf / all_gather_perf.
Coll collFromProgram(const char* argv0);
/// "allreduce_perf", "reduce_scatter_perf", "all_gather_perf".
const char* benchName(Coll c);
/// This binary's benchmark name, for messages (main sets it from argv[0]).
extern const char* gBenchName;
/// nccl-tests' binary of the same collective: "all_reduce_perf", ...
const char* ncclTestsName(Coll c);

struct Args {
  Coll coll = Coll::kAllReduce;  // from the program's name
  size_t minBytes = 32u << 20;  // -b
  size_t maxBytes = 32u << 20;  // -e
  size_t stepFactor = 1;        // -f (> 1: multiply)
  size_t stepBytes = 1u << 20;  // -i (used when stepFactor <= 1)
  int iters = 20;               // -n
  int warmup = 5;               // -w
  int check = 1;                // -c
  int graphLaunches = 0;        // -G: capture `iters` collectives in a graph, replay G times
  int nGpus = 1;                // -g: GPUs driven by one thread of this process
  int nThreads = 1;             // -t: threads of this process, one rank each
  int repeats = 5;              // -K: timed batches per size; the median is reported
  tpcomm::DataType dtype = tpcomm::DataType::kF32;  // -d (the first of dtypes)
  tpcomm::ReduceOp op = tpcomm::ReduceOp::kSum;     // -o (the first of ops)
  std::vector<tpcomm::DataType> dtypes{tpcomm::DataType::kF32};  // -d NAME or -d all, in table order
  std::vector<tpcomm::ReduceOp> ops{tpcomm::ReduceOp::kSum};     // -o NAME or -o all
  std::vector<std::string> algos;  // -A, repeatable: "auto", "nccl", or a TPCOMM_ALGO string
  std::string jsonPath;            // --json or -J (nccl-tests' --output_file)
  bool hostRanks = false;          // --host: host-memory ranks even where GPUs exist
  int requireGpus = 0;             // --require-gpus N: exit 77 (ctest's skip) with fewer GPUs
  bool vsBest = false;             // --vs-best: auto's time beside the best forced algorithm's (bench_vs_best.h)
  int vsBestMaxPct = -1;           // --vs-best-max P: fail unless auto is within P% at every compared size
  tpcomm::Compression compression = tpcomm::Compression::kNone;  // --compression fp8|int8
  bool fusedRmsnorm = false;       // --fused-rmsnorm: all-reduce + residual + RMSNorm (bench_fused.cc)
  int fusedHidden = 5120;          // --hidden N: row length of --fused-rmsnorm
  bool help = false;
};

/// Parses argv. On a malformed command line returns false with `error` set.
bool parseArgs(int argc, char** argv, Args* out, std::string* error);

/// The --help text.
std::string usage(const char* prog);

/// Byte count with an optional K/M/G suffix (binary, as nccl-tests): "8", "64K", "1G".
bool parseBytes(const std::string& text, size_t* out);

/// nccl-tests' names for the table: "float", "half", "bfloat16"; "sum", "max", "min".
const char* ncclTestsTypeName(tpcomm::DataType t);
const char* ncclTestsOpName(tpcomm::ReduceOp op);

}  // namespace tpcomm_bench
