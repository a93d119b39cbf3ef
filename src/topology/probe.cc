// probe.cc: the collective probe (see probe.h) and where the machine probe comes from: the
// per-user cache, else the probe child (tpcomm-doctor --probe-child, killed at
// TPCOMM_TOPO_TIMEOUT_MS), else the same checks in this process when no helper exists.
#include "topology/probe.h"

#include <cstdint>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>

#ifdef TPCOMM_HAVE_CUDA
#include <cuda.h>
#include <cuda_runtime_api.h>
#endif

#include "common/error.h"
#include "common/params.h"
#include "topology/diagnose.h"
#include "topology/p2p_verify.h"
#include "topology/probe_child.h"
#include "topology/sysfs_pci.h"

namespace tpcomm {
namespace {

uint64_t hostHash() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  std::string id = host;
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string bootId;
  if (boot >> bootId) id += bootId;
  return std::hash<std::string>{}(id);
}

void copyText(char* dst, size_t cap, const std::string& s) {
  std::strncpy(dst, s.c_str(), cap - 1);
  dst[cap - 1] = '\0';
}

}  // namespace

Status probeLocalRank(int device, RankRecord* out) {
  RankRecord r;
  std::memset(&r, 0, sizeof(r));
  r.cudaDevice = device;
  r.numaNode = -1;
  r.processId = static_cast<int32_t>(getpid());
  r.hostHash = hostHash();
  copyText(r.name, sizeof(r.name), "host");
#ifdef TPCOMM_HAVE_CUDA
  if (device >= 0) {
    cudaDeviceProp prop;
    TPCOMM_CUDA_TRY(cudaGetDeviceProperties(&prop, device));
    copyText(r.name, sizeof(r.name), prop.name);
    r.ccMajor = prop.major;
    r.ccMinor = prop.minor;
    r.smCount = prop.multiProcessorCount;
    cudaDeviceGetPCIBusId(r.busId, sizeof(r.busId), device);
    char uuid[48];
    const unsigned char* u = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
    std::snprintf(uuid, sizeof(uuid), "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
                  u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
    copyText(r.uuid, sizeof(r.uuid), uuid);
    int mc = 0;
    // Queried, never exercised (multicast objects are created only behind the gate).
    if (cudaDeviceGetAttribute(&mc, static_cast<cudaDeviceAttr>(CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED), device) != cudaSuccess) {
      cudaGetLastError();
      mc = 0;
    }
    r.multicastSupported = mc;
    std::string lower = r.busId;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::ifstream numa("/sys/bus/pci/devices/" + lower + "/numa_node");
    int node = -1;
    if (numa >> node) r.numaNode = node;
  }
#else
  if (device >= 0) return TPCOMM_ERROR(kNotSupported, "probe: device %d requested but tpcomm was built without CUDA", device);
#endif
  *out = r;
  return Status::kOk;
}

MachineRequest MachineRequest::fromParams() {
  MachineRequest r;
  r.readCache = paramInt(ParamId::kTopoCache) != 0;
  r.timeoutMs = static_cast<int>(paramInt(ParamId::kTopoTimeoutMs));
  if (r.timeoutMs <= 0) r.timeoutMs = 8000;
  r.helper = paramString(ParamId::kTopoHelper);
  return r;
}

Status loadOrProbeMachine(const MachineRequest& req, MachineProbe* out, ProbeSource* src) {
  auto t0 = std::chrono::steady_clock::now();
  auto done = [&](const char* how) {
    src->how = how;
    src->ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  SysfsReader sys(req.sysfsRoot);
  const std::string driver = sys.driverVersion(), cmdline = sys.cmdline();
  int api = 0;
#ifdef TPCOMM_HAVE_CUDA
  if (cudaDriverGetVersion(&api) != cudaSuccess) cudaGetLastError();
#endif
  const std::string dir = topoCacheDir();
  src->cachePath = dir.empty() ? "" : topoCachePath(dir, driver, api, cmdline);
  if (src->cachePath.empty()) src->cacheNote = "no cache directory (neither XDG_CACHE_HOME nor HOME set)";
  if (!src->cachePath.empty() && req.readCache && !req.measure) {
    if (loadTopoCache(src->cachePath, driver, api, cmdline, req.gpus, out, &src->cacheNote) == Status::kOk) {
      done("cache");
      return Status::kOk;
    }
  } else if (!req.readCache) {
    src->cacheNote = "TPCOMM_TOPO_CACHE=0";
  } else if (req.measure) {
    src->cacheNote = "--measure re-probes";
  }
  MachineProbe m;
  bool got = false;
  const std::string helper = req.helper.empty() ? findProbeHelper() : req.helper;
  std::string childWhy = "no probe helper (tpcomm-doctor) found; set TPCOMM_TOPO_HELPER";
  if (!helper.empty()) {
    std::vector<std::string> argv = {helper, "--probe-child", "--sysfs-root", req.sysfsRoot};
    if (req.measure) argv.push_back("--measure");
    ChildRun run = runChild(argv, {"CUDA_VISIBLE_DEVICES"}, req.timeoutMs);
    got = assembleChildReport(run, req.timeoutMs, &m) == Status::kOk;
    if (!got) childWhy = m.checkError;
    clearError();
  }
  if (got) {
    done("child");
  } else if (req.allowInProcess) {
    TPCOMM_WARN(kTopo, "topology: %s; checking P2P in this process, without a time limit", childWhy.c_str());
    m = MachineProbe();
    ProbeOptions opts;
    opts.sysfsRoot = req.sysfsRoot;
    opts.measure = req.measure;
    TPCOMM_TRY(probeMachineInProcess(opts, &m));
    done("in-process");
  } else {
    return TPCOMM_ERROR(kNotSupported, "topology probe: %s", childWhy.c_str());
  }
  // The cache key is what this process sees; store it in the same terms.
  m.driverVersion = driver;
  m.cudaDriverApi = api;
  m.cmdline = cmdline;
  if (!src->cachePath.empty() && req.writeCache) {
    if (!m.cacheable()) src->cacheNote = "result not cached: " + (m.checkError.empty() ? std::string("not definitive") : m.checkError);
    else if (storeTopoCache(src->cachePath, m) != Status::kOk) src->cacheNote = lastErrorMessage();
    clearError();
  }
  *out = std::move(m);
  return Status::kOk;
}

Status probeLinkRow(int me, const std::vector<RankRecord>& records, const MachineProbe& m, std::vector<LinkRecord>* row) {
  const int n = static_cast<int>(records.size());
  row->assign(n, LinkRecord{});
  const RankRecord& a = records[me];
  const int ia = a.cudaDevice >= 0 ? m.findGpu(a.busId) : -1;
  for (int p = 0; p < n; ++p) {
    LinkRecord& l = (*row)[p];
    std::memset(&l, 0, sizeof(l));
    l.perfRank = -1;
    if (p == me) {
      l.kind = static_cast<int32_t>(LinkKind::kSelf);
      if (ia >= 0) {
        l.pcieGen = m.gpus[ia].pcieGen();
        l.pcieWidth = m.gpus[ia].pcieWidth();
      }
      continue;
    }
    l.kind = static_cast<int32_t>(LinkKind::kNone);
    const RankRecord& b = records[p];
    if (a.hostHash != b.hostHash) {
      copyText(l.why, sizeof(l.why), "different node");
      continue;
    }
    if (a.cudaDevice < 0 || b.cudaDevice < 0) {
      copyText(l.why, sizeof(l.why), "host rank");
      continue;
    }
    l.kind = static_cast<int32_t>(LinkKind::kPcie);
    const int ib = m.findGpu(b.busId);
    if (ia < 0 || ib < 0) {
      std::string why = std::string("GPU ") + (ia < 0 ? a.busId : b.busId) + " not in the topology probe";
      std::string err = !m.gpuError.empty() ? m.gpuError : m.checkError;
      if (!err.empty()) why += " (" + err + ")";
      copyText(l.why, sizeof(l.why), why);
      continue;
    }
    if (ia == ib) {
      // Two ranks on one GPU (createGroup with TPCOMM_ALLOW_SHARED_DEVICE=1, for tests): the
      // same memory, reachable without any link, so P2P "verified" trivially; "self" keeps the
      // pair out of every link-based choice (NCCL refuses such a pair).
      if (paramInt(ParamId::kAllowSharedDevice) != 0) {
        l.kind = static_cast<int32_t>(LinkKind::kSelf);
        l.p2pVerified = 1;
        l.canAccessPeer = 1;
        copyText(l.why, sizeof(l.why), "two ranks on one GPU (TPCOMM_ALLOW_SHARED_DEVICE=1)");
      } else {
        copyText(l.why, sizeof(l.why), "two ranks on one GPU");
      }
      continue;
    }
    PeerLink pl = decideLink(m, ia, ib);
    l.kind = static_cast<int32_t>(pl.kind);
    l.nvlinks = pl.nvlinks;
    l.p2pVerified = pl.p2pVerified;
    l.atomics = pl.atomics;
    l.canAccessPeer = pl.canAccessPeer;
    l.perfRank = pl.perfRank;
    l.ceGBs = pl.ceGBs;
    l.smGBs = pl.smGBs;
    l.rttUs = pl.rttUs;
    copyText(l.pciPath, sizeof(l.pciPath), pl.pciPath);
    copyText(l.why, sizeof(l.why), pl.why);
  }
  return Status::kOk;
}

Status probeLinkRow(int me, const std::vector<RankRecord>& records, std::vector<LinkRecord>* row) {
  MachineProbe m;
  ProbeSource src;
  if (records[me].cudaDevice >= 0) {
    MachineRequest req = MachineRequest::fromParams();
    for (const RankRecord& r : records)
      if (r.hostHash == records[me].hostHash && r.cudaDevice >= 0) req.gpus.push_back({r.uuid, normalizeBusId(r.busId)});
    Status s = loadOrProbeMachine(req, &m, &src);
    if (s != Status::kOk) m.checkError = lastErrorMessage();
  }
  return probeLinkRow(me, records, m, row);
}

Status probeTopology(Bootstrap& bootstrap, int device, Topology* out) {
  const int n = bootstrap.size(), me = bootstrap.rank();
  RankRecord mine;
  Status s = probeLocalRank(device, &mine);
  int okMine = s == Status::kOk;
  std::vector<int> oks(n);
  TPCOMM_TRY(bootstrap.allGather(&okMine, oks.data(), sizeof(int)));
  for (int r = 0; r < n; ++r)
    if (!oks[r]) return r == me ? s : TPCOMM_ERROR(kRemoteError, "probe failed on rank %d", r);
  std::vector<RankRecord> records(n);
  TPCOMM_TRY(bootstrap.allGather(&mine, records.data(), sizeof(RankRecord)));
  for (int r = 0; r < n; ++r)
    if ((records[r].cudaDevice < 0) != (records[0].cudaDevice < 0))
      return TPCOMM_INVALID("rank %d is a %s rank but rank 0 is a %s rank: a communicator is all-GPU or all-host", r,
                            records[r].cudaDevice < 0 ? "host" : "GPU", records[0].cudaDevice < 0 ? "host" : "GPU");
  // Link rows. GPU ranks: the host leader (lowest rank on each host) obtains the machine probe
  // once and computes the rows of every rank on its host; host ranks need no probe and compute
  // their own row. The rows travel in rounds: in round k each leader contributes the row of its
  // k-th member (n records per rank and round), so the exchange holds n x n records at a time
  // and takes as many rounds as the most ranks one leader serves (GPUs per host; 1 for host
  // ranks). Gathering whole n x n blocks from every rank instead was n^3 (64 thread ranks
  // peaked at 6.5 GB).
  const bool hostRanks = records[0].cudaDevice < 0;
  std::vector<int> leader(n);
  for (int r = 0; r < n; ++r) {
    leader[r] = r;
    if (hostRanks) continue;
    for (int q = 0; q < r; ++q)
      if (records[q].hostHash == records[r].hostHash) {
        leader[r] = q;
        break;
      }
  }
  std::vector<std::vector<int>> members(n);  // members[l]: the ranks leader l serves, in order
  for (int r = 0; r < n; ++r) members[leader[r]].push_back(r);
  size_t rounds = 0;
  for (const auto& m : members) rounds = std::max(rounds, m.size());

  const size_t nn = static_cast<size_t>(n) * n;
  std::vector<LinkRecord> myRows;  // rows of members[me], in order (leaders only)
  if (leader[me] == me) {
    MachineProbe m;
    if (!hostRanks) {
      MachineRequest req = MachineRequest::fromParams();
      for (int r : members[me]) req.gpus.push_back({records[r].uuid, normalizeBusId(records[r].busId)});
      ProbeSource src;
      Status ps = loadOrProbeMachine(req, &m, &src);
      if (ps != Status::kOk) m.checkError = lastErrorMessage();
      clearError();
      TPCOMM_INFO(kTopo, "topology probe: %s in %.1f ms%s%s", ps == Status::kOk ? src.how.c_str() : "failed", src.ms,
                  src.cacheNote.empty() ? "" : "; cache: ", src.cacheNote.c_str());
    }
    std::vector<LinkRecord> row;
    myRows.reserve(members[me].size() * n);
    for (int r : members[me]) {
      TPCOMM_TRY(probeLinkRow(r, records, m, &row));
      myRows.insert(myRows.end(), row.begin(), row.end());
    }
  }
  std::vector<LinkRecord> matrix(nn);
  std::vector<LinkRecord> contribution(n), gathered(nn);
  for (size_t k = 0; k < rounds; ++k) {
    std::memset(contribution.data(), 0, sizeof(LinkRecord) * n);
    if (leader[me] == me && k < members[me].size())
      std::memcpy(contribution.data(), &myRows[k * n], sizeof(LinkRecord) * n);
    TPCOMM_TRY(bootstrap.allGather(contribution.data(), gathered.data(), sizeof(LinkRecord) * n));
    for (int l = 0; l < n; ++l)
      if (leader[l] == l && k < members[l].size())
        std::memcpy(&matrix[static_cast<size_t>(members[l][k]) * n], &gathered[static_cast<size_t>(l) * n],
                    sizeof(LinkRecord) * n);
  }

  Topology t;
  std::vector<uint64_t> hosts;
  std::vector<std::pair<uint64_t, int32_t>> procs;
  for (const RankRecord& rec : records) {
    RankDevice d;
    d.cudaDevice = rec.cudaDevice;
    d.name = rec.name;
    d.ccMajor = rec.ccMajor;
    d.ccMinor = rec.ccMinor;
    d.smCount = rec.smCount;
    d.busId = rec.busId;
    d.uuid = rec.uuid;
    d.numaNode = rec.numaNode;
    const LinkRecord& self = matrix[static_cast<size_t>(t.ranks.size()) * n + t.ranks.size()];
    d.pcieGen = self.pcieGen;
    d.pcieWidth = self.pcieWidth;
    d.multicastSupported = rec.multicastSupported != 0;
    // Dense ids in order of first appearance.
    auto hit = std::find(hosts.begin(), hosts.end(), rec.hostHash);
    d.hostId = static_cast<int>(hit - hosts.begin());
    if (hit == hosts.end()) hosts.push_back(rec.hostHash);
    auto key = std::make_pair(rec.hostHash, rec.processId);
    auto pit = std::find(procs.begin(), procs.end(), key);
    d.processId = static_cast<int>(pit - procs.begin());
    if (pit == procs.end()) procs.push_back(key);
    t.ranks.push_back(d);
  }
  t.links.assign(n, std::vector<PeerLink>(n));
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) {
      // A pair is as good as the weaker of its two directions.
      const LinkRecord& ab = matrix[static_cast<size_t>(a) * n + b];
      const LinkRecord& ba = matrix[static_cast<size_t>(b) * n + a];
      const LinkRecord& weak = ab.kind <= ba.kind ? ab : ba;
      PeerLink& l = t.links[a][b];
      l.kind = static_cast<LinkKind>(weak.kind);
      l.nvlinks = weak.nvlinks;
      l.p2pVerified = ab.p2pVerified && ba.p2pVerified;
      l.atomics = ab.atomics && ba.atomics;
      l.why = ab.why[0] ? ab.why : ba.why;
      l.canAccessPeer = ab.canAccessPeer && ba.canAccessPeer;
      l.perfRank = ab.perfRank;
      l.pciPath = ab.pciPath;
      l.ceGBs = ab.ceGBs;
      l.smGBs = ab.smGBs;
      l.rttUs = ab.rttUs;
    }
  std::string why;
  t.multicastAllowedByEnv = !multicastDisabledByEnv(&why);
  t.multicastWhyNot = why;
  TPCOMM_TRY(t.validate());
  *out = std::move(t);
  return Status::kOk;
}

}  // namespace tpcomm
