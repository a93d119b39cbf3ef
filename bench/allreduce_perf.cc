// allreduce_perf, reduce_scatter_perf, all_gather_perf: tpcomm's collective benchmarks in the
// format of nccl-tests' binaries of the same names (flags, header, table, footer), with tpcomm and
// NCCL timed by the same code on the same buffers. One program; the collective comes from its
// name (argv[0]).
//
// This file decides the mode and starts the controllers (bench_controller.cc does the work):
//   mpirun -np N (N > 1): one rank per process, MPI bootstrap, device = node-local rank;
//   -g N: one thread drives N GPUs (Communicator::createGroup / ncclCommInitAll);
//   -t N: N threads, one rank each (GPU t, or host ranks), thread bootstrap.
// Without GPUs (or with --host) every rank is a host rank (device -1) over host memory.
// Multicast stays off unless asked for: NCCL_NVLS_ENABLE is set to 0 when it is unset.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "bench_args.h"
#include "bench_controller.h"
#include "bench_fused.h"
#include "tpcomm/bootstrap.h"
#include "tpcomm/status.h"

#ifdef TPCOMM_BENCH_CUDA
#include <cuda_runtime_api.h>
#endif
#ifdef TPCOMM_BENCH_MPI
#include <mpi.h>

#include "tpcomm/mpi_bootstrap.h"
#endif

namespace {

int visibleGpus() {
#ifdef TPCOMM_BENCH_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

bool launchedByMpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MV2_COMM_WORLD_SIZE"})
    if (std::getenv(v)) return true;
  return false;
}

int usageError(const std::string& msg) {
  std::fprintf(stderr, "%s: %s\n", tpcomm_bench::gBenchName, msg.c_str());
  return 2;
}

// The controller body: the all-reduce tables, or --fused-rmsnorm's (bench_fused.cc).
int controller(const tpcomm_bench::RunInfo& info, tpcomm::Bootstrap* bs, int firstRank, const std::vector<int>& devices) {
  return info.args->fusedRmsnorm ? tpcomm_bench::runFusedController(info, bs, firstRank, devices)
                                 : tpcomm_bench::runController(info, bs, firstRank, devices);
}

// Threads mode: one controller per thread over a shared thread bootstrap.
int runThreads(tpcomm_bench::RunInfo& info, const std::vector<std::vector<int>>& devicesPerThread) {
  const int n = static_cast<int>(devicesPerThread.size());
  auto group = tpcomm::ThreadGroup::create(n);
  std::vector<int> status(n, 0);
  std::vector<std::thread> threads;
  int firstRank = 0;
  for (int t = 0; t < n; ++t) {
    threads.emplace_back([&, t, firstRank] {
      std::unique_ptr<tpcomm::Bootstrap> bs;
      tpcomm::Status s = tpcomm::makeThreadBootstrap(group, t, &bs);
      if (s != tpcomm::Status::kOk) {
        std::fprintf(stderr, "%s: thread bootstrap: %s\n", tpcomm_bench::gBenchName, tpcomm::lastErrorMessage());
        status[t] = 1;
        return;
      }
      status[t] = controller(info, bs.get(), firstRank, devicesPerThread[t]);
    });
    firstRank += static_cast<int>(devicesPerThread[t].size());
  }
  for (auto& th : threads) th.join();
  for (int s : status)
    if (s) return 1;
  return 0;
}

}  // namespace

// TPCOMM_ALLOW_SHARED_DEVICE=1: the library lets createGroup put several ranks on one GPU.
bool sharedDeviceAllowed() {
  const char* v = std::getenv("TPCOMM_ALLOW_SHARED_DEVICE");
  return v && std::string(v) == "1";
}

int main(int argc, char** argv) {
  tpcomm_bench::Args args;
  std::string error;
  tpcomm_bench::gBenchName = tpcomm_bench::benchName(tpcomm_bench::collFromProgram(argv[0]));
  if (!tpcomm_bench::parseArgs(argc, argv, &args, &error)) return usageError(error);
  if (args.help) {
    std::printf("%s", tpcomm_bench::usage(argv[0]).c_str());
    return 0;
  }
  tpcomm_bench::RunInfo info;
  info.args = &args;
  info.argv.assign(argv, argv + argc);
  if (!std::getenv("NCCL_NVLS_ENABLE")) {
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    info.notes += "# NCCL_NVLS_ENABLE was unset: set to 0 (no NVSwitch multicast; export NCCL_NVLS_ENABLE=1 to allow)\n";
  }

  int nProcs = 1, proc = 0, localRank = 0;
#ifdef TPCOMM_BENCH_MPI
  const bool mpi = launchedByMpi();
  if (mpi) {
    MPI_Init(&argc, &argv);
    MPI_Comm_size(MPI_COMM_WORLD, &nProcs);
    MPI_Comm_rank(MPI_COMM_WORLD, &proc);
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &localRank);
    MPI_Comm_free(&local);
  }
