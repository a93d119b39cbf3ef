// bench_controller: one controller's run of allreduce_perf (see bench_controller.h).
//
// Performance lines printed after each table:
//   host ranks:  busbw / (single-thread memcpy GB/s of 64 MiB, measured before the tables) at the
//                largest size.
//   GPU ranks, rows >= 64 MiB that ran staged_host: the time bound set by pinned-host copies,
//                bound = max(N / d2h, (n-1) N / h2d): each GPU streams its N bytes to host memory
//                (D2H) and reads the n-1 peers' N bytes back (H2D), the two directions of PCIe
//                overlapping; d2h and h2d are the measured cudaMemcpyAsync bandwidths of the
//                slowest rank with every rank copying at once. ratio = time / bound.
#include "bench_controller.h"

#include <cstdint>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <cctype>
#include <fstream>
#include <sstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "bench_bandwidth.h"
#include "bench_report.h"
#include "bench_runner.h"
#include "bench_vs_best.h"
#include "bench_world.h"
#include "tpcomm/version.h"

#ifdef TPCOMM_BENCH_CUDA
#include <cuda_runtime_api.h>
#endif
#ifdef TPCOMM_BENCH_NCCL
#include <nccl.h>
#endif

namespace tpcomm_bench {
namespace {

std::string cpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      size_t c = line.find(':');
      if (c != std::string::npos) return line.substr(c + 2);
    }
  return "host memory";
}

std::string deviceLine(int rank, int device) {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  char line[1024];
  if (device < 0) {
    std::snprintf(line, sizeof(line), "#  Rank %2d Group %2d Pid %6d on %10s device %2d [host] %s (host rank)\n", rank, 0,
                  static_cast<int>(getpid()), host, device, cpuModel().c_str());
    return line;
  }
#ifdef TPCOMM_BENCH_CUDA
  cudaDeviceProp p;
  if (cudaGetDeviceProperties(&p, device) == cudaSuccess) {
    std::snprintf(line, sizeof(line), "#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s\n", rank, 0,
                  static_cast<int>(getpid()), host, device, p.pciDomainID, p.pciBusID, p.pciDeviceID, p.name);
    return line;
  }
  cudaGetLastError();
#endif
  std::snprintf(line, sizeof(line), "#  Rank %2d Group %2d Pid %6d on %10s device %2d [?] unknown\n", rank, 0,
                static_cast<int>(getpid()), host, device);
  return line;
}

// Kernel driver version ("580.159.04") from /proc/driver/nvidia/version, or "". The line reads
// e.g. "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build ...":
// take the first word after "Kernel Module" made of digits and dots with at least one dot.
std::string nvidiaDriverVersion() {
  std::ifstream in("/proc/driver/nvidia/version");
  std::string line;
  if (!std::getline(in, line)) return "";
  size_t k = line.find("Kernel Module");
  if (k == std::string::npos) return "";
  std::istringstream words(line.substr(k));
  std::string w;
  while (words >> w) {
    bool digitsAndDots = w.find_first_not_of("0123456789.") == std::string::npos;
    if (digitsAndDots && w.find('.') != std::string::npos && std::isdigit(static_cast<unsigned char>(w[0]))) return w;
  }
  return "";
}

std::string versionsLine() {
  std::string s = "# tpcomm " TPCOMM_VERSION_STRING;
  std::string drvText = nvidiaDriverVersion();
  if (!drvText.empty()) s += ", NVIDIA driver " + drvText;
#ifdef TPCOMM_BENCH_CUDA
  int rt = 0, drv = 0;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  s += ", CUDA runtime " + std::to_string(rt / 1000) + "." + std::to_string(rt % 1000 / 10);
  s += drv ? ", driver API " + std::to_string(drv / 1000) + "." + std::to_string(drv % 1000 / 10) : ", no CUDA driver";
#endif
#ifdef TPCOMM_BENCH_NCCL
  int nv = 0;
  ncclGetVersion(&nv);
  s += ", NCCL " + std::to_string(nv / 10000) + "." + std::to_string(nv / 100 % 100) + "." + std::to_string(nv % 100);
#endif
  return s + "\n";
}

// Every controller learns whether all succeeded (so none waits on a peer that gave up).
bool allOk(World& w, bool mine) { return w.minOf(mine ? 1.0 : 0.0) > 0.5; }

void fail(const World& w, const std::string& msg) {
  std::fprintf(stderr, "%s: rank %d: %s\n", gBenchName, w.firstRank(), msg.c_str());
}

