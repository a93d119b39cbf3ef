// Communicator: validates calls, picks algorithms through the selector and runs them, falling
// back to the next candidate on kNotSupported.
#include "tpcomm/communicator.h"

#include <cstdio>
#include <map>
#include <thread>
#include <tuple>

#ifdef TPCOMM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "algos/fused_rmsnorm.h"
#include "algos/p2p_algorithm.h"
#include "algos/p2p_kernels.h"
#include "algos/staged_host.h"
#include "algos/twoshot_multicast.h"
#include "collectives/algo_override.h"
#include "collectives/comm_context.h"
#include "collectives/communicator_impl.h"
#include "collectives/registry.h"
#include "collectives/selector.h"
#include "common/error.h"
#include "common/params.h"
#include "topology/probe.h"
#include "transports/cuda_p2p.h"
#include "transports/host_staged.h"
#include "transports/multicast.h"
#include "transports/nccl_transport.h"

namespace tpcomm {

namespace {

#ifdef TPCOMM_HAVE_CUDA
Status preloadKernels() {
  TPCOMM_TRY(preloadLamportKernels());
  TPCOMM_TRY(preloadOneshotKernels());
  TPCOMM_TRY(preloadTwoshotKernels());
  TPCOMM_TRY(preloadFusedLamportKernels());
  TPCOMM_TRY(preloadFusedOneshotKernels());
  TPCOMM_TRY(preloadFusedTwoshotKernels());
  TPCOMM_TRY(preloadResidualRmsNormKernels());
  TPCOMM_TRY(preloadTwoshotMulticastKernels());
  return preloadStagedDeviceKernels();
}
#else
Status preloadKernels() { return Status::kOk; }
#endif

// Parameters that shape what ranks exchange (scratch layouts, grids, which algorithm runs) must
// be equal on every rank: a mismatch would not fail, it would corrupt data or hang. Every rank
// sees every rank's values, so all return the same error, naming the parameter.
Status checkSharedParams(Bootstrap& bs, const std::string& algoText) {
  static const ParamId kShared[] = {ParamId::kP2pBlocks,        ParamId::kTwoshotBlocks,   ParamId::kFusedBlocksPerRow,
                                    ParamId::kLamportMaxBytes,  ParamId::kOneshotMaxBytes, ParamId::kTwoshotChunkBytes,
                                    ParamId::kStagedChunkBytes, ParamId::kStagedSlots,     ParamId::kStagedBlocks};
  constexpr size_t kN = sizeof(kShared) / sizeof(kShared[0]);
  struct Shared {
    int64_t v[kN];
    uint64_t algoHash;  // FNV-1a of the selection override text
  } mine{};
  for (size_t i = 0; i < kN; ++i) mine.v[i] = paramInt(kShared[i]);
  mine.algoHash = 1469598103934665603ull;
  for (unsigned char ch : algoText) mine.algoHash = (mine.algoHash ^ ch) * 1099511628211ull;
  std::vector<Shared> all(static_cast<size_t>(bs.size()));
  TPCOMM_TRY(bs.allGather(&mine, all.data(), sizeof(Shared)));
  for (int r = 1; r < bs.size(); ++r) {
    for (size_t i = 0; i < kN; ++i)
      if (all[r].v[i] != all[0].v[i])
        return TPCOMM_INVALID(
            "create: TPCOMM_%s is %lld on rank %d but %lld on rank 0: it must be the same on every rank",
            params()[static_cast<size_t>(kShared[i])].name, static_cast<long long>(all[r].v[i]), r,
            static_cast<long long>(all[0].v[i]));
    if (all[r].algoHash != all[0].algoHash)
      return TPCOMM_INVALID(
          "create: TPCOMM_ALGO / Config::algo on rank %d differs from rank 0's: it must be the same on every rank", r);
  }
  return Status::kOk;
}

// Every rank agrees whether a transport came up; one rank's failure drops it everywhere so the
// algorithm lists (and therefore selections) stay identical.
Status agree(Bootstrap& bs, bool mine, bool* all) {
  std::vector<int> v(bs.size());
  int m = mine ? 1 : 0;
  TPCOMM_TRY(bs.allGather(&m, v.data(), sizeof(int)));
  *all = true;
  for (int x : v) *all = *all && x;
  return Status::kOk;
}

std::string initTable(const CommContext& c, const std::vector<Algorithm*>& algos, const AlgoOverride& ovr) {
  std::string out;
  char line[512];
  const Topology& t = c.topo;
  std::snprintf(line, sizeof(line), "communicator: %d ranks, %s\n", t.nRanks(),
                t.allHost() ? "host ranks" : "GPU ranks");
  out += line;
  for (int r = 0; r < t.nRanks(); ++r) {
    const RankDevice& d = t.ranks[r];
    std::snprintf(line, sizeof(line), "  rank %d: %s dev %d cc %d.%d bus %s numa %d host %d proc %d\n", r,
                  d.name.c_str(), d.cudaDevice, d.ccMajor, d.ccMinor, d.busId.c_str(), d.numaNode, d.hostId,
                  d.processId);
    out += line;
  }
  out += "  links:";
  for (int b = 0; b < t.nRanks(); ++b) {
    std::snprintf(line, sizeof(line), " %8d", b);
    out += line;
  }
  out += "\n";
  for (int a = 0; a < t.nRanks(); ++a) {
    std::snprintf(line, sizeof(line), "  %5d:", a);
    out += line;
    for (int b = 0; b < t.nRanks(); ++b) {
      std::snprintf(line, sizeof(line), " %8s", linkKindName(t.links[a][b].kind));
      out += line;
    }
    out += "\n";
  }
  auto transport = [&](const char* name, bool up, const std::string& why) {
    std::snprintf(line, sizeof(line), "  transport %-12s %s%s\n", name,
                  up ? "usable" : "not usable: ", up ? "" : why.c_str());
    out += line;
  };
  transport("host_staged", c.hostStaged != nullptr, c.hostStagedWhyNot);
  transport("cuda_p2p", c.p2p != nullptr, c.p2pWhyNot);
  transport("nccl", c.nccl != nullptr, c.ncclWhyNot);
  transport("multicast", c.multicast != nullptr, c.multicastWhyNot);
  out += "  all-reduce algorithm per size (bf16, eager):\n";
  out += describeSelection(algos, t, ovr, DataType::kBF16, false);
  return out;
}

bool validDtype(DataType d) { return dataTypeSize(d) != 0; }
bool validOp(ReduceOp op) { return op == ReduceOp::kSum || op == ReduceOp::kMax || op == ReduceOp::kMin; }

}  // namespace

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Communicator::~Communicator() {
  if (impl_ && !impl_->destroyed) destroy();
}

Status Communicator::create(Bootstrap& bootstrap, int device, const Config& config,
                            std::unique_ptr<Communicator>* out) {
  clearError();
  if (!out) return TPCOMM_INVALID("create: out is null");
  out->reset();
  if (device < -1)
    return TPCOMM_INVALID("create: device %d: expected a CUDA device index >= 0, or -1 for a host rank", device);
  if (bootstrap.size() < 1 || bootstrap.rank() < 0 || bootstrap.rank() >= bootstrap.size())
    return TPCOMM_INVALID("create: bootstrap rank %d / size %d out of range", bootstrap.rank(), bootstrap.size());
  if (config.timeoutMs < 0)
    return TPCOMM_INVALID("create: config.timeoutMs %d: expected >= 0 (0: TPCOMM_TIMEOUT_MS)", config.timeoutMs);
  if (device < 0 && config.ncclComm)
    return TPCOMM_INVALID("create: config.ncclComm is set but device is -1: a host communicator cannot use NCCL");
#ifdef TPCOMM_HAVE_CUDA
  if (device >= 0) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return TPCOMM_ERROR(kCudaError, "create: device %d requested but CUDA reports: %s", device,
                          cudaGetErrorString(e));
    }
    if (device >= count) return TPCOMM_INVALID("create: device %d: this process sees %d CUDA devices", device, count);
  }
