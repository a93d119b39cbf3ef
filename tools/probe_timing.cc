// probe_timing.cc: times the topology probe as Communicator::create runs it (probeTopology over
// n thread ranks of one process, one GPU each), then a whole Communicator::createGroup. Run it
// with TPCOMM_TOPO_CACHE=0 (cold: probe child + P2P checks) and with the cache warm. Prints:
//   probe_timing gpus=2 probe_ms=812.3 link01=nvlink x18 verified=1
//   probe_timing gpus=2 create_ms=900.1
// Used by tools/gpu_probe_check.sh. Exit 0 on success, 1 on failure, 77 without GPUs.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include <thread>

#include "topology/probe.h"
#include "tpcomm/tpcomm.h"

int main(int argc, char** argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 2;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count < n) {
    std::printf("probe_timing: needs %d GPUs, found %d\n", n, count);
    return 77;
  }
  // Initialise CUDA on every device first: an engine has its contexts before it creates the
  // communicator, and the probe's cost is what we measure, not context creation.
  for (int d = 0; d < n; ++d) {
    cudaSetDevice(d);
    cudaFree(nullptr);
  }
  // 1. probeTopology alone, ranks as threads (what create() calls).
  {
    auto group = tpcomm::ThreadGroup::create(n);
    std::vector<tpcomm::Topology> topos(n);
    std::vector<tpcomm::Status> st(n, tpcomm::Status::kOk);
    std::vector<std::thread> threads;
    auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        cudaSetDevice(r);
        std::unique_ptr<tpcomm::Bootstrap> bs;
        st[r] = tpcomm::makeThreadBootstrap(group, r, &bs);
        if (st[r] == tpcomm::Status::kOk) st[r] = tpcomm::probeTopology(*bs, r, &topos[r]);
      });
    for (auto& t : threads) t.join();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    for (int r = 0; r < n; ++r)
      if (st[r] != tpcomm::Status::kOk) {
        std::printf("probe_timing: probeTopology failed on rank %d\n", r);
        return 1;
      }
    const tpcomm::PeerLink& l = topos[0].links[0][n > 1 ? 1 : 0];
    std::printf("probe_timing gpus=%d probe_ms=%.1f link01=%s x%d verified=%d%s%s\n", n, ms, tpcomm::linkKindName(l.kind),
                l.nvlinks, l.p2pVerified ? 1 : 0, l.why.empty() ? "" : " why=", l.why.c_str());
  }
  std::vector<int> devices;
  for (int d = 0; d < n; ++d) devices.push_back(d);
  tpcomm::Config cfg;
  cfg.useNccl = false;  // time the probe, not ncclCommInitRank
  std::vector<std::unique_ptr<tpcomm::Communicator>> comms;
  auto t0 = std::chrono::steady_clock::now();
  tpcomm::Status s = tpcomm::Communicator::createGroup(devices, cfg, &comms);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (s != tpcomm::Status::kOk) {
    std::printf("probe_timing: createGroup failed: %s\n", tpcomm::lastErrorMessage());
    return 1;
  }
  std::printf("probe_timing gpus=%d create_ms=%.1f (includes transport setup; TPCOMM_DEBUG=INFO shows the probe's share)\n", n, ms);
  comms.clear();
  return 0;
}