nlohmann::json resultJson(const Result& r) {
  nlohmann::json j = {{"time", r.timeUs}, {"alg_bw", r.algBw}, {"bus_bw", r.busBw}, {"algorithm", r.algo}};
  j["nwrong"] = r.wrong < 0 ? nlohmann::json(nullptr) : nlohmann::json(r.wrong);
  if (r.maxAbsErr >= 0) {
    j["max_abs_error"] = r.maxAbsErr;
    j["rms_rel_error"] = r.rmsRelErr;
  }
  return j;
}

struct Reference {
  double memcpyGBps = 0, d2hGBps = 0, h2dGBps = 0;
};

// Performance lines for one table (see the file comment); also returned as JSON.
nlohmann::json printPerfLines(const Table& t, const Reference& ref, int nRanks, bool gpu) {
  nlohmann::json out = nlohmann::json::array();
  if (t.rows.empty()) return out;
  if (!gpu) {
    const Row& r = t.rows.back();
    if (ref.memcpyGBps <= 0) return out;
    double a = r.outOfPlace.busBw / ref.memcpyGBps, b = r.inPlace.busBw / ref.memcpyGBps;
    std::printf("# busbw / memcpy at %zu B: out-of-place %.2f, in-place %.2f (memcpy %.2f GB/s; target >= 0.50)\n#\n",
                r.bytes, a, b, ref.memcpyGBps);
    out.push_back({{"size", r.bytes}, {"memcpy_gbps", ref.memcpyGBps}, {"ratio_out_of_place", a}, {"ratio_in_place", b}});
    return out;
  }
  bool header = false;
  for (const Row& r : t.rows) {
    if (r.bytes < kReferenceBytes || r.outOfPlace.algo.find("staged_host") == std::string::npos) continue;
    if (ref.d2hGBps <= 0 || ref.h2dGBps <= 0) break;
    double n = static_cast<double>(r.bytes);
    double boundUs = std::max(n / ref.d2hGBps, (nRanks - 1) * n / ref.h2dGBps) / 1e3;
    if (!header) {
      std::printf("# staged_host time bound = max(N/d2h, (n-1)N/h2d), d2h %.2f GB/s, h2d %.2f GB/s (target ratio <= 1.30)\n",
                  ref.d2hGBps, ref.h2dGBps);
      std::printf("# %10s  %10s  %10s  %6s  %10s  %6s\n", "size", "bound(us)", "oop(us)", "ratio", "ip(us)", "ratio");
      header = true;
    }
    double a = r.outOfPlace.timeUs / boundUs, b = r.inPlace.timeUs / boundUs;
    std::printf("# %10zu  %10.1f  %10.1f  %6.2f  %10.1f  %6.2f\n", r.bytes, boundUs, r.outOfPlace.timeUs, a,
                r.inPlace.timeUs, b);
    out.push_back({{"size", r.bytes}, {"bound_us", boundUs}, {"ratio_out_of_place", a}, {"ratio_in_place", b}});
  }
  if (header) std::printf("#\n");
  return out;
}

void printSideBySide(const std::vector<Table>& tables) {
  if (tables.size() < 2) return;
  const Table& last = tables.back();
  bool multi = false;  // -d all / -o all: rows of several types or ops
  for (const Row& r : last.rows) multi = multi || r.type != last.rows[0].type || r.redop != last.rows[0].redop;
  std::printf("# Side by side, same run and buffers: out-of-place time (us); ratio = time / time of -A %s\n#  %10s",
              last.algo.c_str(), "size");
  if (multi) std::printf(" %8s %3s", "type", "op");
  for (const Table& t : tables) std::printf("  %14s", t.algo.substr(0, 14).c_str());
  for (size_t k = 0; k + 1 < tables.size(); ++k) std::printf("  %8s", "ratio");
  std::printf("\n");
  for (size_t i = 0; i < last.rows.size(); ++i) {
    std::printf("#  %10zu", last.rows[i].bytes);
    if (multi) std::printf(" %8s %3s", last.rows[i].type.c_str(), last.rows[i].redop.c_str());
    for (const Table& t : tables) std::printf("  %14.2f", i < t.rows.size() ? t.rows[i].outOfPlace.timeUs : 0.0);
    for (size_t k = 0; k + 1 < tables.size(); ++k) {
      double base = last.rows[i].outOfPlace.timeUs;
      double v = i < tables[k].rows.size() ? tables[k].rows[i].outOfPlace.timeUs : 0.0;
      std::printf("  %8.2f", base > 0 ? v / base : 0.0);
    }
    std::printf("\n");
  }
  std::printf("#\n");
}

