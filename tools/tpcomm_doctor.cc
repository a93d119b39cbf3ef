// tpcomm_doctor.cc: tpcomm-doctor, the command a user runs when the all-reduce is slow or wrong.
// It probes the machine the way Communicator::create does (cache, else a child process that
// data-verifies P2P with a time limit), then prints what tpcomm will do and why (doctor_report.h).
//   tpcomm-doctor [--json] [--measure] [--no-cache] [--timeout-ms N] [--gpus 0,1]
//                 [--sysfs-root DIR] [--machine-json FILE] [--params] [--clean]
//   tpcomm-doctor --tune [--host] [--tune-ranks 2,4] [--tune-min-bytes 8] [--tune-max-bytes 256M]
//                 [--tune-step 4] [--tune-repeats 5] [--tune-seconds 300]   (doctor_tune.h)
// Exit code: 0 fine (also: no GPU), 1 usage, 2 something is broken (a P2P check failed, or a
// TPCOMM_ environment value that Communicator::create would refuse; --params too).
// Hidden: --probe-child (the probe child itself; see probe_child.h).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "common/params.h"
#include "doctor_report.h"
#include "doctor_tune.h"
#include "topology/p2p_verify.h"
#include "topology/probe.h"
#include "transports/host_staged.h"

namespace {

void usage() {
  std::fprintf(stderr,
               "usage: tpcomm-doctor [--json] [--measure] [--no-cache] [--timeout-ms N] [--gpus 0,1,...]\n"
               "                     [--sysfs-root DIR] [--machine-json FILE] [--params] [--clean]\n"
               "       tpcomm-doctor --tune [--host] [--tune-ranks LIST] [--tune-min-bytes B] [--tune-max-bytes B]\n"
               "                     [--tune-step F] [--tune-repeats N] [--tune-seconds S]\n"
               "  --json          machine-readable report\n"
               "  --measure       also measure per-pair copy/SM-store bandwidth and flag round trip\n"
               "  --no-cache      re-probe (same as TPCOMM_TOPO_CACHE=0); the cache is refreshed\n"
               "  --timeout-ms N  time limit of the P2P check child (default TPCOMM_TOPO_TIMEOUT_MS)\n"
               "  --gpus LIST     CUDA indices (as the probe enumerates them) forming the communicator\n"
               "  --sysfs-root D  read sys/ and proc/ under D (fixtures)\n"
               "  --machine-json F  report on a saved machine probe (e.g. from --json's \"machine\")\n"
               "  --params        list every TPCOMM_ parameter with its value in force and any rejected value\n"
               "  --clean         remove this user's /dev/shm/tpcomm-<pid>-* segments whose process is gone\n"
               "  --tune          time every usable all-reduce algorithm per size, dtype class and rank count\n"
               "                  (ranks as threads: GPU i for rank i, or host ranks) and write the tuning\n"
               "                  file the selector reads ($XDG_CACHE_HOME/tpcomm/tune.json; TPCOMM_TUNE=0\n"
               "                  ignores it). With it: --host (host ranks), --tune-ranks 2,4 (more ranks\n"
               "                  than GPUs with TPCOMM_ALLOW_SHARED_DEVICE=1: ranks share GPUs),\n"
               "                  --tune-min-bytes 8, --tune-max-bytes 256M (host: 16M), --tune-step 4,\n"
               "                  --tune-repeats 5, --tune-seconds 300 (bound on the whole run)\n"
               "exit: 0 fine or no GPU, 1 usage error, 2 something is broken (also: a rejected TPCOMM_ value)\n");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tpcomm;
  if (argc > 1 && std::strcmp(argv[1], "--probe-child") == 0) return probeChildMain(argc - 2, argv + 2);
  bool json = false, measure = false, noCache = false, tune = false;
  TuneOptions tuneOpts;
  int timeoutMs = 0;
  std::string sysfsRoot = "/", machineJson, gpuList;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    if (a == "--json") json = true;
    else if (a == "--measure") measure = true;
    else if (a == "--no-cache") noCache = true;
    else if (a == "--tune") tune = true;
    else if (a == "--host") tuneOpts.hostRanks = true;
    else if (a.rfind("--tune-", 0) == 0) {
      const char* v = next();
      std::string error;
      if (!v) error = a + " needs a value";
      if (v && !parseTuneOption(a, v, &tuneOpts, &error)) {
        if (error.rfind("unknown option", 0) == 0) error = "unknown argument '" + a + "'";
      } else if (v) {
        continue;
      }
      std::fprintf(stderr, "tpcomm-doctor: %s\n", error.c_str());
      return 1;
    }
    else if (a == "--clean") {
      // A process killed while it set up staged_host's shared segment leaves it behind
      // (communicators clean these too when they make one; docs/reliability.md).
      std::string report;
      const int removed = HostStagedTransport::removeStaleSegments(&report);
      std::fputs(report.c_str(), stdout);
      std::printf("clean: removed %d stale shared-memory segment(s)\n", removed);
      return 0;
    } else if (a == "--params") {
      int rejected = 0;
      std::fputs(paramsTable(&rejected).c_str(), stdout);
      return rejected == 0 ? 0 : 2;
    } else if (a == "--timeout-ms" || a == "--sysfs-root" || a == "--machine-json" || a == "--gpus") {
      const char* v = next();
      if (!v) {
        std::fprintf(stderr, "tpcomm-doctor: %s needs a value\n", a.c_str());
        return 1;
      }
      if (a == "--timeout-ms") {
        char* end = nullptr;
        long t = std::strtol(v, &end, 10);
        if (!end || *end || t <= 0) {
          std::fprintf(stderr, "tpcomm-doctor: --timeout-ms '%s': expected a positive integer\n", v);
          return 1;
        }
        timeoutMs = static_cast<int>(t);
      } else if (a == "--sysfs-root") sysfsRoot = v;
      else if (a == "--machine-json") machineJson = v;
      else gpuList = v;
    } else if (a == "-h" || a == "--help") {
      usage();
      return 0;
    } else {
      std::fprintf(stderr, "tpcomm-doctor: unknown argument '%s'\n", a.c_str());
      usage();
      return 1;
    }
  }

