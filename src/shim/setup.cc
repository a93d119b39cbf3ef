// setup: see setup.h. Every wait here is bounded by TPCOMM_TIMEOUT_MS.
#include "shim/setup.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "common/error.h"
#include "common/log.h"
#include "common/params.h"
#include "tpcomm/nccl_bootstrap.h"

namespace tpcomm {
namespace shim {
namespace {

int timeoutMs() { return static_cast<int>(paramInt(ParamId::kTimeoutMs)); }

// Polls `done` until it returns true or the timeout passes.
template <typename Done>
bool boundedWait(Done done) {
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs());
  for (int spins = 0;; ++spins) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() > end) return false;
    if (spins < 1000)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

void disable(ShimComm& c, const std::string& why) {
  c.state = SetupState::kDisabled;
  c.whyNot = why;
  TPCOMM_WARN(kInit, "libtpcomm_nccl: rank %d of %d: tpcomm off for this communicator, NCCL runs it: %s", c.rank,
              c.nRanks, why.c_str());
}

Config shimConfig() {
  Config cfg;
  cfg.useNccl = false;  // the real NCCL is the shim's alternative, not a tpcomm transport
  return cfg;
}

// One rank in this process: private split, NCCL bootstrap, create, agreement.
Status setupOneRank(ShimComm& c, const RealNccl& real) {
  if (!real.commSplit)
    return TPCOMM_ERROR(kNotSupported, "the real NCCL (%d) has no ncclCommSplit (needs NCCL >= 2.18)", real.version);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t boot = nullptr;
  ncclResult_t r = real.commSplit(c.real, 0, c.rank, &boot, &cfg);
  if ((r != ncclSuccess && r != ncclInProgress) || !boot)
    return TPCOMM_ERROR(kRemoteError, "ncclCommSplit for the set-up exchange: %s", real.getErrorString(r));
  ncclResult_t state = ncclInProgress;
  bool ready = boundedWait([&] {
    if (real.commGetAsyncError(boot, &state) != ncclSuccess) state = ncclInternalError;
    return state != ncclInProgress;
  });
  if (!ready || state != ncclSuccess) {
    real.commAbort(boot);
    if (!ready)
      return TPCOMM_ERROR(kTimeout, "ncclCommSplit did not complete within %d ms (TPCOMM_TIMEOUT_MS)", timeoutMs());
    return TPCOMM_ERROR(kRemoteError, "ncclCommSplit: %s", real.getErrorString(state));
  }
  c.bootComm = boot;
  TPCOMM_TRY(makeNcclBootstrap(boot, real.bootstrapFunctions(), 0, &c.bootstrap));
  Status mine = Communicator::create(*c.bootstrap, c.device, shimConfig(), &c.ownComm);
  std::string myMessage = mine == Status::kOk ? "" : lastErrorMessage();
  if (ncclBootstrapAborted(c.bootstrap.get())) return TPCOMM_ERROR(kTimeout, "%s", myMessage.c_str());
  // All or none: a rank that failed must not leave its peers running tpcomm kernels.
  int ok = mine == Status::kOk ? 1 : 0;
  std::vector<int> all(c.nRanks);
  TPCOMM_TRY(c.bootstrap->allGather(&ok, all.data(), sizeof(int)));
  for (int r2 = 0; r2 < c.nRanks; ++r2)
    if (!all[r2])
      return TPCOMM_ERROR(kRemoteError, "set-up failed on rank %d%s%s", r2, r2 == c.rank ? ": " : "",
                          r2 == c.rank ? myMessage.c_str() : "");
  c.tp = c.ownComm.get();
  return Status::kOk;
}

void releaseOneRank(ShimComm& c, const RealNccl& real, bool abort) {
  if (abort && c.bootstrap) abandonNcclBootstrap(c.bootstrap.get());
  if (c.ownComm) c.ownComm->destroy();  // collective barrier unless abandoned
  c.ownComm.reset();
  bool bootDead = c.bootstrap && ncclBootstrapAborted(c.bootstrap.get());
  c.bootstrap.reset();
  if (c.bootComm && !bootDead) {
    if (abort)
      real.commAbort(c.bootComm);
    else
      real.commDestroy(c.bootComm);
  }
  c.bootComm = nullptr;
}

// All ranks in this process: createGroup over the members' devices, in rank order.
void setupClique(std::vector<std::shared_ptr<ShimComm>> members, const RealNccl& real) {
  std::vector<std::unique_lock<std::mutex>> locks;
  std::sort(members.begin(), members.end(), [](const auto& a, const auto& b) { return a.get() < b.get(); });
  for (auto& m : members) locks.emplace_back(m->mu);  // address order: no lock-order cycles
  for (auto& m : members) {
    if (m->state != SetupState::kPending) return;  // another member settled the clique
    if (!refreshInfo(*m, real)) return;            // a rank still initializing: later
  }
  std::sort(members.begin(), members.end(), [](const auto& a, const auto& b) { return a->rank < b->rank; });
  std::vector<int> devices;
  for (int r = 0; r < static_cast<int>(members.size()); ++r) {
    if (members[r]->rank != r) {
      for (auto& m : members) disable(*m, "the ranks made together in this process are not 0..n-1");
      return;
    }
    devices.push_back(members[r]->device);
  }
  auto clique = std::make_shared<Clique>();
  Status s = Communicator::createGroup(devices, shimConfig(), &clique->comms);
  if (s != Status::kOk) {
    std::string why = std::string("createGroup: ") + lastErrorMessage();
    for (auto& m : members) disable(*m, why);
    return;
  }
  for (auto& m : members) {
    m->clique = clique;
    m->tp = clique->comms[m->rank].get();
    m->state = SetupState::kReady;
  }
  TPCOMM_INFO(kInit, "libtpcomm_nccl: tpcomm set up for %zu ranks driven by this process", members.size());
}

}  // namespace

bool refreshInfo(ShimComm& c, const RealNccl& real) {
  if (c.infoKnown) return true;
  ncclResult_t state = ncclSuccess;
  if (real.commGetAsyncError(c.real, &state) != ncclSuccess || state != ncclSuccess) return false;
  if (real.commUserRank(c.real, &c.rank) != ncclSuccess || real.commCount(c.real, &c.nRanks) != ncclSuccess ||
      real.commCuDevice(c.real, &c.device) != ncclSuccess)
    return false;
  c.infoKnown = true;
  return true;
}

void runSetup(const std::shared_ptr<ShimComm>& c, const RealNccl& real, cudaStream_t stream) {
  std::vector<std::shared_ptr<ShimComm>> members;
  {
    std::lock_guard<std::mutex> lock(c->mu);
    if (c->state != SetupState::kPending || !refreshInfo(*c, real)) return;
    if (c->nRanks < 2) return disable(*c, "a one-rank communicator");
    members = CommTable::instance().sameCreation(c->key, c->creation);
    if (members.size() == 1) {
      // Work already on the caller's stream (the engine's earlier NCCL calls) finishes first.
      if (stream && !boundedWait([&] { return cudaStreamQuery(stream) != cudaErrorNotReady; })) {
        cudaGetLastError();
        return disable(*c, "the engine's stream did not drain before set-up within TPCOMM_TIMEOUT_MS");
      }
      cudaGetLastError();
      auto t0 = std::chrono::steady_clock::now();
      Status s = setupOneRank(*c, real);
      if (s != Status::kOk) {
        std::string why = lastErrorMessage();
        releaseOneRank(*c, real, /*abort=*/true);
        return disable(*c, why);
      }
      c->state = SetupState::kReady;
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      TPCOMM_INFO(kInit, "libtpcomm_nccl: rank %d of %d (device %d): tpcomm set up in %.0f ms", c->rank, c->nRanks,
                  c->device, ms);
      return;
    }
    if (static_cast<int>(members.size()) != c->nRanks)
      return disable(*c, "this process drives " + std::to_string(members.size()) + " of " + std::to_string(c->nRanks) +
                             " ranks from one creation; tpcomm runs one rank per process or all ranks in one");
  }
  setupClique(members, real);
}

void teardown(ShimComm& c, const RealNccl& real, bool abort) {
  std::lock_guard<std::mutex> lock(c.mu);
  if (c.clique) {
    // createGroup's communicators drain their devices and do not wait for each other.
    if (c.rank >= 0 && c.rank < static_cast<int>(c.clique->comms.size()) && c.clique->comms[c.rank]) {
      c.clique->comms[c.rank]->destroy();
      c.clique->comms[c.rank].reset();
    }
    c.clique.reset();
  } else {
    releaseOneRank(c, real, abort);
  }
  c.tp = nullptr;
  c.state = SetupState::kDisabled;
  c.whyNot = "destroyed";
  c.decisions.clear();
}

}  // namespace shim
}  // namespace tpcomm
