// Probing the local rank and the links between ranks. Each rank describes itself (RankRecord);
// on each host the lowest rank (the host leader) obtains the machine probe (machine_probe.h:
// from the cache, else from the probe child that data-verifies P2P, else in-process) and fills
// the link rows of every pair of ranks on its host; rows are gathered so every rank holds the
// same, symmetric matrix (the selector must choose identically everywhere).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "topology/machine_probe.h"
#include "topology/topo_cache.h"
#include "topology/topology.h"
#include "tpcomm/bootstrap.h"

namespace tpcomm {

/// Fixed-size description of one rank, exchanged through the bootstrap.
struct RankRecord {
  int32_t cudaDevice;
  int32_t ccMajor, ccMinor, smCount;
  int32_t numaNode;
  int32_t processId;
  int32_t multicastSupported;
  uint64_t hostHash;
  char name[96];
  char busId[32];
  char uuid[48];
};

/// One entry of the link matrix, as exchanged (see PeerLink for the meaning of the fields).
/// pcieGen/pcieWidth are used on the diagonal only (the rank's own GPU).
struct LinkRecord {
  int32_t kind;  // LinkKind
  int32_t nvlinks;
  int32_t p2pVerified;
  int32_t atomics;
  int32_t canAccessPeer;
  int32_t perfRank;
  int32_t pcieGen, pcieWidth;
  double ceGBs, smGBs, rttUs;
  char pciPath[8];
  char why[320];
};

/// Where a machine probe came from, for logs and tpcomm-doctor.
struct ProbeSource {
  std::string how;        ///< "cache", "child", "in-process"
  std::string cachePath;  ///< the cache file used or written ("" none)
  std::string cacheNote;  ///< why the cache missed / was not written
  double ms = 0;          ///< time spent
};

/// How to obtain the machine probe.
struct MachineRequest {
  std::vector<GpuKey> gpus;      ///< GPUs that must be in a cached result (empty: any)
  std::string sysfsRoot = "/";
  bool measure = false;          ///< --measure (never satisfied by a cache without numbers)
  bool readCache = true;         ///< false: TPCOMM_TOPO_CACHE=0
  bool writeCache = true;
  int timeoutMs = 8000;          ///< child limit
  std::string helper;            ///< probe child binary ("" : findProbeHelper())
  bool allowInProcess = true;    ///< no helper: run the checks in this process (unbounded)
  /// The request Communicator::create uses: params TOPO_CACHE / TOPO_TIMEOUT_MS / TOPO_HELPER.
  static MachineRequest fromParams();
};

/// Cache, else child, else in-process. kOk whenever a probe was obtained (it may report broken
/// pairs or no GPUs); `src` says how.
Status loadOrProbeMachine(const MachineRequest& req, MachineProbe* out, ProbeSource* src);

/// Describes this process's rank driving `device` (-1: host rank).
Status probeLocalRank(int device, RankRecord* out);
/// Fills `row[peer]` for every rank from `records` (row[me] is kSelf) using the machine probe
/// `m` of this host (ranks on other hosts: kNone).
Status probeLinkRow(int me, const std::vector<RankRecord>& records, const MachineProbe& m, std::vector<LinkRecord>* row);
/// The same, obtaining the machine probe with MachineRequest::fromParams().
Status probeLinkRow(int me, const std::vector<RankRecord>& records, std::vector<LinkRecord>* row);
/// Full collective probe: gathers records, the host leaders' link rows, symmetrizes, sets
/// multicast gating.
Status probeTopology(Bootstrap& bootstrap, int device, Topology* out);

}  // namespace tpcomm
