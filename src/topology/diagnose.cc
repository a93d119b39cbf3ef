// diagnose.cc: see diagnose.h.
#include "topology/diagnose.h"

#include <cstdio>

namespace tpcomm {
namespace {

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

std::string checkText(const char* what, P2pCheck c) {
  switch (c) {
    case P2pCheck::kCorrupt: return std::string(what) + " delivered wrong data";
    case P2pCheck::kHang: return std::string(what) + " hung";
    case P2pCheck::kCudaError: return std::string(what) + " failed with a CUDA error";
    default: return "";
  }
}

}  // namespace

std::string p2pCauseAndRemedy(const MachineProbe& m, int a, int b) {
  std::vector<std::string> causes, remedies, notes;
  if (m.iommu.mode == IommuMode::kTranslated) {
    causes.push_back("IOMMU in translated mode");
    remedies.push_back("boot with iommu=pt");
  }
  std::vector<PciBridge> path = bridgesBetween(m.gpus[a].pci, m.gpus[b].pci);
  std::vector<std::string> redirecting, unknown;
  for (const PciBridge& br : path) {
    if (br.acs.redirects()) redirecting.push_back(br.busId);
    else if (br.acs.read == AcsState::Read::kUnknown) unknown.push_back(br.busId);
  }
  if (!redirecting.empty()) {
    causes.push_back("ACS redirect on bridge " + join(redirecting, ", "));
    for (const std::string& br : redirecting)
      remedies.push_back("disable ACS on bridge " + br + " (setpci -s " + br + " ECAP_ACS+0x6.w=0000)");
  }
  if (causes.empty()) {
    const std::string pathType = m.pairs[a][b].pciPath;
    if (pathType == "SYS") causes.push_back("the GPUs hang off different CPU sockets (SYS)");
    if (m.iommu.mode == IommuMode::kUnknown) causes.push_back("IOMMU mode unknown (" + m.iommu.evidence + ")");
    if (!unknown.empty())
      causes.push_back("ACS state of bridge " + join(unknown, ", ") + " unreadable (run tpcomm-doctor as root)");
    if (causes.empty()) causes.push_back("no IOMMU or ACS cause found (IOMMU " + std::string(iommuModeName(m.iommu.mode)) + ")");
    remedies.push_back("check the BIOS IOMMU/ACS/P2P settings and boot with iommu=pt");
    if (!unknown.empty())
      remedies.push_back("disable ACS on the bridges (setpci -s " + unknown.front() + " ECAP_ACS+0x6.w=0000)");
  }
  return join(causes, " and ") + "; " + join(remedies, " or ");
}

bool pairBroken(const MachineProbe& m, int a, int b) {
  if (a == b) return false;
  const PairFacts& p = m.pairs[a][b];
  if (p.broken()) return true;
  // The check process failed before reaching a pair the driver offers P2P for.
  return p.canAccessPeer && !p.verified() && !m.checkError.empty();
}

std::string pairProblem(const MachineProbe& m, int a, int b, int labelA, int labelB) {
  if (a == b) return "";
  const PairFacts& p = m.pairs[a][b];
  char head[64];
  std::snprintf(head, sizeof(head), "P2P %d->%d ", labelA >= 0 ? labelA : a, labelB >= 0 ? labelB : b);
  if (!p.canAccessPeer) {
    std::string why = std::string(head) + "not offered by the driver (cudaDeviceCanAccessPeer = 0)";
    if (p.pciPath == "SYS") return why + ": the GPUs hang off different CPU sockets; tpcomm uses the host-staged path";
    if (m.iommu.mode == IommuMode::kTranslated || !bridgesBetween(m.gpus[a].pci, m.gpus[b].pci).empty())
      return why + ": " + p2pCauseAndRemedy(m, a, b);
    return why + "; tpcomm uses the host-staged path";
  }
  if (p.broken()) {
    std::vector<std::string> what;
    std::string k = checkText("kernel stores", p.kernelCheck), c = checkText("copy engine", p.copyCheck);
    if (!k.empty()) what.push_back(k);
    if (!c.empty()) what.push_back(c);
    const char* verb = (p.kernelCheck == P2pCheck::kCorrupt || p.copyCheck == P2pCheck::kCorrupt) ? "corrupts data"
                       : (p.kernelCheck == P2pCheck::kHang || p.copyCheck == P2pCheck::kHang) ? "hangs"
                                                                                              : "fails";
    std::string detail = p.checkDetail.empty() ? "" : ", " + p.checkDetail;
    return std::string(head) + verb + " (" + join(what, ", ") + detail + "): " + p2pCauseAndRemedy(m, a, b);
  }
  if (!p.verified()) {
    std::string why = !m.checkError.empty() ? m.checkError : !p.checkDetail.empty() ? p.checkDetail : "the check did not run";
    return std::string(head) + "not data-verified (" + why + "); tpcomm uses the host-staged path";
  }
  return "";
}

PeerLink decideLink(const MachineProbe& m, int a, int b) {
  PeerLink l;
  if (a == b) {
    l.kind = LinkKind::kSelf;
    return l;
  }
  const PairFacts& p = m.pairs[a][b];
  l.atomics = p.atomics;
  l.canAccessPeer = p.canAccessPeer;
  l.perfRank = p.perfRank;
  l.pciPath = p.pciPath;
  l.ceGBs = p.ceGBs;
  l.smGBs = p.smGBs;
  l.rttUs = p.rttUs;
  std::string problem = pairProblem(m, a, b);
  if (!problem.empty()) {
    l.kind = LinkKind::kPcie;  // host-staged only
    l.why = problem;
    return l;
  }
  l.p2pVerified = true;
  if (p.viaSwitch) {
    l.kind = LinkKind::kNvswitch;
    l.nvlinks = m.gpus[a].nvml.switchLinks;
  } else if (p.nvlinks > 0) {
    l.kind = LinkKind::kNvlink;
    l.nvlinks = p.nvlinks;
  } else {
    l.kind = LinkKind::kPcieP2p;
  }
  return l;
}

std::string multicastLine(bool deviceSupports) {
  if (!deviceSupports) return "not supported by the device";
  std::string why;
  if (multicastDisabledByEnv(&why)) return "supported by the device, " + why;
  return "supported by the device, allowed by the environment (used only with more than two ranks on an NVSwitch)";
}

Topology machineTopology(const MachineProbe& m, const std::vector<int>& gpusIn) {
  std::vector<int> gpus = gpusIn;
  if (gpus.empty())
    for (int i = 0; i < m.nGpus(); ++i) gpus.push_back(i);
  Topology t;
  for (int g : gpus) {
    const GpuFacts& f = m.gpus[g];
    RankDevice d;
    d.cudaDevice = f.index;
    d.name = f.name;
    d.ccMajor = f.ccMajor;
    d.ccMinor = f.ccMinor;
    d.smCount = f.smCount;
    d.busId = f.busId;
    d.uuid = f.uuid;
    d.numaNode = f.numaNode();
    d.pcieGen = f.pcieGen();
    d.pcieWidth = f.pcieWidth();
    d.multicastSupported = f.multicastSupported;
    t.ranks.push_back(d);
  }
  const int n = static_cast<int>(gpus.size());
  t.links.assign(n, std::vector<PeerLink>(n));
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) t.links[a][b] = decideLink(m, gpus[a], gpus[b]);
  // A pair is as good as the weaker of its two directions (the same rule as probe.cc).
  for (int a = 0; a < n; ++a)
    for (int b = a + 1; b < n; ++b) {
      PeerLink& ab = t.links[a][b];
      PeerLink& ba = t.links[b][a];
      bool useBa = static_cast<int>(ba.kind) < static_cast<int>(ab.kind);
      LinkKind k = useBa ? ba.kind : ab.kind;
      int lanes = useBa ? ba.nvlinks : ab.nvlinks;
      std::string why = ab.why.empty() ? ba.why : ab.why;
      bool verified = ab.p2pVerified && ba.p2pVerified, atomics = ab.atomics && ba.atomics;
      for (PeerLink* l : {&ab, &ba}) {
        l->kind = k;
        l->nvlinks = lanes;
        l->why = why;
        l->p2pVerified = verified;
        l->atomics = atomics;
      }
    }
  std::string why;
  t.multicastAllowedByEnv = !multicastDisabledByEnv(&why);
  t.multicastWhyNot = why;
  return t;
}

std::string linkCell(const MachineProbe& m, int a, int b) {
  if (a == b) return "X";
  const PairFacts& p = m.pairs[a][b];
  std::string kind;
  if (p.viaSwitch) kind = "NVS" + std::to_string(m.gpus[a].nvml.switchLinks);
  else if (p.nvlinks > 0) kind = "NV" + std::to_string(p.nvlinks);
  else kind = p.pciPath.empty() ? "PCI" : p.pciPath;
  if (pairBroken(m, a, b)) return kind + " BAD";
  if (p.verified()) return kind + " ok";
  return kind + " -";
}

}  // namespace tpcomm
