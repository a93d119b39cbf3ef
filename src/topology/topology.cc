#include "topology/topology.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "common/enum_names.h"
#include "common/error.h"
#include "common/params.h"
#include "topology/json_fields.h"

namespace tpcomm {

namespace {
const char* const kLinkKindNames[] = {"none", "pcie", "pcie_p2p", "nvlink", "nvswitch", "self"};  // LinkKind's order
}  // namespace

const char* linkKindName(LinkKind k) { return enumName(k, kLinkKindNames, "invalid"); }

bool parseLinkKind(const std::string& s, LinkKind* out) { return enumFromName(s.c_str(), kLinkKindNames, out); }

bool Topology::allHost() const {
  for (const RankDevice& r : ranks)
    if (r.cudaDevice >= 0) return false;
  return true;
}

bool Topology::allGpu() const {
  for (const RankDevice& r : ranks)
    if (r.cudaDevice < 0) return false;
  return !ranks.empty();
}

bool Topology::singleNode() const {
  for (const RankDevice& r : ranks)
    if (r.hostId != ranks[0].hostId) return false;
  return true;
}

bool Topology::singleProcess() const {
  for (const RankDevice& r : ranks)
    if (r.hostId != ranks[0].hostId || r.processId != ranks[0].processId) return false;
  return true;
}

LinkKind Topology::weakestLink() const {
  LinkKind weakest = LinkKind::kSelf;
  for (int a = 0; a < nRanks(); ++a)
    for (int b = 0; b < nRanks(); ++b)
      if (a != b && static_cast<int>(links[a][b].kind) < static_cast<int>(weakest)) weakest = links[a][b].kind;
  return weakest;
}

bool Topology::allPairsP2p() const {
  for (int a = 0; a < nRanks(); ++a)
    for (int b = 0; b < nRanks(); ++b) {
      if (a == b) continue;
      const PeerLink& l = links[a][b];
      // kSelf between two ranks: both on one GPU (TPCOMM_ALLOW_SHARED_DEVICE=1).
      bool p2pKind = l.kind == LinkKind::kPcieP2p || l.kind == LinkKind::kNvlink || l.kind == LinkKind::kNvswitch ||
                     l.kind == LinkKind::kSelf;
      if (!p2pKind || !l.p2pVerified) return false;
    }
  return allGpu() && singleNode();
}

bool Topology::allPairsNvlink() const {
  LinkKind w = weakestLink();
  return allPairsP2p() && (w == LinkKind::kNvlink || w == LinkKind::kNvswitch || w == LinkKind::kSelf);
}

// The safety gate fails closed: a switch whose value is not clearly "on" turns multicast off.
// NCCL_NVLS_ENABLE is read as NCCL reads integers (strtoll, base 0: "00", " 0", "0x0" are 0); a
// value that is not a number at all also closes the gate. TPCOMM_MULTICAST is read by value
// (0 or 1); anything else closes it too. An empty value counts as unset (as in NCCL).
bool multicastDisabledBy(const char* nvls, const char* tpcommMulticast, std::string* why) {
  if (nvls && *nvls) {
    errno = 0;
    char* end = nullptr;
    long long v = std::strtoll(nvls, &end, 0);
    while (end && *end && std::isspace(static_cast<unsigned char>(*end))) ++end;
    const bool number = end != nvls && end && *end == '\0' && errno == 0;
    if (!number || v == 0) {
      if (why)
        *why = number ? std::string("disabled by NCCL_NVLS_ENABLE=0")
                      : "disabled: NCCL_NVLS_ENABLE='" + std::string(nvls) + "' is not a number (read as 0)";
      return true;
    }
  }
  if (tpcommMulticast && *tpcommMulticast) {
    const std::string mc = tpcommMulticast;
    const bool digits = mc.find_first_not_of(" \t0123456789") == std::string::npos;
    uint64_t v = 0;
    if (!digits || !parseSize(mc, &v) || v > 1) {
      if (why) *why = "disabled: TPCOMM_MULTICAST='" + mc + "' is not 0 or 1 (a safety switch fails closed)";
      return true;
    }
    if (v == 0) {
      if (why) *why = "disabled by TPCOMM_MULTICAST=0";
      return true;
    }
  }
  return false;
}

bool multicastDisabledByEnv(std::string* why) {
  const ParamInfo& mc = params()[static_cast<int>(ParamId::kMulticast)];
  return multicastDisabledBy(std::getenv("NCCL_NVLS_ENABLE"), mc.fromEnv ? mc.value.c_str() : nullptr, why);
}

bool Topology::multicastUsable(std::string* why) const {
  std::string reason;
  if (nRanks() < 3) {
    reason = "needs more than two ranks on one NVSwitch";
  } else if (!allGpu() || !singleNode()) {
    reason = "needs GPU ranks on one node";
  } else if (weakestLink() != LinkKind::kNvswitch) {
    reason = "needs every pair linked through an NVSwitch";
  } else {
    for (const RankDevice& r : ranks)
      if (!r.multicastSupported) reason = "device does not report CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED";
  }
  // The environment gate is checked live, not only from the probed flag: a fixture saying
  // "allowed" must still stay closed under NCCL_NVLS_ENABLE=0 or TPCOMM_MULTICAST=0.
  std::string envWhy;
  if (reason.empty() && multicastDisabledByEnv(&envWhy)) reason = envWhy;
  if (reason.empty() && !multicastAllowedByEnv) reason = multicastWhyNot.empty() ? "not allowed by the probe" : multicastWhyNot;
  if (why) *why = reason;
  return reason.empty();
}

Status Topology::validate() const {
  int n = nRanks();
  if (n <= 0) return TPCOMM_INVALID("topology: no ranks");
  if (static_cast<int>(links.size()) != n) return TPCOMM_INVALID("topology: links has %zu rows, expected %d", links.size(), n);
  for (int a = 0; a < n; ++a) {
    if (static_cast<int>(links[a].size()) != n)
      return TPCOMM_INVALID("topology: links[%d] has %zu entries, expected %d", a, links[a].size(), n);
    if (links[a][a].kind != LinkKind::kSelf) return TPCOMM_INVALID("topology: links[%d][%d] must be 'self'", a, a);
  }
  return Status::kOk;
}

std::string Topology::toJson() const {
  nlohmann::json j;
  j["multicast_allowed_by_env"] = multicastAllowedByEnv;
  j["multicast_why_not"] = multicastWhyNot;
  for (const RankDevice& r : ranks) {
    j["ranks"].push_back({{"cuda_device", r.cudaDevice}, {"name", r.name}, {"cc_major", r.ccMajor},
                          {"cc_minor", r.ccMinor}, {"sm_count", r.smCount}, {"bus_id", r.busId},
                          {"uuid", r.uuid}, {"numa_node", r.numaNode}, {"pcie_gen", r.pcieGen}, {"pcie_width", r.pcieWidth}, {"host_id", r.hostId},
                          {"process_id", r.processId}, {"multicast_supported", r.multicastSupported}});
  }
  for (const auto& row : links) {
    nlohmann::json jrow = nlohmann::json::array();
    for (const PeerLink& l : row)
      jrow.push_back({{"kind", linkKindName(l.kind)}, {"nvlinks", l.nvlinks},
                      {"p2p_verified", l.p2pVerified}, {"atomics", l.atomics}, {"why", l.why},
                      {"can_access_peer", l.canAccessPeer}, {"perf_rank", l.perfRank}, {"pci_path", l.pciPath},
                      {"ce_gbs", l.ceGBs}, {"sm_gbs", l.smGBs}, {"rtt_us", l.rttUs}});
    j["links"].push_back(jrow);
  }
  return j.dump(1);
}

Status Topology::fromJson(const std::string& text, Topology* out) {
  using namespace jsonfields;  // NOLINT: strict field readers (types and ranges checked)
  if (jsonDepth(text) > 32) return TPCOMM_INVALID("topology JSON: nested deeper than 32 levels");
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return TPCOMM_INVALID("topology JSON: not valid JSON");
  if (!j.is_object() || !j.contains("ranks") || !j["ranks"].is_array() || !j.contains("links") || !j["links"].is_array())
    return TPCOMM_INVALID("topology JSON: expected an object with arrays 'ranks' and 'links'");
  Topology t;
  // The readers throw JsonFieldError on a wrong type or an out-of-range number (a float such as
  // 1.21e33 in an int field would otherwise be an undefined conversion): caught below.
  try {
    t.multicastAllowedByEnv = getBool(j, "multicast_allowed_by_env", false);
    t.multicastWhyNot = getString(j, "multicast_why_not");
    for (const auto& r : j["ranks"]) {
      RankDevice d;
      d.cudaDevice = getI32(r, "cuda_device", -1);
      d.name = getString(r, "name");
      d.ccMajor = getI32(r, "cc_major", 0);
      d.ccMinor = getI32(r, "cc_minor", 0);
      d.smCount = getI32(r, "sm_count", 0);
      d.busId = getString(r, "bus_id");
      d.uuid = getString(r, "uuid");
      d.numaNode = getI32(r, "numa_node", -1);
      d.pcieGen = getI32(r, "pcie_gen", 0);
      d.pcieWidth = getI32(r, "pcie_width", 0);
      d.hostId = getI32(r, "host_id", 0);
      d.processId = getI32(r, "process_id", 0);
      d.multicastSupported = getBool(r, "multicast_supported", false);
      t.ranks.push_back(d);
    }
    for (const auto& row : j["links"]) {
      if (!row.is_array()) return TPCOMM_INVALID("topology JSON: each 'links' row must be an array");
      std::vector<PeerLink> links;
      for (const auto& l : row) {
        PeerLink p;
        std::string kind = getString(l, "kind", "none");
        if (!parseLinkKind(kind, &p.kind)) return TPCOMM_INVALID("topology JSON: unknown link kind '%s'", kind.c_str());
        p.nvlinks = getI32(l, "nvlinks", 0);
        p.p2pVerified = getBool(l, "p2p_verified", false);
        p.atomics = getBool(l, "atomics", false);
        p.why = getString(l, "why");
        p.canAccessPeer = getBool(l, "can_access_peer", p.p2pVerified);
        p.perfRank = getI32(l, "perf_rank", -1);
        getLinkMeasures(l, &p);
        links.push_back(p);
      }
      t.links.push_back(links);
    }
  } catch (const std::exception& e) {
    return TPCOMM_INVALID("topology JSON: %s", e.what());
  }
  TPCOMM_TRY(t.validate());
  *out = std::move(t);
  return Status::kOk;
}

Topology Topology::uniform(int n, LinkKind kind, int nvlinks, bool sameProcess) {
  Topology t;
  for (int i = 0; i < n; ++i) {
    RankDevice d;
    d.cudaDevice = i;
    d.name = "fixture GPU";
    d.ccMajor = 9;
    d.smCount = 132;
    d.processId = sameProcess ? 0 : i;
    t.ranks.push_back(d);
  }
  t.links.assign(n, std::vector<PeerLink>(n));
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) {
      PeerLink& l = t.links[a][b];
      if (a == b) {
        l.kind = LinkKind::kSelf;
        continue;
      }
      l.kind = kind;
      l.nvlinks = kind == LinkKind::kNvlink || kind == LinkKind::kNvswitch ? nvlinks : 0;
      l.p2pVerified = kind == LinkKind::kPcieP2p || kind == LinkKind::kNvlink || kind == LinkKind::kNvswitch;
      l.atomics = kind == LinkKind::kNvlink || kind == LinkKind::kNvswitch;
      l.canAccessPeer = l.p2pVerified;
      if (!l.p2pVerified) l.why = "no peer access";
    }
  return t;
}

Topology Topology::host(int n, bool sameProcess) {
  Topology t = uniform(n, LinkKind::kNone, 0, sameProcess);
  for (int i = 0; i < n; ++i) {
    t.ranks[i].cudaDevice = -1;
    t.ranks[i].name = "host";
    t.ranks[i].ccMajor = 0;
    t.ranks[i].smCount = 0;
  }
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b)
      if (a != b) t.links[a][b].why = "host ranks";
  return t;
}

}  // namespace tpcomm
