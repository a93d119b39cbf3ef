// nvml_loader.cc: dlopen'd NVML. The declarations below mirror nvml.h's stable ABI (the _v2
// entry points, nvmlPciInfo_t of driver 410+), so no NVML header is needed at build time.
#include "topology/nvml_loader.h"

#include <dlfcn.h>

#include <cstring>

#include "topology/sysfs_pci.h"

namespace tpcomm {
namespace {

using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
constexpr int kNvmlSuccess = 0;
constexpr unsigned kMaxLinks = 18;  // NVML_NVLINK_MAX_LINKS (Hopper and Blackwell: 18)
constexpr int kRemoteSwitch = 2;    // NVML_NVLINK_DEVICE_TYPE_SWITCH

struct NvmlPciInfo {  // nvmlPciInfo_t
  char busIdLegacy[16];
  unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};
static_assert(sizeof(NvmlPciInfo) == 68, "nvmlPciInfo_t layout");

}  // namespace

struct Nvml::Api {
  nvmlReturn_t (*init)();
  nvmlReturn_t (*shutdown)();
  nvmlReturn_t (*driverVersion)(char*, unsigned);
  nvmlReturn_t (*byBusId)(const char*, nvmlDevice_t*);
  nvmlReturn_t (*uuid)(nvmlDevice_t, char*, unsigned);
  nvmlReturn_t (*linkState)(nvmlDevice_t, unsigned, int*);
  nvmlReturn_t (*remotePci)(nvmlDevice_t, unsigned, NvmlPciInfo*);
  nvmlReturn_t (*remoteType)(nvmlDevice_t, unsigned, int*);  // optional (driver 450+)
  nvmlReturn_t (*pcieGen)(nvmlDevice_t, unsigned*);
  nvmlReturn_t (*pcieWidth)(nvmlDevice_t, unsigned*);
  nvmlReturn_t (*ancestor)(nvmlDevice_t, nvmlDevice_t, int*);
};

Nvml::Nvml(const char* library) {
  const char* lib = library ? library : "libnvidia-ml.so.1";
  handle_ = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!handle_) {
    const char* e = dlerror();
    why_ = std::string("NVML not available: dlopen ") + lib + ": " + (e ? e : "failed");
    return;
  }
  api_ = new Api();
  auto sym = [&](const char* name) { return dlsym(handle_, name); };
#define TPCOMM_NVML_SYM(field, name) reinterpret_cast<void*&>(api_->field) = sym(name)
  TPCOMM_NVML_SYM(init, "nvmlInit_v2");
  TPCOMM_NVML_SYM(shutdown, "nvmlShutdown");
  TPCOMM_NVML_SYM(driverVersion, "nvmlSystemGetDriverVersion");
  TPCOMM_NVML_SYM(byBusId, "nvmlDeviceGetHandleByPciBusId_v2");
  TPCOMM_NVML_SYM(uuid, "nvmlDeviceGetUUID");
  TPCOMM_NVML_SYM(linkState, "nvmlDeviceGetNvLinkState");
  TPCOMM_NVML_SYM(remotePci, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
  TPCOMM_NVML_SYM(remoteType, "nvmlDeviceGetNvLinkRemoteDeviceType");
  TPCOMM_NVML_SYM(pcieGen, "nvmlDeviceGetCurrPcieLinkGeneration");
  TPCOMM_NVML_SYM(pcieWidth, "nvmlDeviceGetCurrPcieLinkWidth");
  TPCOMM_NVML_SYM(ancestor, "nvmlDeviceGetTopologyCommonAncestor");
#undef TPCOMM_NVML_SYM
  if (!api_->init || !api_->shutdown || !api_->byBusId || !api_->linkState || !api_->remotePci) {
    why_ = std::string("NVML not usable: ") + lib + " lacks nvmlInit_v2 / NVLink queries";
    return;
  }
  nvmlReturn_t r = api_->init();
  if (r != kNvmlSuccess) {
    why_ = "NVML not usable: nvmlInit_v2 returned " + std::to_string(r);
    return;
  }
  ok_ = true;
}

Nvml::~Nvml() {
  if (ok_) api_->shutdown();
  delete api_;
  if (handle_) dlclose(handle_);
}

std::string Nvml::driverVersion() const {
  char buf[96] = {0};
  if (!ok_ || !api_->driverVersion || api_->driverVersion(buf, sizeof(buf)) != kNvmlSuccess) return "";
  return buf;
}

NvmlGpuInfo Nvml::gpu(const std::string& busId) const {
  NvmlGpuInfo info;
  nvmlDevice_t dev = nullptr;
  if (!ok_ || api_->byBusId(busId.c_str(), &dev) != kNvmlSuccess) return info;
  info.found = true;
  char uuid[96] = {0};
  if (api_->uuid && api_->uuid(dev, uuid, sizeof(uuid)) == kNvmlSuccess) info.uuid = uuid;
  unsigned v = 0;
  if (api_->pcieGen && api_->pcieGen(dev, &v) == kNvmlSuccess) info.pcieGen = static_cast<int>(v);
  if (api_->pcieWidth && api_->pcieWidth(dev, &v) == kNvmlSuccess) info.pcieWidth = static_cast<int>(v);
  for (unsigned link = 0; link < kMaxLinks; ++link) {
    int state = 0;
    if (api_->linkState(dev, link, &state) != kNvmlSuccess) continue;  // not supported / no link
    if (state != 1) continue;                                          // NVML_FEATURE_ENABLED
    ++info.activeLinks;
    int type = -1;
    if (api_->remoteType && api_->remoteType(dev, link, &type) == kNvmlSuccess && type == kRemoteSwitch) {
      ++info.switchLinks;
      continue;
    }
    NvmlPciInfo pci;
    std::memset(&pci, 0, sizeof(pci));
    if (api_->remotePci(dev, link, &pci) != kNvmlSuccess) continue;
    char bdf[32];
    std::snprintf(bdf, sizeof(bdf), "%04x:%02x:%02x.0", pci.domain & 0xffff, pci.bus, pci.device);
    info.remoteBusIds.push_back(normalizeBusId(bdf));
  }
  return info;
}

std::string Nvml::commonAncestor(const std::string& busA, const std::string& busB) const {
  nvmlDevice_t a = nullptr, b = nullptr;
  if (!ok_ || !api_->ancestor || api_->byBusId(busA.c_str(), &a) != kNvmlSuccess ||
      api_->byBusId(busB.c_str(), &b) != kNvmlSuccess)
    return "";
  int level = -1;
  if (api_->ancestor(a, b, &level) != kNvmlSuccess) return "";
  switch (level) {  // nvmlGpuTopologyLevel_t
    case 0: return "X";
    case 10: return "PIX";
    case 20: return "PXB";
    case 30: return "PHB";
    case 40: return "NODE";
    case 50: return "SYS";
  }
  return "";
}

}  // namespace tpcomm
