// machine_probe.cc: MachineProbe JSON (the probe child's report and the cache file format).
#include "topology/machine_probe.h"

#include <nlohmann/json.hpp>

#include "common/enum_names.h"
#include "common/error.h"
#include "topology/json_fields.h"

namespace tpcomm {

using nlohmann::json;
using namespace jsonfields;  // NOLINT: the strict field readers

namespace {
const char* const kP2pCheckNames[] = {"not_run", "ok", "corrupt", "hang", "cuda_error"};  // P2pCheck's order
}  // namespace

const char* p2pCheckName(P2pCheck c) { return enumName(c, kP2pCheckNames, "not_run"); }

bool parseP2pCheck(const std::string& s, P2pCheck* out) { return enumFromName(s.c_str(), kP2pCheckNames, out); }

int MachineProbe::findGpu(const std::string& busId) const {
  std::string b = normalizeBusId(busId);
  for (int i = 0; i < nGpus(); ++i)
    if (gpus[i].busId == b) return i;
  return -1;
}

bool MachineProbe::cacheable() const {
  if (!complete || !checkError.empty() || !gpuError.empty() || gpus.empty()) return false;
  for (const auto& row : pairs)
    for (const PairFacts& p : row)
      for (P2pCheck c : {p.kernelCheck, p.copyCheck})
        if (c == P2pCheck::kHang || c == P2pCheck::kCudaError) return false;
  return true;
}

namespace {

json acsJson(const AcsState& a) {
  return {{"read", static_cast<int>(a.read)}, {"control", a.control}, {"why", a.why}};
}

AcsState acsFrom(const json& j) {
  AcsState a;
  int64_t read = getInt(j, "read", 0, 0, static_cast<int>(AcsState::Read::kRead));
  a.read = static_cast<AcsState::Read>(read);
  a.control = getU32(j, "control", 0u);
  a.why = getString(j, "why");
  return a;
}

}  // namespace

std::string MachineProbe::toJson(int indent) const {
  json j;
  j["format"] = "tpcomm-machine-probe-1";
  j["driver_version"] = driverVersion;
  j["cuda_driver_api"] = cudaDriverApi;
  j["cuda_runtime"] = cudaRuntime;
  j["cmdline"] = cmdline;
  j["gpu_error"] = gpuError;
  j["nvml_loaded"] = nvmlLoaded;
  j["nvml_why"] = nvmlWhy;
  j["iommu"] = {{"mode", iommuModeName(iommu.mode)}, {"hardware_present", iommu.hardwarePresent},
                {"groups", iommu.groups}, {"cmdline_flags", iommu.cmdlineFlags}, {"evidence", iommu.evidence}};
  j["measured"] = measured;
  j["complete"] = complete;
  j["check_error"] = checkError;
  j["gpus"] = json::array();
  for (const GpuFacts& g : gpus) {
    json bridges = json::array();
    for (const PciBridge& b : g.pci.bridges) bridges.push_back({{"bus_id", b.busId}, {"acs", acsJson(b.acs)}});
    j["gpus"].push_back(
        {{"index", g.index}, {"name", g.name}, {"bus_id", g.busId}, {"uuid", g.uuid}, {"cc_major", g.ccMajor},
         {"cc_minor", g.ccMinor}, {"sm_count", g.smCount}, {"multicast_supported", g.multicastSupported},
         {"pci", {{"found", g.pci.found}, {"host_bridge", g.pci.hostBridge}, {"bridges", bridges},
                  {"numa_node", g.pci.numaNode}, {"link_gen", g.pci.linkGen}, {"link_width", g.pci.linkWidth},
                  {"max_link_gen", g.pci.maxLinkGen}, {"max_link_width", g.pci.maxLinkWidth},
                  {"iommu_group", g.pci.iommuGroup}, {"iommu_group_type", g.pci.iommuGroupType}}},
         {"nvml", {{"found", g.nvml.found}, {"uuid", g.nvml.uuid}, {"pcie_gen", g.nvml.pcieGen},
                   {"pcie_width", g.nvml.pcieWidth}, {"active_links", g.nvml.activeLinks},
                   {"switch_links", g.nvml.switchLinks}, {"remote_bus_ids", g.nvml.remoteBusIds}}}});
  }
  j["pairs"] = json::array();
  for (const auto& row : pairs) {
    json jr = json::array();
    for (const PairFacts& p : row)
      jr.push_back({{"can_access_peer", p.canAccessPeer}, {"perf_rank", p.perfRank}, {"atomics", p.atomics},
                    {"nvlinks", p.nvlinks}, {"via_switch", p.viaSwitch}, {"pci_path", p.pciPath},
                    {"kernel_check", p2pCheckName(p.kernelCheck)}, {"copy_check", p2pCheckName(p.copyCheck)},
                    {"check_detail", p.checkDetail}, {"ce_gbs", p.ceGBs}, {"sm_gbs", p.smGBs}, {"rtt_us", p.rttUs}});
    j["pairs"].push_back(jr);
  }
  return j.dump(indent);
}

// Every field is read with a type and range check (json_fields.h): a file of the right format
// but with a wrong type, a float in an integer field or a null anywhere is kInvalidArgument,
// never an exception out of here and never an undefined conversion.
Status MachineProbe::fromJson(const std::string& text, MachineProbe* out) {
  if (text.size() > kMaxJsonBytes)
    return TPCOMM_INVALID("machine probe JSON: %zu bytes, more than the %zu a probe can have", text.size(),
                          kMaxJsonBytes);
  if (jsonDepth(text) > kMaxJsonDepth)
    return TPCOMM_INVALID("machine probe JSON: nested deeper than %zu levels", kMaxJsonDepth);
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return TPCOMM_INVALID("machine probe JSON: not a JSON object");
  MachineProbe m;
  try {
    if (getString(j, "format") != "tpcomm-machine-probe-1")
      return TPCOMM_INVALID("machine probe JSON: format is not tpcomm-machine-probe-1");
    m.driverVersion = getString(j, "driver_version");
    m.cudaDriverApi = getI32(j, "cuda_driver_api", 0);
    m.cudaRuntime = getI32(j, "cuda_runtime", 0);
    m.cmdline = getString(j, "cmdline");
    m.gpuError = getString(j, "gpu_error");
    m.nvmlLoaded = getBool(j, "nvml_loaded", false);
    m.nvmlWhy = getString(j, "nvml_why");
    const json& io = getObject(j, "iommu");
    std::string mode = getString(io, "mode", "unknown");
    for (IommuMode md : {IommuMode::kUnknown, IommuMode::kOff, IommuMode::kPassthrough, IommuMode::kTranslated})
      if (mode == iommuModeName(md)) m.iommu.mode = md;
    m.iommu.hardwarePresent = getBool(io, "hardware_present", false);
    m.iommu.groups = getI32(io, "groups", 0);
    m.iommu.cmdlineFlags = getString(io, "cmdline_flags");
    m.iommu.evidence = getString(io, "evidence");
    m.measured = getBool(j, "measured", false);
    m.complete = getBool(j, "complete", false);
    m.checkError = getString(j, "check_error");
    const json& gpus = getArray(j, "gpus");
    if (gpus.size() > kMaxGpus) return TPCOMM_INVALID("machine probe JSON: %zu GPUs (at most %zu)", gpus.size(), kMaxGpus);
    for (const json& g : gpus) {
      GpuFacts f;
      f.index = getI32(g, "index", -1);
      f.name = getString(g, "name");
      f.busId = normalizeBusId(getString(g, "bus_id"));
      f.uuid = getString(g, "uuid");
      f.ccMajor = getI32(g, "cc_major", 0);
      f.ccMinor = getI32(g, "cc_minor", 0);
      f.smCount = getI32(g, "sm_count", 0);
      f.multicastSupported = getBool(g, "multicast_supported", false);
      const json& p = getObject(g, "pci");
      f.pci.busId = f.busId;
      f.pci.found = getBool(p, "found", false);
      f.pci.hostBridge = getString(p, "host_bridge");
      for (const json& b : getArray(p, "bridges"))
        f.pci.bridges.push_back({getString(b, "bus_id"), acsFrom(getObject(b, "acs"))});
      f.pci.numaNode = getI32(p, "numa_node", -1);
      f.pci.linkGen = getI32(p, "link_gen", 0);
      f.pci.linkWidth = getI32(p, "link_width", 0);
      f.pci.maxLinkGen = getI32(p, "max_link_gen", 0);
      f.pci.maxLinkWidth = getI32(p, "max_link_width", 0);
      f.pci.iommuGroup = getString(p, "iommu_group");
      f.pci.iommuGroupType = getString(p, "iommu_group_type");
      const json& n = getObject(g, "nvml");
      f.nvml.found = getBool(n, "found", false);
      f.nvml.uuid = getString(n, "uuid");
      f.nvml.pcieGen = getI32(n, "pcie_gen", 0);
      f.nvml.pcieWidth = getI32(n, "pcie_width", 0);
      f.nvml.activeLinks = getI32(n, "active_links", 0);
      f.nvml.switchLinks = getI32(n, "switch_links", 0);
      f.nvml.remoteBusIds = getStrings(n, "remote_bus_ids");
      m.gpus.push_back(f);
    }
    for (const json& row : getArray(j, "pairs")) {
      if (!row.is_array()) return TPCOMM_INVALID("machine probe JSON: each 'pairs' row must be an array");
      if (row.size() != m.gpus.size()) return TPCOMM_INVALID("machine probe JSON: pairs is not gpus x gpus");
      std::vector<PairFacts> r;
      for (const json& p : row) {
        PairFacts f;
        f.canAccessPeer = getBool(p, "can_access_peer", false);
        f.perfRank = getI32(p, "perf_rank", -1);
        f.atomics = getBool(p, "atomics", false);
        f.nvlinks = getI32(p, "nvlinks", 0);
        f.viaSwitch = getBool(p, "via_switch", false);
        getLinkMeasures(p, &f);
        if (!parseP2pCheck(getString(p, "kernel_check", "not_run"), &f.kernelCheck) ||
            !parseP2pCheck(getString(p, "copy_check", "not_run"), &f.copyCheck))
          return TPCOMM_INVALID("machine probe JSON: unknown P2P check result");
        f.checkDetail = getString(p, "check_detail");
        r.push_back(f);
      }
      m.pairs.push_back(r);
    }
  } catch (const std::exception& e) {  // JsonFieldError, or anything nlohmann throws
    return TPCOMM_INVALID("machine probe JSON: %s", e.what());
  }
  if (m.pairs.size() != m.gpus.size()) return TPCOMM_INVALID("machine probe JSON: pairs is not gpus x gpus");
  *out = std::move(m);
  return Status::kOk;
}

}  // namespace tpcomm
