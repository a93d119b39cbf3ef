// machine_probe.h: everything the probe learned about this machine's GPUs and the links between
// them, indexed by GPU (in the probe child's enumeration: every GPU on the host, whatever
// CUDA_VISIBLE_DEVICES the caller has). It is what the probe child reports, what the cache
// stores (JSON) and what tpcomm-doctor prints; the per-communicator Topology is derived from it
// (diagnose.h). Pure data + JSON round trip.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "topology/nvml_loader.h"
#include "topology/sysfs_pci.h"
#include "tpcomm/status.h"

namespace tpcomm {

/// Result of one data-verified P2P check (kernel store through the peer mapping, or copy engine).
enum class P2pCheck : int {
  kNotRun = 0,    ///< not attempted (no peer access, or the check stopped before this pair)
  kOk,            ///< pattern arrived intact
  kCorrupt,       ///< wrong data arrived (zeros, garbage, stale)
  kHang,          ///< did not finish within the time limit; the child was killed
  kCudaError,     ///< a CUDA call failed (enable peer access, launch, copy)
};
const char* p2pCheckName(P2pCheck c);
bool parseP2pCheck(const std::string& s, P2pCheck* out);

struct GpuFacts {
  int index = -1;                  ///< CUDA index in the probe child (all GPUs visible)
  std::string name, busId, uuid;   ///< busId normalized (0000:18:00.0)
  int ccMajor = 0, ccMinor = 0, smCount = 0;
  bool multicastSupported = false; ///< CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED (queried only)
  PciDeviceInfo pci;               ///< sysfs: NUMA, bridges + ACS, link, IOMMU group
  NvmlGpuInfo nvml;                ///< NVML: NVLinks, PCIe link (when NVML loaded)
  int numaNode() const { return pci.numaNode; }
  int pcieGen() const { return nvml.pcieGen ? nvml.pcieGen : pci.linkGen; }
  int pcieWidth() const { return nvml.pcieWidth ? nvml.pcieWidth : pci.linkWidth; }
};

/// Facts about the ordered pair (a, b): a reaching into b's memory.
struct PairFacts {
  bool canAccessPeer = false;  ///< cudaDeviceCanAccessPeer(a, b)
  int perfRank = -1;           ///< cudaDevP2PAttrPerformanceRank (lower is better), -1 unknown
  bool atomics = false;        ///< cudaDevP2PAttrNativeAtomicSupported
  int nvlinks = 0;             ///< NVML: active links from a whose remote end is b
  bool viaSwitch = false;      ///< NVML: a's links go to an NVSwitch (and so do b's)
  std::string pciPath;         ///< PIX, PXB, PHB, NODE, SYS ("" unknown)
  P2pCheck kernelCheck = P2pCheck::kNotRun;  ///< SM stores from a into b, read back on b
  P2pCheck copyCheck = P2pCheck::kNotRun;    ///< cudaMemcpyPeer a -> b, read back on b
  std::string checkDetail;     ///< first mismatch, CUDA error text, or what hung
  double ceGBs = 0, smGBs = 0, rttUs = 0;    ///< --measure: one-way GB/s, flag round trip
  bool verified() const { return kernelCheck == P2pCheck::kOk && copyCheck == P2pCheck::kOk; }
  /// A check ran and failed (as opposed to not run).
  bool broken() const {
    return (kernelCheck != P2pCheck::kOk && kernelCheck != P2pCheck::kNotRun) ||
           (copyCheck != P2pCheck::kOk && copyCheck != P2pCheck::kNotRun);
  }
};

struct MachineProbe {
  std::string driverVersion;   ///< NVIDIA kernel module version, e.g. 580.159.04
  int cudaDriverApi = 0, cudaRuntime = 0;  ///< cudaDriverGetVersion / cudaRuntimeGetVersion
  std::string cmdline;         ///< /proc/cmdline (cache key)
  std::string gpuError;        ///< why no GPU was found ("" when CUDA enumerated the GPUs)
  bool nvmlLoaded = false;
  std::string nvmlWhy;         ///< why NVML facts are missing
  IommuInfo iommu;
  bool measured = false;
  bool complete = false;       ///< the checks ran to the end ("done"); false after a hang/crash
  std::string checkError;      ///< how the check process failed (timeout, exit code), "" if fine
  std::vector<GpuFacts> gpus;
  std::vector<std::vector<PairFacts>> pairs;  ///< pairs[a][b], gpus.size() squared

  int nGpus() const { return static_cast<int>(gpus.size()); }
  /// Index of the GPU with this bus id (any spelling), -1 if absent.
  int findGpu(const std::string& busId) const;
  /// True when every check that ran is definitive (no hang, no CUDA error, complete): only
  /// such results are cached.
  bool cacheable() const;
  std::string toJson(int indent = -1) const;
  /// Parses toJson's format. Untrusted input (the cache file): every field is type- and
  /// range-checked; wrong input is kInvalidArgument with the field named, never an exception.
  static Status fromJson(const std::string& text, MachineProbe* out);

  static constexpr size_t kMaxJsonBytes = 16u << 20;  ///< far above 64 GPUs' probe (~1 MB)
  static constexpr size_t kMaxJsonDepth = 32;         ///< the format nests 6 deep
  static constexpr size_t kMaxGpus = 1024;
};

}  // namespace tpcomm