#else
  if (device >= 0)
    return TPCOMM_ERROR(kNotSupported, "create: device %d requested but tpcomm was built without CUDA", device);
#endif
  DeviceGuard guard(device);
  auto impl = std::make_unique<Impl>();
  impl->ctx = std::make_unique<CommContext>();
  CommContext& c = *impl->ctx;
  c.rank = bootstrap.rank();
  c.nRanks = bootstrap.size();
  c.device = device;
  c.bootstrap = &bootstrap;
  c.timeoutMs = config.timeoutMs > 0 ? config.timeoutMs : static_cast<int>(paramInt(ParamId::kTimeoutMs));

  // A malformed override is rejected before any collective work, on every rank alike.
  std::string algoText = config.algo.empty() ? paramString(ParamId::kAlgo) : config.algo;
  Status ovrStatus = parseAlgoOverride(algoText, algorithmNames(), &impl->override);
  bool ovrOk;
  TPCOMM_TRY(agree(bootstrap, ovrStatus == Status::kOk, &ovrOk));
  if (ovrStatus != Status::kOk) return ovrStatus;
  if (!ovrOk) return TPCOMM_INVALID("create: another rank rejected its TPCOMM_ALGO / config.algo");
  TPCOMM_TRY(checkSharedParams(bootstrap, algoText));

  TPCOMM_TRY(probeTopology(bootstrap, device, &c.topo));

  if (device >= 0) {
#ifdef TPCOMM_HAVE_CUDA
    void* word = nullptr;
    cudaError_t e = cudaHostAlloc(&word, sizeof(uint32_t), cudaHostAllocMapped | cudaHostAllocPortable);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return TPCOMM_ERROR(kCudaError, "create: cudaHostAlloc of the error word: %s", cudaGetErrorString(e));
    }
    *static_cast<uint32_t*>(word) = 0;
    c.asyncError.word = static_cast<uint32_t*>(word);
    c.asyncError.deviceWord = static_cast<uint32_t*>(word);
