// doctor_tune.cc: see doctor_tune.h.
#include "doctor_tune.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <thread>

#include "collectives/registry.h"
#include "collectives/tuning_file.h"
#include "common/error.h"
#include "common/params.h"
#include "topology/probe.h"
#include "topology/sysfs_pci.h"
#include "topology/topo_cache.h"
#include "tpcomm/communicator.h"
#include "tpcomm/version.h"
#include "tune_timer.h"

namespace tpcomm {

namespace {

using Clock = std::chrono::steady_clock;

// A batch should last about this long, so that the events' resolution and the per-batch
// barrier stay small against it; at least one call, at most kMaxCalls.
constexpr double kBatchUs = 2000;
constexpr int kMaxCalls = 100;

// Every rank's value of `mine`, in rank order.
Status gather(Bootstrap& bs, double mine, std::vector<double>* all) {
  all->assign(static_cast<size_t>(bs.size()), 0.0);
  return bs.allGather(&mine, all->data(), sizeof(double));
}

double maxOf(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }
double minOf(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::vector<uint64_t> sweepSizes(const TuneOptions& o) {
  std::vector<uint64_t> sizes;
  for (uint64_t s = o.minBytes; s <= o.maxBytes; s *= static_cast<uint64_t>(o.stepFactor)) {
    sizes.push_back(s);
    if (s > o.maxBytes / static_cast<uint64_t>(o.stepFactor)) break;  // the next step would overflow or pass the end
  }
  return sizes;
}

constexpr DataType kClasses[] = {DataType::kBF16, DataType::kF32};  // one dtype per class: 16 and 32 bits

// Algorithms the topology lets run some size of the sweep (the selection-only registry list):
// only these get a communicator, so none is forced where it can never run.
std::vector<std::string> candidatesFor(const Topology& topo, const std::vector<uint64_t>& sizes) {
  std::vector<std::string> names;
  for (const auto& a : makeAlgorithms(nullptr)) {
    bool any = false;
    for (uint64_t s : sizes)
      for (DataType dt : kClasses) {
        std::string why;
        any = any || a->supports(topo, {CollKind::kAllReduce, dt, ReduceOp::kSum, s, false}, &why);
      }
    if (any) names.push_back(a->name());
  }
  return names;
}

// One rank count's result, filled by rank 0.
struct RankCountResult {
  TuningTable table;
  std::vector<std::string> algos;
  std::string error;
};

// Times one algorithm at one size on every rank; *us < 0 when it did not run there.
Status timeOne(Bootstrap& bs, Communicator& comm, RankTimer& timer, const std::string& name, size_t count, DataType dt,
               const TuneOptions& o, double* us) {
  *us = -1;
  std::vector<AlgorithmChoice> choice;
  TPCOMM_TRY(comm.explainAllReduce(count, dt, ReduceOp::kSum, false, &choice));
  // The communicator forces `name`; it is first only where it is eligible (the same on every
  // rank: the selection is agreed).
  if (choice.empty() || choice[0].name != name || !choice[0].available) return Status::kOk;
  std::vector<double> all;
  double warm = 0;
  Status s = timer.timeBatch(comm, count, dt, o.warmup, &warm);
  TPCOMM_TRY(gather(bs, s == Status::kOk ? warm / o.warmup : -1.0, &all));
  if (s != Status::kOk) return s;
  if (minOf(all) < 0) return TPCOMM_ERROR(kRemoteError, "tune: %s failed on another rank", name.c_str());
  const int calls = std::max(1, std::min(kMaxCalls, static_cast<int>(kBatchUs / std::max(maxOf(all), 1e-3))));
  std::vector<double> batches;
  for (int r = 0; r < o.repeats; ++r) {
    TPCOMM_TRY(bs.barrier());
    double mine = 0;
    s = timer.timeBatch(comm, count, dt, calls, &mine);
    TPCOMM_TRY(gather(bs, s == Status::kOk ? mine : -1.0, &all));
    if (s != Status::kOk) return s;
    if (minOf(all) < 0) return TPCOMM_ERROR(kRemoteError, "tune: %s failed on another rank", name.c_str());
    batches.push_back(maxOf(all));  // a batch takes as long as its slowest rank
  }
  // A forced algorithm that declined at run time fell back to another: not its time.
  TPCOMM_TRY(gather(bs, name == comm.lastAlgorithm() ? 1.0 : 0.0, &all));
  if (minOf(all) > 0) *us = median(batches) / calls;
  return Status::kOk;
}

// One rank's whole sweep for one rank count.
Status tuneRank(Bootstrap& bs, int device, const TuneOptions& o, Clock::time_point deadline, RankCountResult* out) {
  Topology topo;
  TPCOMM_TRY(probeTopology(bs, device, &topo));
  const std::vector<uint64_t> sizes = sweepSizes(o);
  const std::vector<std::string> names = candidatesFor(topo, sizes);
  std::vector<std::unique_ptr<Communicator>> comms;
  std::vector<std::string> used;
  for (const std::string& name : names) {
    Config c;
    c.algo = name;
    c.useNccl = name == "ring_nccl";  // NCCL's own set-up only where it is timed
    std::unique_ptr<Communicator> comm;
    Status s = Communicator::create(bs, device, c, &comm);
    std::vector<double> ok;
    TPCOMM_TRY(gather(bs, s == Status::kOk ? 1.0 : 0.0, &ok));
    if (minOf(ok) > 0) {
      comms.push_back(std::move(comm));
      used.push_back(name);
    } else if (comm) {
      comm->abort();  // up here, not on a peer: no collective teardown
    }
  }
  std::unique_ptr<RankTimer> timer;
  Status s = RankTimer::create(device, sizes.empty() ? 16 : sizes.back(), &timer);
  std::vector<double> all;
  TPCOMM_TRY(gather(bs, s == Status::kOk ? 1.0 : 0.0, &all));
  if (s != Status::kOk) return s;
  if (minOf(all) < 1) return TPCOMM_ERROR(kRemoteError, "tune: buffers failed on another rank");

  TuningTable table;
  table.fingerprint = topologyFingerprint(topo);
  table.ranks = topo.nRanks();
  table.hostRanks = topo.allHost();
  for (uint64_t size : sizes) {
    // Rank 0's clock decides, so every rank stops after the same row.
    TPCOMM_TRY(gather(bs, Clock::now() > deadline ? 1.0 : 0.0, &all));
    if (all[0] > 0) break;
    for (DataType dt : kClasses) {
      const size_t count = size / dataTypeSize(dt);
      if (count == 0) continue;
      TuningRow row;
      row.dtypeBits = static_cast<int>(dataTypeSize(dt) * 8);
      row.bytes = count * dataTypeSize(dt);
      for (size_t i = 0; i < comms.size(); ++i) {
        double us = -1;
        TPCOMM_TRY(timeOne(bs, *comms[i], *timer, used[i], count, dt, o, &us));
        if (us > 0) row.timesUs.emplace_back(used[i], us);
      }
      if (!row.timesUs.empty()) table.rows.push_back(std::move(row));
    }
  }
  timer.reset();
  for (auto& c : comms) c->destroy();
  if (bs.rank() == 0) {
    out->table = std::move(table);
    out->algos = used;
  }
  return Status::kOk;
}

// Ranks as threads of this process; GPU r % gpus for rank r (more ranks than GPUs only with
// TPCOMM_ALLOW_SHARED_DEVICE=1), or host ranks.
RankCountResult tuneRankCount(int n, bool host, int gpus, const TuneOptions& o, Clock::time_point deadline) {
  RankCountResult result;
  auto group = ThreadGroup::create(n);
  std::vector<Status> status(static_cast<size_t>(n), Status::kOk);
  std::vector<std::string> messages(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      std::unique_ptr<Bootstrap> bs;
      status[r] = makeThreadBootstrap(group, r, &bs);
      if (status[r] == Status::kOk) status[r] = tuneRank(*bs, host ? -1 : r % gpus, o, deadline, &result);
      messages[r] = lastErrorMessage();
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r)
    if (status[r] != Status::kOk && result.error.empty())
      result.error = "rank " + std::to_string(r) + ": " + messages[r];
  return result;
}

void printTable(const RankCountResult& r) {
  std::printf("  %10s  %5s  %-14s %10s", "bytes", "dtype", "fastest", "us");
  for (const std::string& a : r.algos) std::printf("  %14s", a.substr(0, 14).c_str());
  std::printf("\n");
  for (const TuningRow& row : r.table.rows) {
    const auto best = std::min_element(row.timesUs.begin(), row.timesUs.end(),
                                       [](const auto& x, const auto& y) { return x.second < y.second; });
    std::printf("  %10llu  %5s  %-14s %10.2f", static_cast<unsigned long long>(row.bytes),
                row.dtypeBits == 16 ? "bf16" : "f32", best->first.c_str(), best->second);
    for (const std::string& a : r.algos) {
      const double us = row.timeOf(a);
      if (us > 0)
        std::printf("  %14.2f", us);
      else
        std::printf("  %14s", "-");
    }
    std::printf("\n");
  }
}

std::string nowText() {
  char buf[64];
  std::time_t t = std::time(nullptr);
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", std::localtime(&t));
  return buf;
}

bool parsePositive(const std::string& v, double lo, double hi, double* out) {
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (v.empty() || !end || *end || !(d >= lo && d <= hi)) return false;
  *out = d;
  return true;
}

}  // namespace

bool parseTuneOption(const std::string& name, const std::string& value, TuneOptions* o, std::string* error) {
  double d = 0;
  uint64_t b = 0;
  if (name == "--tune-ranks") {
    o->rankCounts.clear();
    size_t at = 0;
    while (at <= value.size()) {
      const size_t comma = value.find(',', at);
      const std::string tok = value.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
      if (!parsePositive(tok, 2, 64, &d) || d != static_cast<int>(d)) {
        *error = "--tune-ranks '" + value + "': expected a comma list of rank counts in [2, 64], e.g. 2,4";
        return false;
      }
      o->rankCounts.push_back(static_cast<int>(d));
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
  } else if (name == "--tune-min-bytes" || name == "--tune-max-bytes") {
    if (!parseSize(value, &b) || b < 1 || b > (uint64_t{1} << 34)) {
      *error = name + " '" + value + "': expected a byte count in [1, 16G] (K/M/G suffixes allowed)";
      return false;
    }
    (name == "--tune-min-bytes" ? o->minBytes : o->maxBytes) = b;
  } else if (name == "--tune-step") {
    if (!parsePositive(value, 2, 1024, &d) || d != static_cast<int>(d)) {
      *error = "--tune-step '" + value + "': expected an integer factor in [2, 1024] (2 or 4 for a fine sweep)";
      return false;
    }
    o->stepFactor = static_cast<int>(d);
  } else if (name == "--tune-repeats") {
    if (!parsePositive(value, 1, 1000, &d) || d != static_cast<int>(d)) {
      *error = "--tune-repeats '" + value + "': expected an integer in [1, 1000]";
      return false;
    }
    o->repeats = static_cast<int>(d);
  } else if (name == "--tune-seconds") {
    if (!parsePositive(value, 1, 86400, &d)) {
      *error = "--tune-seconds '" + value + "': expected a number of seconds in [1, 86400]";
      return false;
    }
    o->budgetSeconds = d;
  } else {
    *error = "unknown option " + name;
    return false;
  }
  return true;
}

int runTune(TuneOptions o) {
  if (o.minBytes > o.maxBytes) {
    std::fprintf(stderr, "tpcomm-doctor: --tune-min-bytes %llu is above --tune-max-bytes %llu\n",
                 static_cast<unsigned long long>(o.minBytes), static_cast<unsigned long long>(o.maxBytes));
    return 1;
  }
  // The same safety default as allreduce_perf: no NVSwitch multicast unless asked for.
  if (!std::getenv("NCCL_NVLS_ENABLE")) {
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    std::printf(
        "tune: NCCL_NVLS_ENABLE was unset: set to 0 (no NVSwitch multicast; export NCCL_NVLS_ENABLE=1 to allow)\n");
  }
  // Communicators made here probe with this binary as the helper unless told otherwise.
  if (paramString(ParamId::kTopoHelper).empty()) {
    char self[4096];
    const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (len > 0) {
      self[len] = '\0';
      setenv("TPCOMM_TOPO_HELPER", self, 0);
    }
  }
  reloadParams();

  const int gpus = RankTimer::visibleDevices();
  const bool host = o.hostRanks || gpus == 0;
  if (host && o.maxBytes == TuneOptions().maxBytes) o.maxBytes = 16u << 20;  // host memory: a shorter default sweep
  if (o.rankCounts.empty()) {
    if (host) o.rankCounts = {2};
    for (int n : {2, 4, 8})
      if (!host && n <= gpus) o.rankCounts.push_back(n);
    if (!host && gpus > 2 && gpus != 4 && gpus != 8) o.rankCounts.push_back(gpus);
  }
  // More ranks than GPUs: ranks share GPUs, for trying the GPU sweep on a one-GPU machine. The
  // table is then of that shared topology (its own fingerprint), not of a tensor-parallel box.
  const bool shared = paramInt(ParamId::kAllowSharedDevice) != 0;
  for (int n : o.rankCounts)
    if (!host && n > gpus && !shared) {
      std::fprintf(stderr,
                   "tpcomm-doctor: --tune-ranks %d: this process sees %d GPU(s) (TPCOMM_ALLOW_SHARED_DEVICE=1 lets "
                   "ranks share them, for trying the sweep)\n",
                   n, gpus);
      return 1;
    } else if (!host && n > gpus) {
      std::printf("tune: %d ranks on %d GPU(s): ranks share GPUs (TPCOMM_ALLOW_SHARED_DEVICE=1); the table describes "
                  "that, not tensor parallelism over separate GPUs\n",
                  n, gpus);
    }
  if (o.rankCounts.empty()) {
    std::printf("tune: %d GPU visible: nothing to choose between on GPU ranks (--host tunes host ranks)\n", gpus);
    return 0;
  }
  const std::string path = topoCacheDir().empty() ? "" : tuningFilePath(topoCacheDir());
  if (path.empty()) {
    std::fprintf(stderr, "tpcomm-doctor: --tune: no cache directory (set XDG_CACHE_HOME or HOME)\n");
    return 1;
  }
  std::printf(
      "tune: %s ranks, %llu .. %llu bytes x%d, bf16 and f32, eager all-reduce (sum), %d warm-up calls, median "
      "of %d batches (%s), budget %.0f s\n",
      host ? "host" : "GPU", static_cast<unsigned long long>(o.minBytes), static_cast<unsigned long long>(o.maxBytes),
      o.stepFactor, o.warmup, o.repeats, host ? "steady_clock" : "CUDA events", o.budgetSeconds);

  TuningFile file;
  file.tpcommVersion = TPCOMM_VERSION_STRING;
  file.driver = SysfsReader("/").driverVersion();
  file.created = nowText();
  const Clock::time_point start = Clock::now();
  int measured = 0;
  for (size_t i = 0; i < o.rankCounts.size(); ++i) {
    const auto share =
        std::chrono::duration<double>(o.budgetSeconds * static_cast<double>(i + 1) / o.rankCounts.size());
    const Clock::time_point deadline = start + std::chrono::duration_cast<Clock::duration>(share);
    const int n = o.rankCounts[i];
    RankCountResult r = tuneRankCount(n, host, gpus, o, deadline);
    if (!r.error.empty()) {
      std::printf("tune: %d ranks failed: %s\n", n, r.error.c_str());
      continue;
    }
    std::printf("\ntune: %d %s ranks, fingerprint %s, %zu sizes measured\n", n, host ? "host" : "GPU",
                r.table.fingerprint.c_str(), r.table.rows.size());
    printTable(r);
    if (r.table.rows.empty()) continue;
    ++measured;
    file.tables.push_back(std::move(r.table));
  }
  if (measured == 0) {
    std::printf("\ntune: nothing measured; %s left as it was\n", path.c_str());
    return 2;
  }
  // Keep the tables of other topologies from a file that is still current (another GPU set).
  TuningFile old;
  std::string why;
  const Status ls = loadTuningFile(path, file.tpcommVersion, file.driver, algorithmNames(), &old, &why);
  if (ls == Status::kOk) {
    for (TuningTable& t : old.tables)
      if (!file.find(t.fingerprint) && file.tables.size() < kTuningMaxTables) file.tables.push_back(std::move(t));
  } else if (ls != Status::kNotSupported) {
    std::printf("tune: replacing %s (%s)\n", path.c_str(), why.c_str());
  }
  clearError();
  if (storeTuningFile(path, file) != Status::kOk) {
    std::fprintf(stderr, "tpcomm-doctor: --tune: cannot write %s: %s\n", path.c_str(), lastErrorMessage());
    return 2;
  }
  std::printf("\ntune: wrote %s (%zu table(s); tpcomm %s, driver '%s'); TPCOMM_TUNE=0 ignores it\n", path.c_str(),
              file.tables.size(), file.tpcommVersion.c_str(), file.driver.c_str());
  return 0;
}

}  // namespace tpcomm