#else
  (void)proc;
  (void)localRank;
  if (launchedByMpi()) std::fprintf(stderr, "%s: launched by mpirun but built without MPI: each process runs alone\n", tpcomm_bench::gBenchName);
#endif
  const int gpus = args.hostRanks ? 0 : visibleGpus();
  if (gpus < args.requireGpus) {
    std::printf("%s: skipped: %d GPU(s) visible, --require-gpus %d\n", tpcomm_bench::gBenchName, gpus, args.requireGpus);
#ifdef TPCOMM_BENCH_MPI
    if (mpi) MPI_Finalize();
#endif
    return 77;
  }
  info.gpu = gpus > 0;
  int rc = 0;

  if (nProcs > 1) {
#ifdef TPCOMM_BENCH_MPI
    if (args.nGpus > 1 || args.nThreads > 1) {
      rc = usageError("under mpirun with more than one process, use one rank per process (-g 1 -t 1)");
    } else if (info.gpu && localRank >= gpus) {
      rc = usageError("process " + std::to_string(proc) + " is local rank " + std::to_string(localRank) + " but only " +
                      std::to_string(gpus) + " GPUs are visible (use --host for host ranks)");
    } else {
      std::unique_ptr<tpcomm::Bootstrap> bs;
      if (tpcomm::makeMpiBootstrap(MPI_COMM_WORLD, &bs) != tpcomm::Status::kOk) {
        rc = usageError(std::string("MPI bootstrap: ") + tpcomm::lastErrorMessage());
      } else {
        info.nRanks = nProcs;
        info.mode = "mpirun, " + std::to_string(nProcs) + " processes, one rank each";
        rc = controller(info, bs.get(), proc, {info.gpu ? localRank : -1});
      }
    }
    if (rc) MPI_Abort(MPI_COMM_WORLD, rc);
#endif
  } else if (args.nGpus > 1) {
    if (!info.gpu) {
      rc = usageError("-g " + std::to_string(args.nGpus) + " needs GPUs (none visible" +
                      std::string(args.hostRanks ? ", --host given" : "") + "); use -t N for host ranks");
    } else if (args.nGpus > gpus && !sharedDeviceAllowed()) {
      rc = usageError("-g " + std::to_string(args.nGpus) + " but only " + std::to_string(gpus) +
                      " GPUs are visible (TPCOMM_ALLOW_SHARED_DEVICE=1 puts several ranks on one GPU)");
    } else {
      // More ranks than GPUs only with TPCOMM_ALLOW_SHARED_DEVICE=1: rank i on GPU i % gpus, the
      // ranks sharing each GPU's SMs and memory bandwidth (a protocol check and a relative
      // timing of algorithms on the same footing, not the speed of separate GPUs).
      std::vector<int> devs;
      for (int i = 0; i < args.nGpus; ++i) devs.push_back(i % gpus);
      info.nRanks = args.nGpus;
      info.mode = "one process, one thread driving " + std::to_string(args.nGpus) + " ranks on " +
                  std::to_string(std::min(args.nGpus, gpus)) + " GPU(s)" +
                  (args.nGpus > gpus ? " (TPCOMM_ALLOW_SHARED_DEVICE=1: ranks share GPUs)" : "");
      rc = runThreads(info, {devs});
    }
  } else {
    if (info.gpu && args.nThreads > gpus && !sharedDeviceAllowed()) {
      rc = usageError("-t " + std::to_string(args.nThreads) + " but only " + std::to_string(gpus) +
                      " GPUs are visible (use --host for host ranks; TPCOMM_ALLOW_SHARED_DEVICE=1 puts several "
                      "ranks on one GPU)");
    } else {
      // A thread per rank is how tpcomm-doctor --tune times the algorithms, so --vs-best after a
      // tune compares like with like here (one thread driving every rank, -g N, serialises the
      // ranks' launches and can favour another algorithm at small sizes).
      std::vector<std::vector<int>> devs;
      for (int t = 0; t < args.nThreads; ++t) devs.push_back({info.gpu ? t % gpus : -1});
      info.nRanks = args.nThreads;
      info.mode = "one process, " + std::to_string(args.nThreads) + " thread(s), one rank each" +
                  (info.gpu && args.nThreads > gpus ? " (TPCOMM_ALLOW_SHARED_DEVICE=1: ranks share GPUs)" : "");
      rc = runThreads(info, devs);
    }
  }

#ifdef TPCOMM_BENCH_MPI
  if (mpi) MPI_Finalize();
#endif
  return rc;
}