#endif
    // Every kernel loaded now, not at its first launch (dev::preload in algos/p2p_common.cuh
    // says why). Agreed, so a GPU without a kernel image for this build fails create on all ranks.
    Status pre = preloadKernels();
    bool preAll;
    TPCOMM_TRY(agree(bootstrap, pre == Status::kOk, &preAll));
    if (pre != Status::kOk) return pre;
    if (!preAll) return TPCOMM_ERROR(kCudaError, "create: loading tpcomm's kernels failed on another rank");
  } else {
    impl->hostErrorWord = std::make_unique<uint32_t>(0);
    c.asyncError.word = impl->hostErrorWord.get();
  }

  // Transports. Each creation is collective; agree() keeps availability identical on all ranks.
  {
    HostStagedTransport::Geometry g;
    g.chunkBytes = static_cast<size_t>(paramInt(ParamId::kStagedChunkBytes));
    g.slots = static_cast<int>(paramInt(ParamId::kStagedSlots));
    g.blocks = static_cast<int>(paramInt(ParamId::kStagedBlocks));
    std::unique_ptr<HostStagedTransport> t;
    Status s = c.topo.singleNode() ? HostStagedTransport::create(c, g, &t)
                                   : TPCOMM_ERROR(kNotSupported, "ranks span several nodes");
    bool all;
    TPCOMM_TRY(agree(bootstrap, s == Status::kOk, &all));
    if (all)
      c.hostStaged = std::move(t);
    else
      c.hostStagedWhyNot = s == Status::kOk ? "failed on another rank" : lastErrorMessage();
  }
  if (device >= 0) {
    std::unique_ptr<CudaP2pTransport> t;
    Status s = CudaP2pTransport::create(c, &t);
    bool all;
    TPCOMM_TRY(agree(bootstrap, s == Status::kOk, &all));
    if (all)
      c.p2p = std::move(t);
    else
      c.p2pWhyNot = s == Status::kOk ? "failed on another rank" : lastErrorMessage();

    bool wantNccl = config.useNccl && paramInt(ParamId::kNccl) != 0;
    std::unique_ptr<NcclTransport> nt;
    if (config.ncclComm)
      s = NcclTransport::adopt(c, config.ncclComm, &nt);
    else
      s = wantNccl ? NcclTransport::create(c, &nt)
                   : TPCOMM_ERROR(kNotSupported, "off (config.useNccl or TPCOMM_NCCL=0)");
    TPCOMM_TRY(agree(bootstrap, s == Status::kOk, &all));
    // A communicator the engine handed in that does not fit is the caller's error, not a
    // transport that merely did not come up.
    if (config.ncclComm && !all)
      return s != Status::kOk ? s : TPCOMM_INVALID("config.ncclComm: rejected on another rank");
    if (all)
      c.nccl = std::move(nt);
    else
      c.ncclWhyNot = s == Status::kOk ? "failed on another rank" : lastErrorMessage();

    // NVSwitch multicast (SAFETY, DESIGN.md): the gate is agreed first, so no rank reaches a
    // multicast driver call unless every rank's gate (device attribute, > 2 ranks on one
    // NVSwitch, neither NCCL_NVLS_ENABLE=0 nor TPCOMM_MULTICAST=0) is open.
    std::string mcWhy;
    bool mcGate = c.topo.multicastUsable(&mcWhy), mcGateAll;
    TPCOMM_TRY(agree(bootstrap, mcGate, &mcGateAll));
    std::unique_ptr<MulticastTransport> mt;
    if (mcGateAll) {
      s = MulticastTransport::create(c, &mt);
      TPCOMM_TRY(agree(bootstrap, s == Status::kOk, &all));
      if (all)
        c.multicast = std::move(mt);
      else
        c.multicastWhyNot = s == Status::kOk ? "failed on another rank" : lastErrorMessage();
    } else {
      c.multicastWhyNot = mcGate ? "gate closed on another rank" : mcWhy;
    }
  } else {
    c.p2pWhyNot = "host ranks";
    c.ncclWhyNot = "host ranks";
    c.multicastWhyNot = "host ranks";
  }
  clearError();

  impl->p2pBlocks = static_cast<int>(paramInt(ParamId::kP2pBlocks));
  impl->twoshotBlocks = static_cast<int>(paramInt(ParamId::kTwoshotBlocks));
  impl->fusedBlocksPerRow = static_cast<int>(paramInt(ParamId::kFusedBlocksPerRow));
  impl->pdl = device >= 0 && c.topo.ranks[c.rank].ccMajor >= 9 && paramInt(ParamId::kPdl) != 0;
  impl->algos = makeAlgorithms(&c);
  impl->algoList = rawList(impl->algos);
  if (c.rank == 0 && logEnabled(LogLevel::kInfo, kInit)) {
    std::string table = initTable(c, impl->algoList, impl->override);
    TPCOMM_INFO(kInit, "\n%s", table.c_str());
  }
  out->reset(new Communicator(std::move(impl)));
  return Status::kOk;
}

