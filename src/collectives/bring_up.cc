// bring_up.cc: the steps of Communicator::create (bring_up.h).
#include "collectives/bring_up.h"

#include <algorithm>
#include <string>
#include <vector>

#ifdef TPCOMM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "algos/fused/fused_rmsnorm.h"
#include "collectives/registry.h"
#include "common/error.h"
#include "common/log.h"
#include "common/params.h"
#include "common/residency.h"
#include "topology/probe.h"
#include "transports/cuda_p2p.h"
#include "transports/host_staged.h"
#include "transports/multicast.h"
#include "transports/nccl_transport.h"

namespace tpcomm {

namespace {

// Every rank learns whether every rank succeeded.
Status agree(Bootstrap& bs, bool mine, bool* all) {
  std::vector<int> v(bs.size());
  int m = mine ? 1 : 0;
  TPCOMM_TRY(bs.allGather(&m, v.data(), sizeof(int)));
  *all = true;
  for (int x : v) *all = *all && x;
  return Status::kOk;
}

// A transport attempt agreed over every rank: kept only if it came up everywhere; otherwise the
// reason (this rank's own, or "failed on another rank") goes to `whyNot`.
template <typename T>
Status keepIfAll(Bootstrap& bs, Status s, std::unique_ptr<T>* made, std::unique_ptr<T>* slot, std::string* whyNot) {
  bool all;
  TPCOMM_TRY(agree(bs, s == Status::kOk, &all));
  if (all)
    *slot = std::move(*made);
  else
    *whyNot = s == Status::kOk ? "failed on another rank" : lastErrorMessage();
  return Status::kOk;
}

TransportEnv envOf(Bootstrap& bs, const AlgoContext& c) {
  return TransportEnv{c.rank, c.nRanks, c.device, &bs, c.topo, c.timeoutMs};
}

// staged_host's slot bytes. The copy-engine mode pays several stream operations per chunk: with
// 1 MiB chunks it was 1.07-1.31x slower than the SM kernel at 4-64 MB, with 4 MiB chunks
// 0.80-0.88x at 16-64 MB (two ranks sharing one H200; bench/results/h200x1.md), so it
// takes 4 MiB unless TPCOMM_STAGED_CHUNK_BYTES is set (a rejected value gives the table's
// default, as its warning says). agreeOnSettings compares this value, not the setting: ranks
// that reached different slot sizes would address each other's slots at different offsets.
int64_t stagedChunkBytesInForce() {
  if (paramInt(ParamId::kStagedCopyEngines) != 0 && !params()[static_cast<int>(ParamId::kStagedChunkBytes)].fromEnv)
    return int64_t{4} << 20;
  return paramInt(ParamId::kStagedChunkBytes);
}

Status bringUpHostStaged(Bootstrap& bs, AlgoContext* c, TransportReport* report) {
  HostStagedTransport::Geometry g;
  g.chunkBytes = static_cast<size_t>(stagedChunkBytesInForce());
  g.slots = static_cast<int>(paramInt(ParamId::kStagedSlots));
  g.blocks = static_cast<int>(paramInt(ParamId::kStagedBlocks));
  g.copyEngines = paramInt(ParamId::kStagedCopyEngines) != 0;
  g.ceSplit = static_cast<int>(paramInt(ParamId::kStagedCeSplit));
  std::unique_ptr<HostStagedTransport> t;
  Status s = c->topo.singleNode() ? HostStagedTransport::create(envOf(bs, *c), g, &t)
                                  : TPCOMM_ERROR(kNotSupported, "ranks span several nodes");
  return keepIfAll(bs, s, &t, &c->hostStaged, &report->hostStaged);
}

// The regions every algorithm asked for (Algorithm::needs()): the transport allocates and maps
// them without knowing whose they are.
Status bringUpP2p(Bootstrap& bs, AlgoContext* c, const TransportNeeds& needs, TransportReport* report) {
  std::unique_ptr<CudaP2pTransport> t;
  Status s = needs.p2p.empty() ? TPCOMM_ERROR(kNotSupported, "no algorithm asks for it")
                               : CudaP2pTransport::create(envOf(bs, *c), needs.p2p, &t);
  return keepIfAll(bs, s, &t, &c->p2p, &report->p2p);
}

// Ranks on the GPU of rank `rank` (itself included): ranks of one host with the same PCI bus id.
int ranksOnMyGpu(const Topology& t, int rank) {
  const RankDevice& me = t.ranks[rank];
  if (me.cudaDevice < 0) return 1;
  int n = 0;
  for (const RankDevice& r : t.ranks)
    n += r.cudaDevice >= 0 && r.hostId == me.hostId &&
         (me.busId.empty() ? r.processId == me.processId && r.cudaDevice == me.cudaDevice : r.busId == me.busId);
  return n;
}

// Whether two ranks drive one GPU (TPCOMM_ALLOW_SHARED_DEVICE=1): NCCL refuses such a group.
bool ranksShareAGpu(const Topology& t) {
  for (int a = 0; a < t.nRanks(); ++a)
    for (int b = a + 1; b < t.nRanks(); ++b)
      if (t.ranks[a].hostId == t.ranks[b].hostId && t.ranks[a].busId == t.ranks[b].busId && t.ranks[a].cudaDevice >= 0)
        return true;
  return false;
}

Status bringUpNccl(Bootstrap& bs, const Config& config, AlgoContext* c, TransportReport* report) {
  const bool want = config.useNccl && paramInt(ParamId::kNccl) != 0;
  std::unique_ptr<NcclTransport> t;
  Status s;
  if (ranksShareAGpu(c->topo) && !config.ncclComm)
    s = TPCOMM_ERROR(kNotSupported, "ranks share a GPU (NCCL needs one GPU per rank)");
  else if (config.ncclComm)
    s = NcclTransport::adopt(envOf(bs, *c), config.ncclComm, &t);
  else
    s = want ? NcclTransport::create(envOf(bs, *c), &t)
             : TPCOMM_ERROR(kNotSupported, "off (config.useNccl or TPCOMM_NCCL=0)");
  bool all;
  TPCOMM_TRY(agree(bs, s == Status::kOk, &all));
  // A communicator the engine handed in that does not fit is the caller's error, not a
  // transport that merely did not come up.
  if (config.ncclComm && !all)
    return s != Status::kOk ? s : TPCOMM_INVALID("config.ncclComm: rejected on another rank");
  if (all)
    c->nccl = std::move(t);
  else
    report->nccl = s == Status::kOk ? "failed on another rank" : lastErrorMessage();
  return Status::kOk;
}

// NVSwitch multicast (SAFETY, docs/multicast.md): the gate is agreed first, so no rank reaches a
// multicast driver call unless every rank's gate (device attribute, > 2 ranks on one NVSwitch,
// neither NCCL_NVLS_ENABLE=0 nor TPCOMM_MULTICAST=0) is open.
Status bringUpMulticast(Bootstrap& bs, AlgoContext* c, const TransportNeeds& needs, TransportReport* report) {
  std::string why;
  bool gate = c->topo.multicastUsable(&why), gateAll;
  TPCOMM_TRY(agree(bs, gate, &gateAll));
  if (!gateAll) {
    report->multicast = gate ? "gate closed on another rank" : why;
    return Status::kOk;
  }
  std::unique_ptr<MulticastTransport> t;
  Status s = needs.multicast.dataBytes == 0 ? TPCOMM_ERROR(kNotSupported, "no algorithm asks for it")
                                            : MulticastTransport::create(envOf(bs, *c), needs.multicast, &t);
  return keepIfAll(bs, s, &t, &c->multicast, &report->multicast);
}

}  // namespace

// What every algorithm asks of the transports, together: every P2P region request (the
// transport merges those under one key) and the largest multicast allocation.
TransportNeeds allNeeds(const std::vector<std::unique_ptr<Algorithm>>& algos, int nRanks) {
  TransportNeeds all;
  for (const auto& a : algos) {
    TransportNeeds n = a->needs(nRanks);
    all.p2p.insert(all.p2p.end(), n.p2p.begin(), n.p2p.end());
    all.multicast.maxBlocks = std::max(all.multicast.maxBlocks, n.multicast.maxBlocks);
    all.multicast.dataBytes = std::max(all.multicast.dataBytes, n.multicast.dataBytes);
  }
  return all;
}

Status checkCreateArgs(Bootstrap& bs, int device, const Config& config) {
  if (device < -1)
    return TPCOMM_INVALID("create: device %d: expected a CUDA device index >= 0, or -1 for a host rank", device);
  if (bs.size() < 1 || bs.rank() < 0 || bs.rank() >= bs.size())
    return TPCOMM_INVALID("create: bootstrap rank %d / size %d out of range", bs.rank(), bs.size());
  if (config.timeoutMs < 0)
    return TPCOMM_INVALID("create: config.timeoutMs %d: expected >= 0 (0: TPCOMM_TIMEOUT_MS)", config.timeoutMs);
  if (config.setupTimeoutMs < 0)
    return TPCOMM_INVALID("create: config.setupTimeoutMs %d: expected >= 0 (0: config.timeoutMs)",
                          config.setupTimeoutMs);
  if (config.compression != Compression::kNone && config.compression != Compression::kFp8 &&
      config.compression != Compression::kInt8)
    return TPCOMM_INVALID("create: config.compression %d: expected kNone, kFp8 or kInt8",
                          static_cast<int>(config.compression));
  if (device < 0 && config.ncclComm)
    return TPCOMM_INVALID("create: config.ncclComm is set but device is -1: a host communicator cannot use NCCL");
#ifdef TPCOMM_HAVE_CUDA
  if (device >= 0) {
    int count = 0;
    const std::string context = "create: device " + std::to_string(device) + " requested";
    TPCOMM_CUDA_TRY_IN(cudaGetDeviceCount(&count), context.c_str());  // a device was requested: CUDA must answer
    if (device >= count) return TPCOMM_INVALID("create: device %d: this process sees %d CUDA devices", device, count);
  }
#else
  if (device >= 0)
    return TPCOMM_ERROR(kNotSupported, "create: device %d requested but tpcomm was built without CUDA", device);
#endif
  return Status::kOk;
}

// Config::compression, else TPCOMM_COMPRESSION, parsed and agreed: a malformed value or ranks that
// differ fail create on every rank with the same message (ranks that compress differently would
// select different algorithms and wait for each other until the timeout).
namespace {
Status agreeOnCompression(Bootstrap& bs, const Config& config, AlgoOverride* ovr) {
  Compression mine = config.compression;
  Status parsed = Status::kOk;
  if (mine == Compression::kNone) {
    const std::string& text = paramString(ParamId::kCompression);
    if (!parseCompression(text.c_str(), &mine)) parsed = TPCOMM_INVALID("create: %s", compressionProblem(text).c_str());
  }
  int v = parsed == Status::kOk ? static_cast<int>(mine) : -1;
  std::vector<int> all(static_cast<size_t>(bs.size()));
  TPCOMM_TRY(bs.allGather(&v, all.data(), sizeof(int)));
  if (parsed != Status::kOk) return parsed;
  for (int r = 0; r < bs.size(); ++r) {
    if (all[r] < 0) return TPCOMM_INVALID("create: rank %d rejected its TPCOMM_COMPRESSION value", r);
    if (all[r] != all[0])
      return TPCOMM_INVALID(
          "create: compression (Config::compression / TPCOMM_COMPRESSION) is %s on rank %d but %s on rank 0: it must "
          "be the same on every rank",
          compressionName(static_cast<Compression>(all[r])), r, compressionName(static_cast<Compression>(all[0])));
  }
  ovr->compression = mine;
  if (mine != Compression::kNone && ovr->deterministicOnly && bs.rank() == 0)
    TPCOMM_INFO(kInit,
                "compression %s is not used in the deterministic mode: a compressed result depends on the other "
                "elements of its block, which the determinism contract excludes (docs/determinism.md)",
                compressionName(mine));
  return Status::kOk;
}
}  // namespace

// Parameters that shape what ranks exchange (scratch layouts, grids, which algorithm runs) must
// be equal on every rank: a mismatch would not fail, it would corrupt data or hang. Every rank
// sees every rank's values, so all return the same error, naming the parameter.
Status agreeOnSettings(Bootstrap& bs, const Config& config, AlgoOverride* ovr) {
  // A rejected environment value (common/params.h: one rule for every TPCOMM_ variable) or a
  // malformed override fails create before any collective work, on every rank alike.
  const std::string algoText = config.algo.empty() ? paramString(ParamId::kAlgo) : config.algo;
  std::vector<ParamId> notRead;  // explicit arguments win over the environment
  if (config.compression != Compression::kNone) notRead.push_back(ParamId::kCompression);
  if (config.timeoutMs > 0) notRead.push_back(ParamId::kTimeoutMs);
  Status parsed = checkParams("create", notRead);
  if (parsed == Status::kOk) parsed = parseAlgoOverride(algoText, algorithmNames(), ovr);
  int parsedHere = parsed == Status::kOk ? 1 : 0;
  std::vector<int> ok(static_cast<size_t>(bs.size()));
  TPCOMM_TRY(bs.allGather(&parsedHere, ok.data(), sizeof(int)));
  if (parsed != Status::kOk) return parsed;
  for (int r = 0; r < bs.size(); ++r)
    if (!ok[r])
      return TPCOMM_INVALID(
          "create: another rank (rank %d) rejected a TPCOMM_ environment value or its config.algo (its own error "
          "says which)",
          r);
  ovr->deterministicOnly = config.deterministic || paramInt(ParamId::kDeterministic) != 0;
  TPCOMM_TRY(agreeOnCompression(bs, config, ovr));

  // The grids, the host staging geometry and the choices ranks must make alike; then every
  // parameter an algorithm's scratch is sized by (Algorithm::sizedBy(): peers address it).
  std::vector<ParamId> shared = {ParamId::kP2pBlocks,         ParamId::kTwoshotBlocks, ParamId::kFusedBlocksPerRow,
                                 ParamId::kStagedChunkBytes,  ParamId::kStagedSlots,   ParamId::kStagedBlocks,
                                 ParamId::kStagedCopyEngines, ParamId::kCheckCalls,    ParamId::kTune,
                                 ParamId::kStagedCeSplit};  // chunk boundaries: every rank's must match
  for (const auto& a : makeAlgorithms(nullptr))
    for (ParamId id : a->sizedBy())
      if (std::find(shared.begin(), shared.end(), id) == shared.end()) shared.push_back(id);
  // Every rank has the same registry, so the same list: one row of values (and the hash of the
  // selection override) per rank.
  const size_t n = shared.size();
  std::vector<int64_t> mine(n + 1);
  for (size_t i = 0; i < n; ++i)
    mine[i] = shared[i] == ParamId::kStagedChunkBytes ? stagedChunkBytesInForce() : paramInt(shared[i]);
  uint64_t algoHash = 1469598103934665603ull;  // FNV-1a of the selection override text
  for (unsigned char ch : algoText) algoHash = (algoHash ^ ch) * 1099511628211ull;
  algoHash = (algoHash ^ (ovr->deterministicOnly ? 1 : 0)) * 1099511628211ull;  // same mode everywhere
  mine[n] = static_cast<int64_t>(algoHash);
  std::vector<int64_t> all(mine.size() * static_cast<size_t>(bs.size()));
  TPCOMM_TRY(bs.allGather(mine.data(), all.data(), mine.size() * sizeof(int64_t)));
  auto at = [&](int r, size_t i) { return all[static_cast<size_t>(r) * mine.size() + i]; };
  for (int r = 1; r < bs.size(); ++r) {
    for (size_t i = 0; i < n; ++i)
      if (at(r, i) != at(0, i))
        return TPCOMM_INVALID(
            "create: TPCOMM_%s is %lld on rank %d but %lld on rank 0: it must be the same on every rank",
            params()[static_cast<size_t>(shared[i])].name, static_cast<long long>(at(r, i)), r,
            static_cast<long long>(at(0, i)));
    if (at(r, n) != at(0, n))
      return TPCOMM_INVALID(
          "create: TPCOMM_ALGO / Config::algo or the deterministic mode on rank %d differs from rank 0's: it must be "
          "the same on every rank",
          r);
  }
  return Status::kOk;
}

Status initContext(Bootstrap& bs, int device, const Config& config, AlgoContext* c) {
  c->rank = bs.rank();
  c->nRanks = bs.size();
  c->device = device;
  c->timeoutMs = config.timeoutMs > 0 ? config.timeoutMs : static_cast<int>(paramInt(ParamId::kTimeoutMs));
  TPCOMM_TRY(probeTopology(bs, device, &c->topo));
  if (device >= 0) {
#ifdef TPCOMM_HAVE_CUDA
    void* word = nullptr;
    TPCOMM_CUDA_TRY(cudaHostAlloc(&word, sizeof(uint32_t), cudaHostAllocMapped | cudaHostAllocPortable));
    *static_cast<uint32_t*>(word) = 0;
    c->asyncError.word = static_cast<uint32_t*>(word);
    c->asyncError.deviceWord = static_cast<uint32_t*>(word);
#endif
  } else {
    c->asyncError.word = new uint32_t(0);
  }
  LaunchSettings& l = c->launch;
  l.p2pBlocks = static_cast<int>(paramInt(ParamId::kP2pBlocks));
  l.twoshotBlocks = static_cast<int>(paramInt(ParamId::kTwoshotBlocks));
  l.fusedBlocksPerRow = static_cast<int>(paramInt(ParamId::kFusedBlocksPerRow));
  l.checkCalls = paramInt(ParamId::kCheckCalls) != 0;
  // Programmatic dependent launch needs sm_90+; the kernels' griddepcontrol is a no-op below.
  // Where ranks share a GPU it is off: every tpcomm kernel lets its successor launch at once,
  // so a stream of queued calls puts kernel after kernel on the SMs, each waiting in
  // griddepcontrol.wait behind this rank's spinning all-reduce, until a peer's all-reduce (the
  // one that spin waits for) finds no SM left: a deadlock until the timeout.
  l.pdl = device >= 0 && c->topo.ranks[c->rank].ccMajor >= 9 && paramInt(ParamId::kPdl) != 0 &&
          ranksOnMyGpu(c->topo, c->rank) == 1;
  return Status::kOk;
}

void freeErrorWord(AlgoContext* c) {
  if (!c->asyncError.word) return;
#ifdef TPCOMM_HAVE_CUDA
  if (c->device >= 0) cudaFreeHost(const_cast<uint32_t*>(c->asyncError.word));
#endif
  if (c->device < 0) delete const_cast<uint32_t*>(c->asyncError.word);
  c->asyncError = AsyncError{};
}

Status preloadAlgorithms(Bootstrap& bs, const AlgoContext& ctx, const std::vector<std::unique_ptr<Algorithm>>& algos) {
  if (ctx.device < 0) return Status::kOk;
  Status s = TPCOMM_CUDA_ONLY(preloadResidualRmsNorm());
  for (const auto& a : algos)
    if (s == Status::kOk) s = a->preload();
  bool all;
  TPCOMM_TRY(agree(bs, s == Status::kOk, &all));
  if (s != Status::kOk) return s;
  if (!all) return TPCOMM_ERROR(kCudaError, "create: loading tpcomm's kernels failed on another rank");
  return Status::kOk;
}

Status checkResidency(Bootstrap& bs, const AlgoContext& c) {
  Status s = Status::kOk;
  if (c.device >= 0) {
    const RankDevice& me = c.topo.ranks[c.rank];
    // Ranks on this GPU, of any process (createGroup or processes under MPS / time-slicing, with
    // TPCOMM_ALLOW_SHARED_DEVICE): all their blocks may need the SMs at once.
    const int sharing = ranksOnMyGpu(c.topo, c.rank);
    const int staged = 2 * static_cast<int>(paramInt(ParamId::kStagedBlocks));  // both roles at once
    const int grid = std::max({c.launch.p2pBlocks, c.launch.twoshotBlocks, staged});
    const long long need = static_cast<long long>(grid) * sharing;
    const long long capacity = static_cast<long long>(me.smCount) * residentBlocksPerSm();
    if (me.smCount > 0 && residentBlocksPerSm() > 0 && need > capacity)
      s = TPCOMM_INVALID(
          "create: %d rank(s) on GPU %d need %lld resident blocks at once (largest grid %d: TPCOMM_P2P_BLOCKS %d, "
          "TPCOMM_TWOSHOT_BLOCKS %d, 2 x TPCOMM_STAGED_BLOCKS %d), the GPU holds %lld (%d SMs x %d): lower them",
          sharing, c.device, need, grid, c.launch.p2pBlocks, c.launch.twoshotBlocks, staged, capacity, me.smCount,
          residentBlocksPerSm());
  }
  bool all;
  TPCOMM_TRY(agree(bs, s == Status::kOk, &all));
  if (s != Status::kOk) return s;
  if (!all) return TPCOMM_INVALID("create: another rank's GPU cannot hold every block of a call at once");
  return Status::kOk;
}

Status bringUpTransports(Bootstrap& bs, const Config& config, const std::vector<std::unique_ptr<Algorithm>>& algos,
                         AlgoContext* c, TransportReport* report) {
  TPCOMM_TRY(bringUpHostStaged(bs, c, report));
  // GPU ranks report a failure any rank's staged_host kernel published in the segment, also where
  // this rank's own kernel never saw it (a late rank whose call came after its peers gave up).
  if (c->hostStaged && c->device >= 0) c->asyncError.shared = c->hostStaged->poisonWord();
  if (c->device >= 0) {
    const TransportNeeds needs = allNeeds(algos, c->nRanks);
    TPCOMM_TRY(bringUpP2p(bs, c, needs, report));
    TPCOMM_TRY(bringUpNccl(bs, config, c, report));
    TPCOMM_TRY(bringUpMulticast(bs, c, needs, report));
  } else {
    report->p2p = report->nccl = report->multicast = "host ranks";
  }
  clearError();
  return Status::kOk;
}

void warnUnrunnableOverrides(const AlgoOverride& ovr, const std::vector<std::unique_ptr<Algorithm>>& algos,
                             const TransportReport& report, int rank) {
  if (rank != 0) return;  // every rank has the same override and transports: say it once
  for (const AlgoRule& rule : ovr.rules)
    for (const std::string& name : rule.names)
      for (const auto& a : algos) {
        if (name != a->name() || a->available()) continue;
        const std::string& why = report.whyNot(a->transport());
        TPCOMM_WARN(kInit,
                    "TPCOMM_ALGO / Config::algo forces %s, which this communicator cannot run (%s): calls it covers "
                    "fall back to the next algorithm by cost (lastAlgorithm() names it)",
                    name.c_str(), why.empty() ? "its transport is not up" : why.c_str());
      }
}

Status setUpAlgorithms(Bootstrap& bs, const std::vector<std::unique_ptr<Algorithm>>& algos) {
  Status s = Status::kOk;
  for (const auto& a : algos)
    if (s == Status::kOk && a->available()) s = a->setUp();
  bool all;
  TPCOMM_TRY(agree(bs, s == Status::kOk, &all));
  if (s != Status::kOk) return s;
  if (!all) return TPCOMM_ERROR(kRemoteError, "create: an algorithm's set-up failed on another rank");
  return Status::kOk;
}

}  // namespace tpcomm
