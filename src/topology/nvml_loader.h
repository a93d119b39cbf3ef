// nvml_loader.h: the few NVML queries the probe needs (NVLink lanes and what they connect to,
// PCIe link, common ancestor, driver version), with libnvidia-ml.so.1 loaded by dlopen at run
// time. tpcomm never links NVML: a machine without it (containers without the driver's user
// libraries, CI) still probes, and the probe says that NVLink facts are unknown.
#pragma once

#include <string>
#include <vector>

namespace tpcomm {

/// One GPU as NVML sees it.
struct NvmlGpuInfo {
  bool found = false;
  std::string uuid;
  int pcieGen = 0, pcieWidth = 0;  ///< current link (0: unknown)
  int activeLinks = 0;             ///< NVLinks in state enabled
  int switchLinks = 0;             ///< active links whose remote end is an NVSwitch
  std::vector<std::string> remoteBusIds;  ///< per active GPU-to-GPU link: the peer's bus id (normalized)
};

class Nvml {
 public:
  /// Loads `library` (default libnvidia-ml.so.1) and calls nvmlInit. Check ok() / why().
  explicit Nvml(const char* library = nullptr);
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  bool ok() const { return ok_; }
  /// Why NVML is unusable ("dlopen libnvidia-ml.so.1: ..." or "nvmlInit: error 9").
  const std::string& why() const { return why_; }
  std::string driverVersion() const;
  NvmlGpuInfo gpu(const std::string& busId) const;
  /// nvmlDeviceGetTopologyCommonAncestor as nvidia-smi writes it (PIX, PXB, PHB, NODE, SYS), "".
  std::string commonAncestor(const std::string& busA, const std::string& busB) const;

 private:
  struct Api;
  void* handle_ = nullptr;
  Api* api_ = nullptr;
  bool ok_ = false;
  std::string why_;
};

}  // namespace tpcomm