Status Communicator::createGroup(const std::vector<int>& devices, const Config& config,
                                 std::vector<std::unique_ptr<Communicator>>* out) {
  clearError();
  if (!out) return TPCOMM_INVALID("createGroup: out is null");
  out->clear();
  if (devices.empty()) return TPCOMM_INVALID("createGroup: devices is empty");
  for (size_t i = 0; i < devices.size(); ++i) {
    if (devices[i] < 0)
      return TPCOMM_INVALID("createGroup: devices[%zu] = %d: expected a CUDA device index >= 0", i, devices[i]);
    for (size_t j = 0; j < i; ++j)
      if (devices[j] == devices[i]) return TPCOMM_INVALID("createGroup: device %d appears twice", devices[i]);
  }
  const int n = static_cast<int>(devices.size());
  auto group = ThreadGroup::create(n);
  std::vector<std::unique_ptr<Communicator>> comms(n);
  std::vector<Status> status(n, Status::kOk);
  std::vector<std::string> messages(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<Bootstrap> bs;
      status[r] = makeThreadBootstrap(group, r, &bs);
      if (status[r] == Status::kOk) status[r] = create(*bs, devices[r], config, &comms[r]);
      if (status[r] == Status::kOk) comms[r]->impl_->ownedBootstrap = std::move(bs);
      messages[r] = lastErrorMessage();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r)
    if (status[r] != Status::kOk)
      return setError(status[r], __FILE__, __LINE__, "createGroup: rank %d (device %d): %s", r, devices[r],
                      messages[r].c_str());
  *out = std::move(comms);
  return Status::kOk;
}

