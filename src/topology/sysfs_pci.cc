// sysfs_pci.cc: see sysfs_pci.h. Read-only, best effort: anything unreadable stays "unknown".
#include "topology/sysfs_pci.h"

#include <dirent.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace tpcomm {
namespace {

bool isDir(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool exists(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0;
}

std::string readText(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) return "";
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::vector<std::string> listDir(const std::string& p) {
  std::vector<std::string> out;
  DIR* d = opendir(p.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(n);
  }
  closedir(d);
  return out;
}

int readInt(const std::string& p, int dflt) {
  std::string s = readText(p);
  if (s.empty()) return dflt;
  char* end = nullptr;
  long v = std::strtol(s.c_str(), &end, 10);
  return end == s.c_str() ? dflt : static_cast<int>(v);
}

// "0000:00:01.0"-shaped path component.
bool looksLikeBdf(const std::string& s) { return !normalizeBusId(s).empty() && s.size() == 12; }

std::vector<std::string> splitPath(const std::string& p) {
  std::vector<std::string> out;
  std::stringstream ss(p);
  std::string part;
  while (std::getline(ss, part, '/'))
    if (!part.empty()) out.push_back(part);
  return out;
}

unsigned le16(const std::string& b, size_t off) {
  return static_cast<unsigned char>(b[off]) | (static_cast<unsigned char>(b[off + 1]) << 8);
}
unsigned le32(const std::string& b, size_t off) { return le16(b, off) | (le16(b, off + 2) << 16); }

}  // namespace

std::string normalizeBusId(const std::string& in) {
  // [domain:]bus:device.function, hex fields; nothing else.
  std::vector<std::string> f;
  std::string cur;
  for (char c : in) {
    if (c == ':' || c == '.') {
      f.push_back(cur);
      cur.clear();
    } else if (std::isxdigit(static_cast<unsigned char>(c))) {
      cur += c;
    } else {
      return "";
    }
  }
  f.push_back(cur);
  if (f.size() == 3) f.insert(f.begin(), "0");
  if (f.size() != 4 || in.find('.') == std::string::npos || in.find('.') < in.rfind(':')) return "";
  unsigned long v[4];
  const size_t maxLen[4] = {8, 2, 2, 1};
  for (int i = 0; i < 4; ++i) {
    if (f[i].empty() || f[i].size() > maxLen[i]) return "";
    v[i] = std::strtoul(f[i].c_str(), nullptr, 16);
  }
  if (v[0] > 0xffff || v[1] > 0xff || v[2] > 0x1f || v[3] > 7) return "";
  char out[16];
  std::snprintf(out, sizeof(out), "%04lx:%02lx:%02lx.%lx", v[0], v[1], v[2], v[3]);
  return out;
}

std::string AcsState::describe() const {
  switch (read) {
    case Read::kUnknown: return "unknown (" + why + ")";
    case Read::kNoCapability: return "no ACS capability";
    case Read::kRead: break;
  }
  if (control == 0) return "off";
  static const char* kBits[] = {"SV", "TB", "RR", "CR", "UF", "EC", "DT"};
  std::string bits;
  for (int i = 0; i < 7; ++i)
    if (control & (1u << i)) bits += std::string(bits.empty() ? "" : " ") + kBits[i];
  char hex[16];
  std::snprintf(hex, sizeof(hex), "0x%04x", control);
  return std::string(redirects() ? "redirect ON" : "on, no redirect") + " (ctrl " + hex + ": " + bits + ")";
}

AcsState parseAcs(const std::string& config) {
  AcsState a;
  if (config.size() < 4096) {
    a.why = config.empty() ? "config space not readable"
                           : "extended config space not readable (" + std::to_string(config.size()) +
                                 " bytes; needs root)";
    return a;
  }
  size_t off = 0x100;
  for (int guard = 0; guard < 64 && off >= 0x100 && off + 8 <= config.size(); ++guard) {
    unsigned hdr = le32(config, off);
    if (hdr == 0 || hdr == 0xffffffffu) break;
    if ((hdr & 0xffff) == 0x000d) {  // ACS extended capability
      a.read = AcsState::Read::kRead;
      a.control = le16(config, off + 6);
      return a;
    }
    off = (hdr >> 20) & 0xffc;
    if (off == 0) break;
  }
  a.read = AcsState::Read::kNoCapability;
  return a;
}

int pcieGenFromSpeed(const std::string& speed) {
  double gts = std::atof(speed.c_str());
  if (gts <= 0) return 0;
  if (gts < 4) return 1;
  if (gts < 6) return 2;
  if (gts < 12) return 3;
  if (gts < 24) return 4;
  if (gts < 48) return 5;
  return 6;
}

const char* iommuModeName(IommuMode m) {
  switch (m) {
    case IommuMode::kUnknown: return "unknown";
    case IommuMode::kOff: return "off";
    case IommuMode::kPassthrough: return "passthrough";
    case IommuMode::kTranslated: return "translated";
  }
  return "unknown";
}

SysfsReader::SysfsReader(std::string root) : root_(std::move(root)) {
  if (root_.empty()) root_ = "/";
  if (root_.back() != '/') root_ += '/';
}

std::string SysfsReader::path(const std::string& rel) const { return root_ + rel; }

std::string SysfsReader::findDeviceDir(const std::string& bdf) const {
  // Live sysfs: /sys/bus/pci/devices/<bdf> is a symlink into /sys/devices/pci.../...
  char buf[PATH_MAX];
  std::string link = path("sys/bus/pci/devices/" + bdf);
  if (realpath(link.c_str(), buf)) return buf;
  // Fixture trees (no symlinks): search /sys/devices for the directory, bounded depth.
  std::vector<std::pair<std::string, int>> stack = {{path("sys/devices"), 0}};
  while (!stack.empty()) {
    auto [dir, depth] = stack.back();
    stack.pop_back();
    for (const std::string& n : listDir(dir)) {
      std::string p = dir + "/" + n;
      if (!isDir(p)) continue;
      if (n == bdf) return p;
      if (depth < 12 && (n.rfind("pci", 0) == 0 || looksLikeBdf(n))) stack.push_back({p, depth + 1});
    }
  }
  return "";
}

AcsState SysfsReader::acs(const std::string& busId, const std::string& deviceDir) const {
  (void)busId;
  std::ifstream f(deviceDir + "/config", std::ios::binary);
  if (!f) {
    AcsState a;
    a.why = "no config file";
    return a;
  }
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return parseAcs(bytes);
}

PciDeviceInfo SysfsReader::device(const std::string& busId) const {
  PciDeviceInfo info;
  info.busId = normalizeBusId(busId);
  if (info.busId.empty()) return info;
  std::string dir = findDeviceDir(info.busId);
  if (dir.empty()) return info;
  info.found = true;
  // Chain: components after the host bridge ("pci0000:00") that look like BDFs.
  std::vector<std::string> parts = splitPath(dir);
  std::string prefix = "/";
  bool inTree = false;
  for (const std::string& part : parts) {
    prefix += part + "/";
    if (!inTree && part.rfind("pci", 0) == 0 && part.find(':') != std::string::npos) {
      inTree = true;
      info.hostBridge = part;
      continue;
    }
    if (inTree && looksLikeBdf(part) && part != info.busId) {
      PciBridge b;
      b.busId = part;
      b.acs = acs(part, prefix.substr(0, prefix.size() - 1));
      info.bridges.push_back(b);
    }
  }
  info.numaNode = readInt(dir + "/numa_node", -1);
  info.linkGen = pcieGenFromSpeed(readText(dir + "/current_link_speed"));
  info.linkWidth = readInt(dir + "/current_link_width", 0);
  info.maxLinkGen = pcieGenFromSpeed(readText(dir + "/max_link_speed"));
  info.maxLinkWidth = readInt(dir + "/max_link_width", 0);
  char buf[PATH_MAX];
  std::string groupLink = dir + "/iommu_group";
  if (realpath(groupLink.c_str(), buf)) {
    info.iommuGroup = splitPath(buf).back();
  } else {
    // Fixtures: find the group that lists the device.
    std::string groups = path("sys/kernel/iommu_groups");
    for (const std::string& g : listDir(groups))
      if (exists(groups + "/" + g + "/devices/" + info.busId)) info.iommuGroup = g;
  }
  if (!info.iommuGroup.empty()) info.iommuGroupType = readText(path("sys/kernel/iommu_groups/" + info.iommuGroup + "/type"));
  return info;
}

std::string SysfsReader::cmdline() const { return readText(path("proc/cmdline")); }

std::string SysfsReader::driverVersion() const {
  std::string v = readText(path("sys/module/nvidia/version"));
  if (!v.empty()) return v;
  std::string text = readText(path("proc/driver/nvidia/version"));
  // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu ..." -> "580.159.04"
  std::stringstream ss(text.substr(0, text.find('\n')));
  std::string tok;
  while (ss >> tok)
    if (std::isdigit(static_cast<unsigned char>(tok[0])) && tok.find('.') != std::string::npos) return tok;
  return "";
}

IommuInfo SysfsReader::iommu(const std::vector<PciDeviceInfo>& gpus) const {
  IommuInfo info;
  info.hardwarePresent = !listDir(path("sys/class/iommu")).empty();
  info.groups = static_cast<int>(listDir(path("sys/kernel/iommu_groups")).size());
  bool cmdPt = false, cmdOff = false, cmdStrict = false;
  std::stringstream ss(cmdline());
  std::string tok;
  while (ss >> tok) {
    std::string key = tok.substr(0, tok.find('='));
    if (key != "iommu" && key != "intel_iommu" && key != "amd_iommu" && key.rfind("iommu.", 0) != 0) continue;
    info.cmdlineFlags += (info.cmdlineFlags.empty() ? "" : " ") + tok;
    if (tok == "iommu=pt" || tok == "iommu.passthrough=1" || tok == "amd_iommu=pt") cmdPt = true;
    if (tok == "iommu=off" || tok == "intel_iommu=off" || tok == "amd_iommu=off") cmdOff = true;
    if (tok == "iommu.passthrough=0" || tok == "iommu=nopt") cmdStrict = true;
  }
  std::string types;
  bool anyTranslated = false, anyIdentity = false;
  for (const PciDeviceInfo& g : gpus) {
    if (g.iommuGroupType.empty()) continue;
    types += (types.empty() ? "" : ", ") + g.busId + ": " + g.iommuGroupType;
    if (g.iommuGroupType.rfind("DMA", 0) == 0) anyTranslated = true;
    if (g.iommuGroupType == "identity") anyIdentity = true;
  }
  std::string flags = info.cmdlineFlags.empty() ? "no iommu flags on the kernel command line" : "cmdline: " + info.cmdlineFlags;
  if (anyTranslated) {
    info.mode = IommuMode::kTranslated;
    info.evidence = "GPU IOMMU group type " + types + "; " + flags;
  } else if (anyIdentity) {
    info.mode = IommuMode::kPassthrough;
    info.evidence = "GPU IOMMU group type " + types + "; " + flags;
  } else if (!info.hardwarePresent && info.groups == 0) {
    info.mode = IommuMode::kOff;
    info.evidence = "no /sys/class/iommu entries and no IOMMU groups; " + flags;
  } else if (cmdOff) {
    info.mode = IommuMode::kOff;
    info.evidence = flags;
  } else if (cmdPt) {
    info.mode = IommuMode::kPassthrough;
    info.evidence = flags + " (GPU group types not readable)";
  } else {
    info.mode = cmdStrict ? IommuMode::kTranslated : IommuMode::kUnknown;
    info.evidence = "IOMMU present (" + std::to_string(info.groups) + " groups), GPU group types not readable; " + flags;
  }
  return info;
}

std::string pciPathType(const PciDeviceInfo& a, const PciDeviceInfo& b) {
  if (!a.found || !b.found) return "";
  if (a.hostBridge != b.hostBridge) {
    if (a.numaNode >= 0 && a.numaNode == b.numaNode) return "NODE";
    if (a.numaNode < 0 || b.numaNode < 0) return "SYS";
    return "SYS";
  }
  size_t common = 0;
  while (common < a.bridges.size() && common < b.bridges.size() && a.bridges[common].busId == b.bridges[common].busId)
    ++common;
  if (common == 0) return "PHB";  // different root ports of one host bridge
  // common >= 1: they share the root port and `common - 1` more bridges. A PCIe switch shows as
  // upstream port + downstream ports; meeting at a downstream-port's parent = one switch.
  size_t below = std::max(a.bridges.size(), b.bridges.size()) - common;
  return below <= 1 ? "PIX" : "PXB";
}

std::vector<PciBridge> bridgesBetween(const PciDeviceInfo& a, const PciDeviceInfo& b) {
  std::vector<PciBridge> out;
  size_t common = 0;
  while (a.hostBridge == b.hostBridge && common < a.bridges.size() && common < b.bridges.size() &&
         a.bridges[common].busId == b.bridges[common].busId)
    ++common;
  if (common > 0) out.push_back(a.bridges[common - 1]);
  for (size_t i = common; i < a.bridges.size(); ++i) out.push_back(a.bridges[i]);
  for (size_t i = common; i < b.bridges.size(); ++i) out.push_back(b.bridges[i]);
  return out;
}

}  // namespace tpcomm
