// topo_cache.cc: see topo_cache.h.
#include "topology/topo_cache.h"

#include <cstdint>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/error.h"

namespace tpcomm {
namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

bool mkdirs(const std::string& dir) {
  std::string cur;
  std::stringstream ss(dir);
  std::string part;
  if (!dir.empty() && dir[0] == '/') cur = "/";
  while (std::getline(ss, part, '/')) {
    if (part.empty()) continue;
    cur += part + "/";
    if (mkdir(cur.c_str(), 0700) != 0 && errno != EEXIST) return false;
  }
  return true;
}

}  // namespace

std::string topoCacheDir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg) return std::string(xdg) + "/tpcomm";
  const char* home = std::getenv("HOME");
  if (home && *home) return std::string(home) + "/.cache/tpcomm";
  return "";
}

std::string topoCachePath(const std::string& dir, const std::string& driverVersion, int cudaDriverApi,
                          const std::string& cmdline) {
  char name[64];
  std::snprintf(name, sizeof(name), "topo-%016llx.json",
                static_cast<unsigned long long>(fnv1a(driverVersion + "\n" + std::to_string(cudaDriverApi) + "\n" + cmdline)));
  return dir + "/" + name;
}

Status loadTopoCache(const std::string& path, const std::string& driverVersion, int cudaDriverApi,
                     const std::string& cmdline, const std::vector<GpuKey>& want, MachineProbe* out,
                     std::string* why) {
  std::ifstream f(path);
  if (!f) {
    *why = "no cache file " + path;
    return Status::kNotSupported;
  }
  std::stringstream ss;
  ss << f.rdbuf();
  MachineProbe m;
  if (MachineProbe::fromJson(ss.str(), &m) != Status::kOk) {
    *why = "unreadable cache file " + path;
    return Status::kNotSupported;
  }
  if (m.driverVersion != driverVersion || m.cudaDriverApi != cudaDriverApi) {
    *why = "driver changed (" + m.driverVersion + " -> " + driverVersion + ")";
    return Status::kNotSupported;
  }
  if (m.cmdline != cmdline) {
    *why = "kernel command line changed";
    return Status::kNotSupported;
  }
  if (!m.cacheable()) {
    *why = "cached result is not definitive";
    return Status::kNotSupported;
  }
  for (const GpuKey& k : want) {
    int i = m.findGpu(k.busId);
    if (i < 0) {
      *why = "GPU " + k.busId + " not in the cache";
      return Status::kNotSupported;
    }
    if (m.gpus[i].uuid != k.uuid) {
      *why = "GPU at " + k.busId + " changed (" + m.gpus[i].uuid + " -> " + k.uuid + ")";
      return Status::kNotSupported;
    }
  }
  *out = std::move(m);
  return Status::kOk;
}

Status storeTopoCache(const std::string& path, const MachineProbe& m) {
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  if (!mkdirs(dir)) return TPCOMM_ERROR(kSystemError, "topology cache: mkdir %s: %s", dir.c_str(), std::strerror(errno));
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream f(tmp, std::ios::trunc);
    if (!f) return TPCOMM_ERROR(kSystemError, "topology cache: cannot write %s: %s", tmp.c_str(), std::strerror(errno));
    f << m.toJson(1) << "\n";
    if (!f) return TPCOMM_ERROR(kSystemError, "topology cache: write %s failed", tmp.c_str());
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return TPCOMM_ERROR(kSystemError, "topology cache: rename to %s: %s", path.c_str(), std::strerror(errno));
  }
  return Status::kOk;
}

}  // namespace tpcomm