Status Communicator::groupStart() {
  TPCOMM_TRY(ncclGroupStartIfAny());
  fusedNormGroupStarted();  // unfused norms after ring_nccl wait for the outermost groupEnd
  return Status::kOk;
}
Status Communicator::groupEnd() { return fusedNormGroupEnded(ncclGroupEndIfAny()); }

Status prepareCall(Communicator::Impl& impl, CollArgs& a, const char* what) {
  CommContext& c = *impl.ctx;
  a.nRanks = c.nRanks;
  a.capturing = false;
  if (c.device < 0 && a.stream != nullptr)
    return TPCOMM_INVALID(
        "%s: stream must be null on a host communicator (device -1): host collectives are synchronous", what);
  return Status::kOk;
}

namespace {

// The stream's capture status, into a.capturing (GPU ranks only).
Status queryCapture(const CommContext& c, CollArgs& a, const char* what) {
#ifdef TPCOMM_HAVE_CUDA
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  cudaError_t e = cudaStreamIsCapturing(a.stream, &cs);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return TPCOMM_INVALID("%s: stream is not a valid CUDA stream on device %d: %s", what, c.device,
                          cudaGetErrorString(e));
  }
  a.capturing = cs == cudaStreamCaptureStatusActive;
#else
  (void)c;
  (void)a;
  (void)what;
#endif
  return Status::kOk;
}

const Communicator::Impl::CachedSelection& lookupSelection(Communicator::Impl& impl, const CollArgs& a) {
  const Communicator::Impl::ShapeKey key{static_cast<int>(a.kind), static_cast<int>(a.dtype), static_cast<int>(a.op),
                                         a.bytes()};
  if (impl.lastSelection && key == impl.lastShape) return *impl.lastSelection;
  auto hit = impl.selectionCache.find(key);
  if (hit == impl.selectionCache.end()) {
    if (impl.selectionCache.size() > 4096) {
      impl.selectionCache.clear();
      impl.lastSelection = nullptr;
    }
    Communicator::Impl::CachedSelection e;
    e.sel = selectForShape(impl.algoList, impl.ctx->topo, AlgoQuery::of(a), impl.override);
    e.deferCaptureQuery = impl.ctx->device >= 0 && e.sel.sameFirst && isP2pAlgorithm(e.sel.eager[0].algo);
    hit = impl.selectionCache.emplace(key, std::move(e)).first;
  }
  impl.lastShape = key;
  impl.lastSelection = &hit->second;
  return hit->second;
}

}  // namespace

Status candidatesFor(Communicator::Impl& impl, CollArgs& a, const char* what, CallCandidates* out) {
  const Communicator::Impl::CachedSelection& e = lookupSelection(impl, a);
  out->entry = &e;
  out->list = &e.sel.eager;
  out->captureKnown = !e.deferCaptureQuery;
  if (out->captureKnown && impl.ctx->device >= 0) {
    TPCOMM_TRY(queryCapture(*impl.ctx, a, what));
    out->list = &e.sel.forMode(a.capturing);
  }
  if (out->list->empty())
    return TPCOMM_ERROR(kNotSupported, "%s: no algorithm supports %s of %zu bytes (%s%s) on this topology", what,
                        collKindName(a.kind), a.bytes(), dataTypeName(a.dtype), a.capturing ? ", capturing" : "");
  return Status::kOk;
}

