// real_nccl: resolving the real NCCL under the shim (see real_nccl.h for the search order).
// Every function is taken from one object, the one that defines ncclGetVersion (which the shim
// never exports), and that object must not be the shim: a path to libtpcomm_nccl.so or to a
// library that merely depends on it is rejected with a message rather than recursing.
#include "shim/real_nccl.h"

#include <dlfcn.h>

#include <mutex>

#include "common/error.h"
#include "common/log.h"
#include "common/params.h"

namespace tpcomm {
namespace shim {
namespace {

const void* objectBase(const void* addr) {
  Dl_info info;
  if (!addr || !dladdr(addr, &info)) return nullptr;
  return info.dli_fbase;
}

std::string objectPath(const void* addr) {
  Dl_info info;
  if (!addr || !dladdr(addr, &info) || !info.dli_fname) return "";
  return info.dli_fname;
}

// Fills `t` from `handle`. `required` false: a missing function is left null.
template <typename Fn>
bool take(void* handle, const void* base, const char* name, Fn* slot, bool required, std::string* missing) {
  void* p = dlsym(handle, name);
  if (p && objectBase(p) != base) p = nullptr;  // defined elsewhere (a front or the shim)
  *slot = reinterpret_cast<Fn>(p);
  if (!p && required) *missing += std::string(*missing == "" ? "" : ", ") + name;
  return p != nullptr;
}

Status fromHandle(void* handle, const std::string& how, RealNccl* out) {
  void* getVersion = dlsym(handle, "ncclGetVersion");
  if (!getVersion)
    return TPCOMM_ERROR(kNotSupported, "%s: no ncclGetVersion: not an NCCL library (libtpcomm_nccl.so itself?)",
                        how.c_str());
  const void* base = objectBase(getVersion);
  if (isInShim(getVersion)) return TPCOMM_ERROR(kNotSupported, "%s: resolves to libtpcomm_nccl.so itself", how.c_str());
  RealNccl t;
  t.handle = handle;
  t.how = how;
  t.path = objectPath(getVersion);
  std::string missing;
  take(handle, base, "ncclGetVersion", &t.getVersion, true, &missing);
  take(handle, base, "ncclCommInitRank", &t.commInitRank, true, &missing);
  take(handle, base, "ncclCommInitRankConfig", &t.commInitRankConfig, false, &missing);
  take(handle, base, "ncclCommInitAll", &t.commInitAll, true, &missing);
  take(handle, base, "ncclCommSplit", &t.commSplit, false, &missing);
  take(handle, base, "ncclCommDestroy", &t.commDestroy, true, &missing);
  take(handle, base, "ncclCommFinalize", &t.commFinalize, false, &missing);
  take(handle, base, "ncclCommAbort", &t.commAbort, true, &missing);
  take(handle, base, "ncclGroupStart", &t.groupStart, true, &missing);
  take(handle, base, "ncclGroupEnd", &t.groupEnd, true, &missing);
  take(handle, base, "ncclAllReduce", &t.allReduce, true, &missing);
  take(handle, base, "ncclReduceScatter", &t.reduceScatter, true, &missing);
  take(handle, base, "ncclAllGather", &t.allGather, true, &missing);
  take(handle, base, "ncclCommGetAsyncError", &t.commGetAsyncError, true, &missing);
  take(handle, base, "ncclGetErrorString", &t.getErrorString, true, &missing);
  take(handle, base, "ncclCommCount", &t.commCount, true, &missing);
  take(handle, base, "ncclCommUserRank", &t.commUserRank, true, &missing);
  take(handle, base, "ncclCommCuDevice", &t.commCuDevice, true, &missing);
  if (!missing.empty())
    return TPCOMM_ERROR(kNotSupported, "%s (%s): lacks %s (or they are not its own definitions)", how.c_str(),
                        t.path.c_str(), missing.c_str());
  if (t.getVersion(&t.version) != ncclSuccess) t.version = 0;
  *out = std::move(t);
  return Status::kOk;
}

Status fromPath(const std::string& path, const std::string& how, RealNccl* out) {
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    return TPCOMM_ERROR(kNotSupported, "%s: dlopen(%s): %s", how.c_str(), path.c_str(), e ? e : "failed");
  }
  Status s = fromHandle(h, how, out);
  if (s != Status::kOk) dlclose(h);
  return s;
}

}  // namespace

bool isInShim(const void* addr) {
  const void* mine = objectBase(reinterpret_cast<const void*>(&isInShim));
  return mine && objectBase(addr) == mine;
}

Status loadRealNccl(const std::string& path, RealNccl* out) {
  if (!out) return TPCOMM_INVALID("loadRealNccl: out is null");
  if (!path.empty()) return fromPath(path, "TPCOMM_NCCL_LIBRARY=" + path, out);
  std::string tried;
  // The definition after ours in the lookup order: under LD_PRELOAD, the engine's own libnccl.
  void* next = dlsym(RTLD_NEXT, "ncclGetVersion");
  if (next && !isInShim(next)) {
    std::string file = objectPath(next);
    void* h = file.empty() ? nullptr : dlopen(file.c_str(), RTLD_NOW | RTLD_NOLOAD);
    if (h && fromHandle(h, "RTLD_NEXT", out) == Status::kOk) return Status::kOk;
    tried += "RTLD_NEXT (" + file + "): " + lastErrorMessage() + "; ";
  }
  for (const char* name : {"libnccl.so.2", "libnccl.so"}) {
    if (fromPath(name, std::string("dlopen(") + name + ")", out) == Status::kOk) return Status::kOk;
    tried += std::string(lastErrorMessage()) + "; ";
  }
  return TPCOMM_ERROR(kNotSupported, "no real NCCL found (set TPCOMM_NCCL_LIBRARY to its path): %s", tried.c_str());
}

const RealNccl* realNccl() {
  static RealNccl table;
  static const RealNccl* result = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    const std::string& path = paramString(ParamId::kNcclLibrary);
    if (loadRealNccl(path, &table) == Status::kOk) {
      result = &table;
      TPCOMM_INFO(kInit, "libtpcomm_nccl: real NCCL %d from %s (%s)", table.version, table.path.c_str(),
                  table.how.c_str());
    } else {
      TPCOMM_WARN(kInit, "libtpcomm_nccl: %s", lastErrorMessage());
    }
  });
  return result;
}

}  // namespace shim
}  // namespace tpcomm
