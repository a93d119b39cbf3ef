// bench_args: nccl-tests-compatible command line parsing for allreduce_perf (see bench_args.h).
#include "bench_args.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace tpcomm_bench {
namespace {

bool parseInt(const std::string& text, int lo, int* out) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > 1000000000L) return false;
  *out = static_cast<int>(v);
  return true;
}

bool parseDtype(const std::string& s, tpcomm::DataType* out) {
  if (s == "float" || s == "f32" || s == "float32" || s == "fp32") *out = tpcomm::DataType::kF32;
  else if (s == "half" || s == "f16" || s == "float16" || s == "fp16") *out = tpcomm::DataType::kF16;
  else if (s == "bfloat16" || s == "bf16") *out = tpcomm::DataType::kBF16;
  else return false;
  return true;
}

bool parseOp(const std::string& s, tpcomm::ReduceOp* out) {
  if (s == "sum") *out = tpcomm::ReduceOp::kSum;
  else if (s == "max") *out = tpcomm::ReduceOp::kMax;
  else if (s == "min") *out = tpcomm::ReduceOp::kMin;
  else return false;
  return true;
}

// nccl-tests' "-d all" / "-o all": every value, in table order; else the one named.
template <typename T>
bool parseOneOrAll(const std::string& v, const std::vector<T>& all, bool (*parse)(const std::string&, T*),
                   std::vector<T>* out) {
  if (v == "all") {
    *out = all;
    return true;
  }
  T one;
  if (!parse(v, &one)) return false;
  *out = {one};
  return true;
}

}  // namespace

Coll collFromProgram(const char* argv0) {
  const std::string p = argv0 ? argv0 : "";
  auto endsWith = [&](const char* tail) {
    const std::string t = tail;
    return p.size() >= t.size() && p.compare(p.size() - t.size(), t.size(), t) == 0;
  };
  if (endsWith("reduce_scatter_perf")) return Coll::kReduceScatter;
  if (endsWith("all_gather_perf")) return Coll::kAllGather;
  return Coll::kAllReduce;
}

const char* benchName(Coll c) {
  return c == Coll::kReduceScatter ? "reduce_scatter_perf" : c == Coll::kAllGather ? "all_gather_perf" : "allreduce_perf";
}

const char* gBenchName = "allreduce_perf";

const char* ncclTestsName(Coll c) {
  return c == Coll::kReduceScatter ? "reduce_scatter_perf" : c == Coll::kAllGather ? "all_gather_perf" : "all_reduce_perf";
}

bool parseBytes(const std::string& text, size_t* out) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || text[0] == '-') return false;
  unsigned long long mult = 1;
  std::string suffix(end);
  if (suffix == "K" || suffix == "k") mult = 1ull << 10;
  else if (suffix == "M" || suffix == "m") mult = 1ull << 20;
  else if (suffix == "G" || suffix == "g") mult = 1ull << 30;
  else if (!suffix.empty()) return false;
  if (v > (~0ull) / mult) return false;
  *out = static_cast<size_t>(v * mult);
  return true;
}

const char* ncclTestsTypeName(tpcomm::DataType t) {
  switch (t) {
    case tpcomm::DataType::kF32: return "float";
    case tpcomm::DataType::kF16: return "half";
    case tpcomm::DataType::kBF16: return "bfloat16";
  }
  return "invalid";
}

const char* ncclTestsOpName(tpcomm::ReduceOp op) {
  switch (op) {
    case tpcomm::ReduceOp::kSum: return "sum";
    case tpcomm::ReduceOp::kMax: return "max";
    case tpcomm::ReduceOp::kMin: return "min";
  }
  return "invalid";
}

