// topo_cache.cc: see topo_cache.h.
#include "topology/topo_cache.h"

#include <cstdint>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "common/error.h"
#include "common/log.h"

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

Status readCacheFile(const std::string& path, std::string* text, std::string* why) {
  // O_NONBLOCK: a FIFO (or device) put in place of the cache file must not block the open;
  // fstat then admits regular files only, and the size is capped before anything is read.
  int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    *why = (errno == ENOENT ? "no cache file " : "cannot open cache file ") + path +
           (errno == ENOENT ? "" : std::string(": ") + std::strerror(errno));
    return errno == ENOENT ? Status::kNotSupported : Status::kInvalidArgument;
  }
  struct stat st {};
  Status s = Status::kOk;
  if (fstat(fd, &st) != 0) {
    *why = "cannot stat cache file " + path + ": " + std::strerror(errno);
    s = Status::kInvalidArgument;
  } else if (!S_ISREG(st.st_mode)) {
    *why = "cache file " + path + " is not a regular file";
    s = Status::kInvalidArgument;
  } else if (static_cast<uint64_t>(st.st_size) > kTopoCacheMaxBytes) {
    *why = "cache file " + path + " has " + std::to_string(st.st_size) + " bytes, more than the " +
           std::to_string(kTopoCacheMaxBytes) + " a probe result can have";
    s = Status::kInvalidArgument;
  } else {
    text->resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < text->size()) {
      ssize_t r = read(fd, &(*text)[got], text->size() - got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      got += static_cast<size_t>(r);
    }
    text->resize(got);  // a file that shrank meanwhile is parsed as far as it goes (and fails)
  }
  close(fd);
  return s;
}

Status loadTopoCache(const std::string& path, const std::string& driverVersion, int cudaDriverApi,
                     const std::string& cmdline, const std::vector<GpuKey>& want, MachineProbe* out,
                     std::string* why) {
  std::string text;
  Status rs = readCacheFile(path, &text, why);
  if (rs == Status::kNotSupported) return Status::kNotSupported;  // no file: a plain miss
  MachineProbe m;
  if (rs != Status::kOk || MachineProbe::fromJson(text, &m) != Status::kOk) {
    // Unusable: a miss (re-probe and rewrite it), with a warning that says why.
    if (rs == Status::kOk) *why = "unreadable cache file " + path + ": " + lastErrorMessage();
    clearError();
    TPCOMM_WARN(kTopo, "topology cache: %s; ignoring it (re-probing)", why->c_str());
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
  return writeFileAtomically(path, m.toJson(1) + "\n");
}

Status writeFileAtomically(const std::string& path, const std::string& text) {
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  if (!mkdirs(dir)) return TPCOMM_ERROR(kSystemError, "mkdir %s: %s", dir.c_str(), std::strerror(errno));
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  // O_EXCL: never write through a link someone left at the temp name; 0600: the user's own.
  std::remove(tmp.c_str());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return TPCOMM_ERROR(kSystemError, "cannot create %s: %s", tmp.c_str(), std::strerror(errno));
  size_t done = 0;
  while (done < text.size()) {
    ssize_t w = write(fd, text.data() + done, text.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    done += static_cast<size_t>(w);
  }
  const int err = errno;
  if (close(fd) != 0 || done != text.size()) {
    std::remove(tmp.c_str());
    return TPCOMM_ERROR(kSystemError, "write %s failed: %s", tmp.c_str(), std::strerror(err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    return TPCOMM_ERROR(kSystemError, "rename to %s: %s", path.c_str(), std::strerror(e));
  }
  return Status::kOk;
}

}  // namespace tpcomm