// The run's types and ops for the JSON configuration: "bfloat16", or "float,half,bfloat16".
std::string typeList(const Args& a) {
  std::string s;
  for (tpcomm::DataType t : a.dtypes) s += (s.empty() ? "" : ",") + std::string(ncclTestsTypeName(t));
  return s;
}

std::string opList(const Args& a) {
  if (a.coll == Coll::kAllGather) return "none";
  std::string s;
  for (tpcomm::ReduceOp o : a.ops) s += (s.empty() ? "" : ",") + std::string(ncclTestsOpName(o));
  return s;
}

std::string nowText() {
  char buf[64];
  std::time_t t = std::time(nullptr);
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", std::localtime(&t));
  return buf;
}

}  // namespace

int runController(const RunInfo& info, tpcomm::Bootstrap* bootstrap, int firstRank, const std::vector<int>& devices) {
  const Args& args = *info.args;
  World world(bootstrap, firstRank, static_cast<int>(devices.size()), info.nRanks);
  const bool main = world.isMain();
  std::vector<LocalRank> ranks(devices.size());
  for (size_t i = 0; i < devices.size(); ++i) {
    ranks[i].rank = firstRank + static_cast<int>(i);
    ranks[i].device = devices[i];
  }
  std::string error;
  bool ok = setupRanks(&ranks, args.maxBytes, &error);
  if (!ok) fail(world, error);
  if (!allOk(world, ok)) {
    teardownRanks(&ranks);
    return 1;
  }

  // Header.
  std::string myLines;
  for (const LocalRank& r : ranks) myLines += deviceLine(r.rank, r.device);
  std::vector<std::string> lines = world.gatherStrings(myLines);
  nlohmann::json json;
  if (main) {
    std::printf("# %s (tpcomm): nccl-tests %s format\n", benchName(args.coll), ncclTestsName(args.coll));
    std::printf("%s", versionsLine().c_str());
    std::printf("# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d agg iters: 1 "
                "validation: %d graph: %d\n",
                args.nThreads, args.nGpus, args.minBytes, args.maxBytes,
                args.stepFactor > 1 ? args.stepFactor : args.stepBytes, args.stepFactor > 1 ? "factor" : "bytes",
                args.warmup, args.iters, args.check ? 1 : 0, args.graphLaunches);
    std::printf("# mode: %s; ranks: %d (%s); time: median of %d batches (%s)\n", info.mode.c_str(), info.nRanks,
                info.gpu ? "GPU" : "host memory", args.repeats, info.gpu ? "CUDA events" : "std::chrono::steady_clock");
    if (!info.gpu && args.graphLaunches > 0) std::printf("# -G %d ignored: host ranks have no CUDA graphs\n", args.graphLaunches);
    std::printf("%s#\n# Using devices\n", info.notes.c_str());
    for (const std::string& l : lines) std::printf("%s", l.c_str());
    std::fflush(stdout);
    json["tool"] = std::string("tpcomm ") + benchName(args.coll);
    json["start_time"] = nowText();
    json["args"] = info.argv;
    json["mode"] = info.mode;
    json["versions"] = versionsLine();
    json["config"] = {{"nranks", info.nRanks}, {"gpu", info.gpu}, {"minimum_bytes", args.minBytes},
                      {"maximum_bytes", args.maxBytes}, {"step_factor", args.stepFactor}, {"step_bytes", args.stepBytes},
                      {"warmup_iters", args.warmup}, {"iterations", args.iters}, {"repeats", args.repeats},
                      {"validation", args.check}, {"graph", args.graphLaunches},
                      {"type", typeList(args)}, {"redop", opList(args)}};
    json["devices"] = lines;
  }

  // Reference bandwidths, measured now so they share the run's conditions.
  Reference ref;
  if (!info.gpu) {
    world.barrier();
    if (main) ref.memcpyGBps = hostMemcpyGBps(kReferenceBytes);
    world.barrier();
    if (main) std::printf("#\n# Reference, this run: single-thread memcpy of 64 MiB: %.2f GB/s\n", ref.memcpyGBps);
  } else {
    world.barrier();
    double d2h = 0, h2d = 0;
    ok = pinnedCopyGBps(ranks, kReferenceBytes, &d2h, &h2d, &error);
    if (!ok) fail(world, "pinned copy bandwidth: " + error);
    ref.d2hGBps = world.minOf(ok ? d2h : 0);
    ref.h2dGBps = world.minOf(ok ? h2d : 0);
    if (main)
      std::printf("#\n# Reference, this run: pinned host copies of 64 MiB, all ranks at once, slowest rank: D2H %.2f GB/s, "
                  "H2D %.2f GB/s\n", ref.d2hGBps, ref.h2dGBps);
  }
  if (main) json["reference"] = {{"memcpy_gbps", ref.memcpyGBps}, {"d2h_gbps", ref.d2hGBps}, {"h2d_gbps", ref.h2dGBps}};

  TimingPlan plan;
  plan.warmup = args.warmup;
  plan.iters = args.iters;
  plan.repeats = args.repeats;
  plan.graphLaunches = args.graphLaunches;
  // nccl-tests' bus bandwidth factors: 2(n-1)/n for all-reduce, (n-1)/n for the halves.
  const double factor = args.coll == Coll::kAllReduce ? busBwFactor(info.nRanks)
                        : info.nRanks > 0             ? static_cast<double>(info.nRanks - 1) / info.nRanks
                                                      : 0.0;
  const size_t perRankDivisor = args.coll == Coll::kAllReduce ? 1 : static_cast<size_t>(info.nRanks);
  std::vector<Table> tables;
  int status = 0;
  for (const std::string& algo : args.algos) {
    std::unique_ptr<Backend> backend =
        algo == "nccl" ? makeNcclBackend(world, ranks, &error, args.coll) : makeTpcommBackend(world, ranks, algo, &error, args.coll, args.compression);
    if (!backend) fail(world, "-A " + algo + ": " + error);
    if (!allOk(world, backend != nullptr)) {
      status = 1;
      break;
    }
    Table table;
    table.algo = algo;
    if (main) {
      std::printf("#\n# -A %s: %s\n", algo.c_str(),
                  algo == "auto" ? "tpcomm, algorithm chosen by the selector" : algo == "nccl" ? "NCCL itself" : "tpcomm, Config::algo forced");
      printTableHeader(args.compression != tpcomm::Compression::kNone);
    }
    bool tableOk = true;
    // As nccl-tests: every size of one type and op, then the next op, then the next type.
    for (size_t ti = 0; ti < args.dtypes.size() && tableOk; ++ti)
      for (size_t oi = 0; oi < args.ops.size() && tableOk; ++oi) {
        const tpcomm::DataType dtype = args.dtypes[ti];
        const tpcomm::ReduceOp op = args.ops[oi];
        const size_t es = tpcomm::dataTypeSize(dtype);
        for (size_t size = args.minBytes; size <= args.maxBytes && tableOk;) {
          // Reduce-scatter and all-gather: a whole number of elements per rank (nccl-tests).
          const size_t count = size / es / perRankDivisor * perRankDivisor;
          if (count > 0) {
            Row row;
            row.bytes = count * es;
            row.count = count / perRankDivisor;  // nccl-tests: per-rank count for the halves
            row.type = ncclTestsTypeName(dtype);
            row.redop = args.coll == Coll::kAllGather ? "none" : ncclTestsOpName(op);
            for (int inPlace = 0; inPlace < 2 && tableOk; ++inPlace) {
              Result& res = inPlace ? row.inPlace : row.outOfPlace;
              const bool errorData = args.compression != tpcomm::Compression::kNone && algo != "nccl";
              // Timed on the check's input data, not on what the buffers held (zeros at first).
              tableOk = writeInputs(world, *backend, ranks, inPlace, count, dtype, errorData, false, &error) &&
                        timeCollective(world, *backend, ranks, inPlace, count, dtype, op, plan, &res.timeUs, &error);
              res.algo = backend->lastAlgorithm();
              if (tableOk && args.check) {
                int64_t wrong = 0;
                double accuracy[2] = {0, 0};
                const bool measureError = args.compression != tpcomm::Compression::kNone && algo != "nccl";
                tableOk = checkCollective(world, *backend, ranks, inPlace, count, dtype, op, args.graphLaunches > 0,
                                          &wrong, &error, measureError ? accuracy : nullptr);
                res.wrong = measureError ? -1 : world.sumOf(tableOk ? wrong : 0);
                if (measureError) {  // every rank holds the same bits: the worst controller's figure
                  res.maxAbsErr = world.maxOf(accuracy[0]);
                  res.rmsRelErr = world.maxOf(accuracy[1]);
                }
              }
              if (!tableOk)
                fail(world, "-A " + algo + ", " + row.type + " " + row.redop + ", " + std::to_string(row.bytes) + " B: " + error);
              res.algBw = res.timeUs > 0 ? static_cast<double>(row.bytes) / res.timeUs / 1e3 : 0;
              res.busBw = res.algBw * factor;
            }
            if (tableOk) {
              if (main) printRow(row);
              table.rows.push_back(row);
            }
          }
          size_t next = args.stepFactor > 1 ? size * args.stepFactor : size + args.stepBytes;
          if (next <= size) break;  // overflow, or -b 0 with -f
          size = next;
        }
      }
    if (!allOk(world, tableOk)) status = 1;
    if (table.wrongTotal() > 0) status = 1;
    if (main && algo != "auto" && algo != "nccl") {
      // A forced name is a preference (Config::algo): where that algorithm cannot serve a call
      // the selector's next choice runs. Say so, or the table reads as the forced algorithm's.
      int others = 0, rows = 0;
      for (const Row& r : table.rows)
        for (const Result* x : {&r.outOfPlace, &r.inPlace}) {
          ++rows;
          if (x->algo != algo) ++others;
        }
      if (others > 0)
        std::printf("# note: -A %s ran on %d of %d timings; the others ran the algorithm named in the algo column "
                    "(%s cannot serve those calls on these ranks)\n",
                    algo.c_str(), rows - others, rows, algo.c_str());
    }
    if (main) {
      printTableFooter(table);
      nlohmann::json jt = {{"algo", algo}, {"out_of_bounds", table.wrongTotal()}, {"average_bus_bandwidth", table.avgBusBw()}};
      jt["results"] = nlohmann::json::array();
      for (const Row& r : table.rows)
        jt["results"].push_back({{"size", r.bytes}, {"count", r.count}, {"type", r.type}, {"redop", r.redop}, {"root", -1},
                                 {"out_of_place", resultJson(r.outOfPlace)}, {"in_place", resultJson(r.inPlace)}});
      jt["performance"] = printPerfLines(table, ref, info.nRanks, info.gpu);
      json["tables"].push_back(jt);
    }
    backend->destroy();
    tables.push_back(std::move(table));
    if (status) break;
  }
  if (main) {
    printSideBySide(tables);
    if (args.vsBest) {
      // The target: auto within 3% of the best single algorithm (after tpcomm-doctor --tune);
      // --vs-best-max P makes a miss (or nothing to compare) fail the run.
      const std::vector<VsBestRow> vs = compareWithBest(tables);
      const double tolerance = args.vsBestMaxPct >= 0 ? args.vsBestMaxPct / 100.0 : 0.03;
      const VsBestSummary sum = printVsBest(vs, tolerance);
      if (args.vsBestMaxPct >= 0) {
        const bool met = sum.compared > 0 && sum.within == sum.compared;
        std::printf("# --vs-best-max %d%%: %s (%d of %d sizes within)\n", args.vsBestMaxPct, met ? "met" : "MISSED",
                    sum.within, sum.compared);
        if (!met) status = 1;
      }
      json["vs_best"] = nlohmann::json::array();
      for (const VsBestRow& r : vs)
        json["vs_best"].push_back({{"size", r.bytes}, {"type", r.type}, {"redop", r.redop}, {"auto_us", r.autoUs},
                                   {"auto_algorithm", r.autoAlgo}, {"best_us", r.bestUs},
                                   {"best_algorithm", r.bestAlgo}, {"ratio", r.ratio}});
    }
    std::printf("# Collective test concluded: %s (%s)\n", benchName(args.coll), status ? "FAILED" : "OK");
    json["end_time"] = nowText();
    json["status"] = status ? "FAILED" : "OK";
    if (!args.jsonPath.empty()) {
      std::ofstream out(args.jsonPath);
      out << json.dump(2) << "\n";
      if (!out) std::fprintf(stderr, "%s: could not write %s\n", benchName(args.coll), args.jsonPath.c_str());
      else std::printf("# Wrote JSON to %s\n", args.jsonPath.c_str());
    }
    std::fflush(stdout);
  }
  world.barrier();
  teardownRanks(&ranks);
  return status;
}

}  // namespace tpcomm_bench