std::string usage(const char* prog) {
  std::string s = "Usage: ";
  s += prog;
  s += R"( [options]
All-reduce (allreduce_perf), reduce-scatter (reduce_scatter_perf) and all-gather
(all_gather_perf) benchmarks in the format of nccl-tests' binaries of the same names, for tpcomm
and NCCL. Sizes are the whole buffer (nccl-tests): a reduce-scatter reduces -b..-e bytes into
shards of 1/n, an all-gather gathers 1/n from each rank into -b..-e bytes; count is per rank.

Modes:
  mpirun -np N allreduce_perf ...   one rank per process; GPU = local rank (host ranks without GPUs)
  allreduce_perf -g N ...           one process, one thread driving N GPUs (Communicator::createGroup)
  allreduce_perf -t N ...           one process, N threads, one rank each (GPU i, or host ranks)
  Without GPUs (or with --host) ranks are host ranks (device -1) over host memory.

nccl-tests flags:
  -b, --minbytes <size>      smallest message, bytes; K/M/G suffixes (default 32M)
  -e, --maxbytes <size>      largest message (default 32M)
  -f, --stepfactor <n>       multiply the size by n each step (default: off)
  -i, --stepbytes <size>     add this many bytes each step when -f is off (default 1M)
  -n, --iters <n>            collectives per timed batch (default 20)
  -w, --warmup_iters <n>     untimed collectives before timing each size (default 5)
  -c, --check <0/1>          check results: integer-valued inputs, poisoned outputs, every
                             element compared bitwise with the exact answer (default 1)
  -d, --datatype <t>         float|half|bfloat16 (also f32|f16|bf16), or all (default float)
  -o, --op <op>              sum|max|min, or all (default sum)
  -R, --local_register <r>   0 only: tpcomm's benchmark registers no buffers (nccl-tests' 1/2 refused)
  -G, --cudagraph <n>        capture the -n collectives of a batch in a CUDA graph and replay it
                             n times per batch (default 0: eager launches)
  -g, --ngpus <n>            GPUs driven by one thread of this process (default 1); more than the
                             visible GPUs with TPCOMM_ALLOW_SHARED_DEVICE=1 (rank i on GPU i mod gpus)
  -t, --nthreads <n>         threads in this process, one rank each (default 1); more than the
                             visible GPUs with TPCOMM_ALLOW_SHARED_DEVICE=1 (thread t on GPU t mod gpus)

tpcomm extras:
  -A, --algo <a>             auto (tpcomm's selector, default), nccl (NCCL itself, same buffers and
                             timing), or a TPCOMM_ALGO string forced through Config::algo
                             (e.g. staged_host, "0-64K:oneshot_p2p,64K-inf:ring_nccl").
                             Repeatable: -A auto -A nccl runs both in one process, one table each,
                             then a side-by-side summary.
  -K, --repeats <n>          timed batches per size (default 5)
  -J, --json <file>          write every row (and the run's configuration) as JSON
  --vs-best                  with -A auto and forced algorithms (-A auto -A lamport_p2p -A twoshot_p2p
                             ...): per size, auto's time beside the fastest forced algorithm's (counted
                             only where that algorithm ran the size) and the ratio auto / best
  --vs-best-max <p>          --vs-best, and the run fails (exit 1) unless auto is within p% of the
                             best at every size some forced algorithm ran (and at least one did)
  --host                     host ranks (device -1) even where GPUs exist
  --require-gpus <n>         exit with status 77 (ctest: Skipped) when fewer than n GPUs are visible
  --compression <fp8|int8>   compressed all-reduce (Config::compression): random normal inputs
                             with outliers, and the columns maxabs (largest |error|) and
                             rmsrel (||error|| / ||exact||) against the fp64 sum replace #wrong
  --fused-rmsnorm            time all-reduce + residual add + RMSNorm instead: fused
                             (allReduceResidualRmsNorm) vs tpcomm all-reduce + norm kernel vs NCCL
                             + the same kernel, rows 1..512 (doubling); -d, -n, -w, -K, -G apply
  --hidden <n>               row length for --fused-rmsnorm (default 5120, at most 16384)
  -h, --help                 this text

Timing: each size runs -w warm-up collectives, then -K batches of -n collectives (or -G replays
of a graph of -n collectives). GPU ranks time a batch with CUDA events on their stream; host
ranks with std::chrono::steady_clock around the synchronous calls. A batch's time is the
slowest rank's; the reported time is the median over the -K batches, divided by the collectives
per batch. algbw = bytes / time; busbw = algbw * 2(n-1)/n for all-reduce, algbw * (n-1)/n for reduce-scatter
and all-gather (nccl-tests' factors).
)";
  return s;
}

