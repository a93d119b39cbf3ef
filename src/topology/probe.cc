#include "topology/probe.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>

#ifdef TPCOMM_HAVE_CUDA
#include <cuda.h>
#include <cuda_runtime_api.h>
#endif

#include "common/error.h"

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
    cudaError_t e = cudaGetDeviceProperties(&prop, device);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return TPCOMM_ERROR(kCudaError, "probe: cudaGetDeviceProperties(%d): %s", device, cudaGetErrorString(e));
    }
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

Status probeLinkRow(int me, const std::vector<RankRecord>& records, std::vector<LinkRecord>* row) {
  const int n = static_cast<int>(records.size());
  row->assign(n, LinkRecord{});
  for (int p = 0; p < n; ++p) {
    LinkRecord& l = (*row)[p];
    std::memset(&l, 0, sizeof(l));
    if (p == me) {
      l.kind = static_cast<int32_t>(LinkKind::kSelf);
      continue;
    }
    l.kind = static_cast<int32_t>(LinkKind::kNone);
    const RankRecord& a = records[me];
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
#ifdef TPCOMM_HAVE_CUDA
    int peerDev = -1;
    if (cudaDeviceGetByPCIBusId(&peerDev, b.busId) != cudaSuccess) {
      cudaGetLastError();
      copyText(l.why, sizeof(l.why), std::string("peer GPU ") + b.busId + " not visible to this process");
      continue;
    }
    if (peerDev == a.cudaDevice) {
      copyText(l.why, sizeof(l.why), "two ranks on one GPU");
      continue;
    }
    int can = 0;
    cudaDeviceCanAccessPeer(&can, a.cudaDevice, peerDev);
    if (!can) {
      copyText(l.why, sizeof(l.why), "cudaDeviceCanAccessPeer = 0");
      continue;
    }
    int atomics = 0;
    cudaDeviceGetP2PAttribute(&atomics, cudaDevP2PAttrNativeAtomicSupported, a.cudaDevice, peerDev);
    l.atomics = atomics;
    // Native peer atomics exist over NVLink only; the NVLink lane count comes from NVML in the
    // full probe (tpcomm-doctor). Verification by data is the doctor's job too.
    l.kind = static_cast<int32_t>(atomics ? LinkKind::kNvlink : LinkKind::kPcieP2p);
    l.p2pVerified = 1;
#else
    copyText(l.why, sizeof(l.why), "built without CUDA");
#endif
  }
  return Status::kOk;
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
  std::vector<LinkRecord> row;
  TPCOMM_TRY(probeLinkRow(me, records, &row));
  std::vector<LinkRecord> matrix(static_cast<size_t>(n) * n);
  TPCOMM_TRY(bootstrap.allGather(row.data(), matrix.data(), sizeof(LinkRecord) * n));

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
      l.why = weak.why;
    }
  std::string why;
  t.multicastAllowedByEnv = !multicastDisabledByEnv(&why);
  t.multicastWhyNot = why;
  TPCOMM_TRY(t.validate());
  *out = std::move(t);
  return Status::kOk;
}

}  // namespace tpcomm