Status resolveCapture(Communicator::Impl& impl, CollArgs& a, const char* what, CallCandidates* c) {
  if (c->captureKnown) return Status::kOk;
  TPCOMM_TRY(queryCapture(*impl.ctx, a, what));
  c->captureKnown = true;
  c->list = &c->entry->sel.forMode(a.capturing);  // sameFirst: [0] is the candidate that just ran
  return Status::kOk;
}

Status runCollective(Communicator::Impl& impl, CollArgs& a, const char* what) {
  TPCOMM_TRY(prepareCall(impl, a, what));
  CallCandidates cands;
  TPCOMM_TRY(candidatesFor(impl, a, what, &cands));
  for (size_t i = 0; i < cands.list->size(); ++i) {
    Algorithm* algo = (*cands.list)[i].algo;
    Status s = algo->run(a);
    if (s != Status::kOk && !cands.captureKnown) TPCOMM_TRY(resolveCapture(impl, a, what, &cands));
    if (s == Status::kNotSupported) continue;
    impl.lastAlgorithm = algo->name();
    if (s == Status::kOk)
      TPCOMM_TRACE(kColl, "%s %zu bytes %s -> %s", what, a.bytes(), dataTypeName(a.dtype), algo->name());
    return s;
  }
  return TPCOMM_ERROR(kNotSupported, "%s: every candidate declined %zu bytes", what, a.bytes());
}

static Status validateCall(const char* what, const void* send, const void* recv, size_t count, DataType dtype,
                           ReduceOp op, int nRanks, bool perRank) {
  if (!send) return TPCOMM_INVALID("%s: send is null", what);
  if (!recv) return TPCOMM_INVALID("%s: recv is null", what);
  if (count == 0) return TPCOMM_INVALID("%s: count is 0: expected at least one element", what);
  if (!validDtype(dtype))
    return TPCOMM_INVALID("%s: dtype %d is not a DataType (f32, f16, bf16)", what, static_cast<int>(dtype));
  if (!validOp(op)) return TPCOMM_INVALID("%s: op %d is not a ReduceOp (sum, max, min)", what, static_cast<int>(op));
  size_t es = dataTypeSize(dtype);
  size_t limit = SIZE_MAX / es / (perRank ? static_cast<size_t>(nRanks) : 1);
  if (count > limit) return TPCOMM_INVALID("%s: count %zu overflows the byte size of the buffers", what, count);
  return Status::kOk;
}

Status Communicator::allReduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                               cudaStream_t stream) {
  TPCOMM_API_ENTRY("allReduce");
  TPCOMM_TRY(validateCall("allReduce", send, recv, count, dtype, op, impl_->ctx->nRanks, false));
  CollArgs a;
  a.kind = CollKind::kAllReduce;
  a.send = send;
  a.recv = recv;
  a.count = count;
  a.dtype = dtype;
  a.op = op;
  a.stream = stream;
  return runCollective(*impl_, a, "allReduce");
}

Status Communicator::reduceScatter(const void* send, void* recv, size_t recvCount, DataType dtype, ReduceOp op,
                                   cudaStream_t stream) {
  TPCOMM_API_ENTRY("reduceScatter");
  TPCOMM_TRY(validateCall("reduceScatter", send, recv, recvCount, dtype, op, impl_->ctx->nRanks, true));
  CollArgs a;
  a.kind = CollKind::kReduceScatter;
  a.send = send;
  a.recv = recv;
  a.count = recvCount;
  a.dtype = dtype;
  a.op = op;
  a.stream = stream;
  return runCollective(*impl_, a, "reduceScatter");
}

