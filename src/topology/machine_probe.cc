// machine_probe.cc: MachineProbe JSON (the probe child's report and the cache file format).
#include "topology/machine_probe.h"

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace tpcomm {

using nlohmann::json;

const char* p2pCheckName(P2pCheck c) {
  switch (c) {
    case P2pCheck::kNotRun: return "not_run";
    case P2pCheck::kOk: return "ok";
    case P2pCheck::kCorrupt: return "corrupt";
    case P2pCheck::kHang: return "hang";
    case P2pCheck::kCudaError: return "cuda_error";
  }
  return "not_run";
}

bool parseP2pCheck(const std::string& s, P2pCheck* out) {
  for (P2pCheck c : {P2pCheck::kNotRun, P2pCheck::kOk, P2pCheck::kCorrupt, P2pCheck::kHang, P2pCheck::kCudaError})
    if (s == p2pCheckName(c)) {
      *out = c;
      return true;
    }
  return false;
}

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
  a.read = static_cast<AcsState::Read>(j.value("read", 0));
  a.control = j.value("control", 0u);
  a.why = j.value("why", std::string());
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

Status MachineProbe::fromJson(const std::string& text, MachineProbe* out) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return TPCOMM_INVALID("machine probe JSON: not a JSON object");
  if (j.value("format", std::string()) != "tpcomm-machine-probe-1")
    return TPCOMM_INVALID("machine probe JSON: format is not tpcomm-machine-probe-1");
  MachineProbe m;
  try {
    m.driverVersion = j.value("driver_version", std::string());
    m.cudaDriverApi = j.value("cuda_driver_api", 0);
    m.cudaRuntime = j.value("cuda_runtime", 0);
    m.cmdline = j.value("cmdline", std::string());
    m.gpuError = j.value("gpu_error", std::string());
    m.nvmlLoaded = j.value("nvml_loaded", false);
    m.nvmlWhy = j.value("nvml_why", std::string());
    const json& io = j.value("iommu", json::object());
    std::string mode = io.value("mode", std::string("unknown"));
    for (IommuMode md : {IommuMode::kUnknown, IommuMode::kOff, IommuMode::kPassthrough, IommuMode::kTranslated})
      if (mode == iommuModeName(md)) m.iommu.mode = md;
    m.iommu.hardwarePresent = io.value("hardware_present", false);
    m.iommu.groups = io.value("groups", 0);
    m.iommu.cmdlineFlags = io.value("cmdline_flags", std::string());
    m.iommu.evidence = io.value("evidence", std::string());
    m.measured = j.value("measured", false);
    m.complete = j.value("complete", false);
    m.checkError = j.value("check_error", std::string());
    for (const json& g : j.value("gpus", json::array())) {
      GpuFacts f;
      f.index = g.value("index", -1);
      f.name = g.value("name", std::string());
      f.busId = normalizeBusId(g.value("bus_id", std::string()));
      f.uuid = g.value("uuid", std::string());
      f.ccMajor = g.value("cc_major", 0);
      f.ccMinor = g.value("cc_minor", 0);
      f.smCount = g.value("sm_count", 0);
      f.multicastSupported = g.value("multicast_supported", false);
      const json& p = g.value("pci", json::object());
      f.pci.busId = f.busId;
      f.pci.found = p.value("found", false);
      f.pci.hostBridge = p.value("host_bridge", std::string());
      for (const json& b : p.value("bridges", json::array()))
        f.pci.bridges.push_back({b.value("bus_id", std::string()), acsFrom(b.value("acs", json::object()))});
      f.pci.numaNode = p.value("numa_node", -1);
      f.pci.linkGen = p.value("link_gen", 0);
      f.pci.linkWidth = p.value("link_width", 0);
      f.pci.maxLinkGen = p.value("max_link_gen", 0);
      f.pci.maxLinkWidth = p.value("max_link_width", 0);
      f.pci.iommuGroup = p.value("iommu_group", std::string());
      f.pci.iommuGroupType = p.value("iommu_group_type", std::string());
      const json& n = g.value("nvml", json::object());
      f.nvml.found = n.value("found", false);
      f.nvml.uuid = n.value("uuid", std::string());
      f.nvml.pcieGen = n.value("pcie_gen", 0);
      f.nvml.pcieWidth = n.value("pcie_width", 0);
      f.nvml.activeLinks = n.value("active_links", 0);
      f.nvml.switchLinks = n.value("switch_links", 0);
      f.nvml.remoteBusIds = n.value("remote_bus_ids", std::vector<std::string>());
      m.gpus.push_back(f);
    }
    for (const json& row : j.value("pairs", json::array())) {
      std::vector<PairFacts> r;
      for (const json& p : row) {
        PairFacts f;
        f.canAccessPeer = p.value("can_access_peer", false);
        f.perfRank = p.value("perf_rank", -1);
        f.atomics = p.value("atomics", false);
        f.nvlinks = p.value("nvlinks", 0);
        f.viaSwitch = p.value("via_switch", false);
        f.pciPath = p.value("pci_path", std::string());
        if (!parseP2pCheck(p.value("kernel_check", std::string("not_run")), &f.kernelCheck) ||
            !parseP2pCheck(p.value("copy_check", std::string("not_run")), &f.copyCheck))
          return TPCOMM_INVALID("machine probe JSON: unknown P2P check result");
        f.checkDetail = p.value("check_detail", std::string());
        f.ceGBs = p.value("ce_gbs", 0.0);
        f.smGBs = p.value("sm_gbs", 0.0);
        f.rttUs = p.value("rtt_us", 0.0);
        r.push_back(f);
      }
      m.pairs.push_back(r);
    }
  } catch (const std::exception& e) {
    return TPCOMM_INVALID("machine probe JSON: %s", e.what());
  }
  if (m.pairs.size() != m.gpus.size()) return TPCOMM_INVALID("machine probe JSON: pairs is not gpus x gpus");
  for (const auto& row : m.pairs)
    if (row.size() != m.gpus.size()) return TPCOMM_INVALID("machine probe JSON: pairs is not gpus x gpus");
  *out = std::move(m);
  return Status::kOk;
}

}  // namespace tpcomm