  if (tune) return runTune(tuneOpts);
  if (tuneOpts.hostRanks || !tuneOpts.rankCounts.empty()) {
    std::fprintf(stderr, "tpcomm-doctor: --host and --tune-* options go with --tune\n");
    return 1;
  }

  MachineProbe m;
  ProbeSource src;
  if (!machineJson.empty()) {
    // Same reader as the cache: regular files only, non-blocking open, size cap.
    std::string text, why;
    if (readCacheFile(machineJson, &text, &why) != Status::kOk) {
      std::fprintf(stderr, "tpcomm-doctor: %s\n", why.c_str());
      return 1;
    }
    if (MachineProbe::fromJson(text, &m) != Status::kOk) {
      std::fprintf(stderr, "tpcomm-doctor: %s: %s\n", machineJson.c_str(), lastErrorMessage());
      return 1;
    }
    src.how = "file " + machineJson;
  } else {
    MachineRequest req = MachineRequest::fromParams();
    req.sysfsRoot = sysfsRoot;
    req.measure = measure;
    if (noCache) req.readCache = false;
    if (timeoutMs > 0) req.timeoutMs = timeoutMs;
    req.helper = "/proc/self/exe";
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) {
      self[n] = '\0';
      req.helper = self;
    }
    if (loadOrProbeMachine(req, &m, &src) != Status::kOk) {
      std::fprintf(stderr, "tpcomm-doctor: probe failed: %s\n", lastErrorMessage());
      return 2;
    }
  }

  std::vector<int> gpus;
  if (!gpuList.empty()) {
    std::stringstream ss(gpuList);
    std::string tok;
    while (std::getline(ss, tok, ',')) {
      int idx = -1;
      for (int g = 0; g < m.nGpus(); ++g)
        if (std::to_string(m.gpus[g].index) == tok) idx = g;
      if (idx < 0) {
        std::fprintf(stderr, "tpcomm-doctor: --gpus: no GPU %s in the probe\n", tok.c_str());
        return 1;
      }
      gpus.push_back(idx);
    }
  }
  DoctorReport r = buildDoctorReport(m, src, gpus);
  std::fputs(json ? (r.json + "\n").c_str() : r.text.c_str(), stdout);
  return r.exitCode;
}