bool parseArgs(int argc, char** argv, Args* a, std::string* error) {
  auto need = [&](int& i, const char* flag, std::string* v) {
    if (i + 1 >= argc) {
      *error = std::string(flag) + " needs a value";
      return false;
    }
    *v = argv[++i];
    return true;
  };
  a->coll = collFromProgram(argc > 0 ? argv[0] : nullptr);
  for (int i = 1; i < argc; ++i) {
    std::string f = argv[i], v;
    // Accept --flag=value too.
    size_t eq = f.find('=');
    bool inlineValue = f.rfind("--", 0) == 0 && eq != std::string::npos;
    if (inlineValue) {
      v = f.substr(eq + 1);
      f = f.substr(0, eq);
    }
    auto value = [&]() { return inlineValue ? true : need(i, f.c_str(), &v); };
    auto bad = [&](const char* what) {
      *error = f + " " + v + ": " + what;
      return false;
    };
    if (f == "-h" || f == "--help") {
      a->help = true;
    } else if (f == "--host") {
      a->hostRanks = true;
    } else if (f == "-b" || f == "--minbytes") {
      if (!value() || !parseBytes(v, &a->minBytes)) return error->empty() ? bad("expected a byte count") : false;
    } else if (f == "-e" || f == "--maxbytes") {
      if (!value() || !parseBytes(v, &a->maxBytes)) return error->empty() ? bad("expected a byte count") : false;
    } else if (f == "-i" || f == "--stepbytes") {
      if (!value() || !parseBytes(v, &a->stepBytes)) return error->empty() ? bad("expected a byte count") : false;
    } else if (f == "-f" || f == "--stepfactor") {
      int x;
      if (!value() || !parseInt(v, 1, &x)) return error->empty() ? bad("expected an integer >= 1") : false;
      a->stepFactor = static_cast<size_t>(x);
    } else if (f == "-n" || f == "--iters") {
      if (!value() || !parseInt(v, 1, &a->iters)) return error->empty() ? bad("expected an integer >= 1") : false;
    } else if (f == "-w" || f == "--warmup_iters") {
      if (!value() || !parseInt(v, 0, &a->warmup)) return error->empty() ? bad("expected an integer >= 0") : false;
    } else if (f == "-c" || f == "--check") {
      if (!value() || !parseInt(v, 0, &a->check)) return error->empty() ? bad("expected 0 or 1") : false;
    } else if (f == "-G" || f == "--cudagraph") {
      if (!value() || !parseInt(v, 0, &a->graphLaunches)) return error->empty() ? bad("expected an integer >= 0") : false;
    } else if (f == "-g" || f == "--ngpus") {
      if (!value() || !parseInt(v, 1, &a->nGpus)) return error->empty() ? bad("expected an integer >= 1") : false;
    } else if (f == "-t" || f == "--nthreads") {
      if (!value() || !parseInt(v, 1, &a->nThreads)) return error->empty() ? bad("expected an integer >= 1") : false;
    } else if (f == "-K" || f == "--repeats") {
      if (!value() || !parseInt(v, 1, &a->repeats)) return error->empty() ? bad("expected an integer >= 1") : false;
    } else if (f == "-R" || f == "--local_register") {
      // nccl-tests: 1 registers the buffers with NCCL, 2 as symmetric windows. Not done here yet;
      // refusing keeps a copied command line from measuring something else than it says.
      int reg;
      if (!value() || !parseInt(v, 0, &reg) || reg > 2) return error->empty() ? bad("expected 0, 1 or 2") : false;
      if (reg != 0)
        return bad("buffer registration (nccl-tests' -R 1/2) is not supported by allreduce_perf yet; -R 0 only "
                   "(repeats moved to -K)");
    } else if (f == "-d" || f == "--datatype") {
      if (!value()) return false;
      if (!parseOneOrAll(v, {tpcomm::DataType::kF32, tpcomm::DataType::kF16, tpcomm::DataType::kBF16}, parseDtype,
                         &a->dtypes))
        return bad("expected float, half, bfloat16 or all");
      a->dtype = a->dtypes.front();
    } else if (f == "-o" || f == "--op") {
      if (!value()) return false;
      if (!parseOneOrAll(v, {tpcomm::ReduceOp::kSum, tpcomm::ReduceOp::kMax, tpcomm::ReduceOp::kMin}, parseOp, &a->ops))
        return bad("expected sum, max, min or all");
      a->op = a->ops.front();
    } else if (f == "-A" || f == "--algo") {
      if (!value()) return false;
      if (v.empty()) return bad("expected auto, nccl or an algorithm name");
      a->algos.push_back(v);
    } else if (f == "--require-gpus") {
      if (!value() || !parseInt(v, 0, &a->requireGpus)) return error->empty() ? bad("expected an integer >= 0") : false;
    } else if (f == "--vs-best") {
      a->vsBest = true;
    } else if (f == "--vs-best-max") {
      if (!value() || !parseInt(v, 0, &a->vsBestMaxPct) || a->vsBestMaxPct > 1000)
        return error->empty() ? bad("expected a percentage 0..1000") : false;
      a->vsBest = true;
    } else if (f == "--compression") {
      if (!value()) return false;
      if (!tpcomm::parseCompression(v.c_str(), &a->compression)) return bad("expected none, fp8 or int8");
    } else if (f == "--fused-rmsnorm") {
      a->fusedRmsnorm = true;
    } else if (f == "--hidden") {
      if (!value() || !parseInt(v, 1, &a->fusedHidden) || a->fusedHidden > 16384)
        return error->empty() ? bad("expected an integer 1..16384") : false;
    } else if (f == "--json" || f == "-J" || f == "--output_file") {
      if (!value()) return false;
      if (v.empty()) return bad("expected a file name");
      a->jsonPath = v;
    } else {
      *error = "unknown option " + std::string(argv[i]) + " (see --help)";
      return false;
    }
  }
  if (a->algos.empty()) a->algos.push_back("auto");
  if (a->minBytes > a->maxBytes) {
    *error = "-b " + std::to_string(a->minBytes) + " is larger than -e " + std::to_string(a->maxBytes);
    return false;
  }
  if (a->stepFactor <= 1 && a->stepBytes == 0) {
    *error = "-i 0 with no -f would never reach -e";
    return false;
  }
  if (a->fusedRmsnorm && a->coll != Coll::kAllReduce) {
    *error = std::string("--fused-rmsnorm is an all-reduce epilogue: use allreduce_perf, not ") + benchName(a->coll);
    return false;
  }
  if (a->coll == Coll::kAllGather) a->ops = {tpcomm::ReduceOp::kSum};  // no reduction: one table, redop "none"
  if (a->fusedRmsnorm && (a->dtypes.size() > 1 || a->ops.size() > 1)) {
    *error = "--fused-rmsnorm takes one -d and sums: -d all / -o all apply to the all-reduce tables only";
    return false;
  }
  if (a->vsBest) {
    bool haveAuto = false, haveForced = false;
    for (const std::string& x : a->algos) {
      haveAuto = haveAuto || x == "auto";
      haveForced = haveForced || (x != "auto" && x != "nccl");
    }
    if (!haveAuto || !haveForced || a->fusedRmsnorm) {
      *error = "--vs-best compares -A auto with forced algorithms: give -A auto and at least one -A <algorithm> "
               "(e.g. -A auto -A lamport_p2p -A twoshot_p2p), without --fused-rmsnorm";
      return false;
    }
  }
  if (a->compression != tpcomm::Compression::kNone &&
      (a->coll != Coll::kAllReduce || a->fusedRmsnorm || a->ops.size() != 1 || a->ops[0] != tpcomm::ReduceOp::kSum)) {
    *error = "--compression: all-reduce sums only (allreduce_perf, -o sum, no --fused-rmsnorm): only sums are compressed";
    return false;
  }
  if (a->nGpus > 1 && a->nThreads > 1) {
    *error = "-g and -t together are not supported: use -g N (one thread, N GPUs) or -t N (N threads)";
    return false;
  }
  return true;
}

}  // namespace tpcomm_bench