Status Communicator::allGather(const void* send, void* recv, size_t sendCount, DataType dtype, cudaStream_t stream) {
  TPCOMM_API_ENTRY("allGather");
  TPCOMM_TRY(validateCall("allGather", send, recv, sendCount, dtype, ReduceOp::kSum, impl_->ctx->nRanks, true));
  CollArgs a;
  a.kind = CollKind::kAllGather;
  a.send = send;
  a.recv = recv;
  a.count = sendCount;
  a.dtype = dtype;
  a.stream = stream;
  return runCollective(*impl_, a, "allGather");
}

Status Communicator::checkError() {
  if (!impl_ || impl_->destroyed) return TPCOMM_INVALID("checkError: the communicator was destroyed");
  const AsyncError& e = impl_->ctx->asyncError;
  uint32_t w = e.word ? *e.word : 0;
  if (w == 0) return Status::kOk;
  Status s = static_cast<Status>(w & 0xffffu);
  int peer = static_cast<int>(w >> 16) - 1;
  std::string who = peer >= 0 ? "rank " + std::to_string(peer) : std::string("an unknown rank");
  if (s == Status::kTimeout)
    return setError(s, __FILE__, __LINE__,
                    "rank %d: a collective timed out after %d ms waiting for %s; the communicator is unusable",
                    impl_->ctx->rank, impl_->ctx->timeoutMs, who.c_str());
  return setError(s, __FILE__, __LINE__, "rank %d: an earlier collective failed (peer %d)", impl_->ctx->rank, peer);
}

Status Communicator::destroy() {
  clearError();
  if (!impl_ || impl_->destroyed) return TPCOMM_INVALID("destroy: the communicator was already destroyed");
  CommContext& c = *impl_->ctx;
  Status result = Status::kOk;
  {
    DeviceGuard guard(c.device);
#ifdef TPCOMM_HAVE_CUDA
    // Kernels in flight read transport memory; every wait in them is bounded, so this returns.
    // A createGroup communicator is destroyed by the one thread that drives all ranks, so it
    // cannot wait for its peers at a barrier: it drains every device of the group instead.
    if (c.device >= 0) {
      for (const RankDevice& d : c.topo.ranks) {
        bool drain =
            d.cudaDevice == c.device || (impl_->ownedBootstrap && d.processId == c.topo.ranks[c.rank].processId);
        if (drain && (cudaSetDevice(d.cudaDevice) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess))
          cudaGetLastError();
      }
      cudaSetDevice(c.device);
    }
#endif
    // No peer may still read our buffers when we free them.
    if (c.nRanks > 1 && c.bootstrap && !impl_->ownedBootstrap) result = c.bootstrap->barrier();
    impl_->algos.clear();
    impl_->algoList.clear();
    c.nccl.reset();
    c.multicast.reset();
    c.p2p.reset();
    c.hostStaged.reset();
#ifdef TPCOMM_HAVE_CUDA
    if (c.device >= 0 && c.asyncError.word) cudaFreeHost(const_cast<uint32_t*>(c.asyncError.word));
#endif
    c.asyncError = AsyncError{};
  }
  impl_->destroyed = true;
  return result;
}

const char* Communicator::lastAlgorithm() const { return impl_ ? impl_->lastAlgorithm : "none"; }
int Communicator::rank() const { return impl_ && impl_->ctx ? impl_->ctx->rank : -1; }
int Communicator::size() const { return impl_ && impl_->ctx ? impl_->ctx->nRanks : 0; }
int Communicator::device() const { return impl_ && impl_->ctx ? impl_->ctx->device : -1; }

const char* collKindName(CollKind k) {
  switch (k) {
    case CollKind::kAllReduce:
      return "allReduce";
    case CollKind::kReduceScatter:
      return "reduceScatter";
    case CollKind::kAllGather:
      return "allGather";
  }
  return "invalid";
}

}  // namespace tpcomm
