// sysfs_pci.h: what Linux says about the PCIe fabric under the GPUs, read from sysfs and /proc:
// each GPU's chain of upstream bridges, NUMA node, PCIe link generation and width, the IOMMU mode
// and the ACS control of every bridge. Peer-to-peer traffic breaks (zeros or garbage, or a hang)
// behind a translating IOMMU or an ACS-redirecting bridge even when cudaDeviceCanAccessPeer
// says 1, so the doctor needs these facts to explain a failed check. Every path is relative to
// a root directory (normally "/") so tests can point it at fixture trees
// (tests/unit/fixtures/sysfs/<case>/{sys,proc}). Pure C++: no CUDA, no NVML.
#pragma once

#include <string>
#include <vector>

namespace tpcomm {

/// "0000:1B:00.0", "00000000:1b:00.0" or "1b:00.0" -> "0000:1b:00.0"; "" when malformed.
std::string normalizeBusId(const std::string& busId);

/// ACS (Access Control Services) control of one bridge, from its PCIe extended config space.
struct AcsState {
  enum class Read { kUnknown, kNoCapability, kRead };
  Read read = Read::kUnknown;
  unsigned control = 0;  ///< ACS control register (valid when read == kRead)
  std::string why;       ///< why unknown (e.g. config space beyond 64 bytes needs root)
  /// P2P request/completion redirect or egress control set: peer traffic goes up to the root.
  bool redirects() const { return read == Read::kRead && (control & 0x2c) != 0; }
  /// "off", "on (RR CR ...)", "no ACS capability", "unknown (...)".
  std::string describe() const;
};

/// One PCI function in a GPU's upstream chain.
struct PciBridge {
  std::string busId;
  AcsState acs;
};

/// What sysfs knows about one GPU.
struct PciDeviceInfo {
  std::string busId;               ///< normalized
  bool found = false;              ///< the device directory exists under the root
  std::string hostBridge;          ///< e.g. "pci0000:00" (the root complex it hangs off)
  std::vector<PciBridge> bridges;  ///< upstream bridges, root port first, excluding the GPU
  int numaNode = -1;
  int linkGen = 0, linkWidth = 0;        ///< current link (0: unknown)
  int maxLinkGen = 0, maxLinkWidth = 0;  ///< capability
  std::string iommuGroup;          ///< "" when none
  std::string iommuGroupType;      ///< identity, DMA, DMA-FQ, unmanaged, blocked, or ""
};

enum class IommuMode { kUnknown = 0, kOff, kPassthrough, kTranslated };
const char* iommuModeName(IommuMode m);

/// The machine's IOMMU as the kernel configured it.
struct IommuInfo {
  IommuMode mode = IommuMode::kUnknown;
  bool hardwarePresent = false;   ///< /sys/class/iommu has entries
  int groups = 0;                 ///< entries in /sys/kernel/iommu_groups
  std::string cmdlineFlags;       ///< the iommu-related kernel parameters, e.g. "intel_iommu=on iommu=pt"
  std::string evidence;           ///< how the mode was decided, one line
};

/// Reads sysfs under `root` ("" or "/" for the live machine).
class SysfsReader {
 public:
  explicit SysfsReader(std::string root = "/");
  const std::string& root() const { return root_; }
  /// Facts about the PCI device `busId` (any spelling normalizeBusId accepts).
  PciDeviceInfo device(const std::string& busId) const;
  /// The IOMMU mode, judged from the GPUs' IOMMU group types (when given), /sys/class/iommu,
  /// /sys/kernel/iommu_groups and the kernel command line.
  IommuInfo iommu(const std::vector<PciDeviceInfo>& gpus) const;
  /// /proc/cmdline, trailing newline removed ("" when unreadable).
  std::string cmdline() const;
  /// NVIDIA kernel module version (/sys/module/nvidia/version or /proc/driver/nvidia/version),
  /// "" when no driver is loaded.
  std::string driverVersion() const;
  /// ACS control of one bridge (reads its config file).
  AcsState acs(const std::string& busId, const std::string& deviceDir) const;

 private:
  std::string path(const std::string& rel) const;
  std::string findDeviceDir(const std::string& busId) const;
  std::string root_;
};

/// Parses ACS from raw config space bytes (a config file's content). Fewer than 4096 bytes
/// means the extended space was not readable (non-root readers get 64 bytes).
AcsState parseAcs(const std::string& config);

/// PCIe path between two GPUs in nvidia-smi topo -m terms: "PIX" (one switch), "PXB" (several
/// switches), "PHB" (same host bridge), "NODE" (same NUMA node, different host bridges), "SYS"
/// (across sockets), "" when unknown.
std::string pciPathType(const PciDeviceInfo& a, const PciDeviceInfo& b);

/// Bridges that route traffic between a and b: the ones below the last common one, plus the
/// common one itself (a switch port or root port where the paths meet).
std::vector<PciBridge> bridgesBetween(const PciDeviceInfo& a, const PciDeviceInfo& b);

/// "16.0 GT/s PCIe" -> 4 (2.5 -> 1, 5 -> 2, 8 -> 3, 16 -> 4, 32 -> 5, 64 -> 6); 0 unknown.
int pcieGenFromSpeed(const std::string& speed);

}  // namespace tpcomm
