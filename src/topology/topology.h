// The topology model: plain data describing how this communicator's ranks are linked. Filled by
// the probe (probe.h) on real machines and by JSON fixtures in tests; the selector reads only
// this. Indexing is by rank.
#pragma once

#include <string>
#include <vector>

#include "tpcomm/status.h"

namespace tpcomm {

/// How two ranks reach each other's memory, from slowest to fastest.
enum class LinkKind : int {
  kNone = 0,   ///< only through host memory (different PCIe trees, P2P off or broken)
  kPcie,       ///< PCIe without usable P2P: host-staged only
  kPcieP2p,    ///< PCIe with verified peer-to-peer access
  kNvlink,     ///< direct NVLink (see nvlinks for the count)
  kNvswitch,   ///< through an NVSwitch fabric
  kSelf,       ///< the same rank
};

const char* linkKindName(LinkKind k);
/// Parses linkKindName() output; false when unknown.
bool parseLinkKind(const std::string& s, LinkKind* out);

struct RankDevice {
  int cudaDevice = -1;           ///< -1: host rank (no GPU)
  std::string name;              ///< e.g. "NVIDIA H200"
  int ccMajor = 0, ccMinor = 0;  ///< compute capability
  int smCount = 0;
  std::string busId;             ///< PCI bus id "0000:18:00.0"
  std::string uuid;
  int numaNode = -1;
  int pcieGen = 0, pcieWidth = 0;  ///< current PCIe link of the GPU (0: unknown)
  int hostId = 0;                ///< ranks with equal hostId share host memory (same node)
  int processId = 0;             ///< ranks with equal processId are threads of one process
  bool multicastSupported = false;  ///< CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED (queried only)
};

struct PeerLink {
  LinkKind kind = LinkKind::kNone;
  int nvlinks = 0;           ///< NVLink lanes between the pair (kNvlink)
  bool p2pVerified = false;  ///< a data-verified peer write/read succeeded
  bool atomics = false;      ///< native peer atomics
  std::string why;           ///< reason P2P is not usable, when it is not
  bool canAccessPeer = false;  ///< what cudaDeviceCanAccessPeer said (before the data check)
  int perfRank = -1;           ///< cudaDevP2PAttrPerformanceRank, -1 unknown
  std::string pciPath;         ///< PCIe path like nvidia-smi topo: PIX, PXB, PHB, NODE, SYS, "" unknown
  double ceGBs = 0;            ///< measured one-way copy-engine bandwidth (0: not measured)
  double smGBs = 0;            ///< measured one-way SM-store bandwidth (0: not measured)
  double rttUs = 0;            ///< measured GPU-to-GPU flag round trip (0: not measured)
};

struct Topology {
  std::vector<RankDevice> ranks;
  std::vector<std::vector<PeerLink>> links;  ///< links[a][b], nRanks x nRanks
  /// Multicast use is allowed by the environment (neither NCCL_NVLS_ENABLE=0 nor
  /// TPCOMM_MULTICAST=0). Filled by the probe; false in fixtures unless set.
  bool multicastAllowedByEnv = false;
  std::string multicastWhyNot;

  int nRanks() const { return static_cast<int>(ranks.size()); }
  /// Every rank is a host (CPU) rank.
  bool allHost() const;
  /// Every rank has a GPU.
  bool allGpu() const;
  /// All ranks share host memory (one node).
  bool singleNode() const;
  /// All ranks are threads of one process.
  bool singleProcess() const;
  /// Every pair has verified P2P (PCIe P2P, NVLink or NVSwitch).
  bool allPairsP2p() const;
  /// Every pair is NVLink or NVSwitch.
  bool allPairsNvlink() const;
  /// Slowest link kind over all pairs (kSelf for one rank).
  LinkKind weakestLink() const;
  /// Multicast could be used: every device supports it, more than two ranks share an
  /// NVSwitch, and the environment allows it. `why` says what is missing.
  bool multicastUsable(std::string* why) const;

  /// Validates shapes (links is nRanks x nRanks, diagonal kSelf).
  Status validate() const;
  std::string toJson() const;
  static Status fromJson(const std::string& text, Topology* out);

  /// A uniform fixture: n GPU ranks, every pair `kind` (nvlinks lanes), one process or not.
  static Topology uniform(int n, LinkKind kind, int nvlinks = 0, bool sameProcess = false);
  /// n host ranks in one process (threads) or one per process.
  static Topology host(int n, bool sameProcess);
};

/// True when the environment forbids multicast: NCCL_NVLS_ENABLE read as NCCL reads integers
/// (strtoll: "0", "00", " 0", "0x0") is 0 or is not a number, or TPCOMM_MULTICAST is 0 or
/// anything but 0 or 1 (the safety switches fail closed). Empty values count as unset. `why`
/// says which switch and why. TPCOMM_MULTICAST comes from the params table (reloadParams()).
bool multicastDisabledByEnv(std::string* why);
/// The same rule on given values (null: unset), e.g. getenv() read live right before a
/// multicast driver call.
bool multicastDisabledBy(const char* ncclNvlsEnable, const char* tpcommMulticast, std::string* why);

}  // namespace tpcomm
