// engine_probe: a stand-in engine for the CPU preload checks. It links the real NCCL the way
// an engine does and prints, one "key value" per line: which object each NCCL function it
// calls binds to (dladdr), and the result codes of calls that need no GPU (run_preload_checks.sh
// compares them with and without LD_PRELOAD=libtpcomm_nccl.so, and under TPCOMM_SHIM=0).
//   engine_probe            bindings + result codes
//   engine_probe --front F  dlopen F (libtpcomm_nccl_vllm.so) and print where dlsym(F, name)
//                           lands for an intercepted and a non-intercepted name (vLLM's way)
#include <dlfcn.h>
#include <nccl.h>

#include <cstdio>
#include <cstring>
#include <string>

namespace {

std::string objectOf(const void* p) {
  Dl_info info;
  if (!p || !dladdr(p, &info) || !info.dli_fname) return "none";
  std::string s = info.dli_fname;
  size_t slash = s.rfind('/');
  return slash == std::string::npos ? s : s.substr(slash + 1);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--front") == 0) {
    void* h = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      std::printf("dlopen_error %s\n", dlerror());
      return 1;
    }
    for (const char* name :
         {"ncclAllReduce", "ncclAllGather", "ncclCommInitRank", "ncclGroupEnd", "ncclGetVersion", "ncclBroadcast",
          "ncclGetUniqueId"})
      std::printf("front %s %s\n", name, objectOf(dlsym(h, name)).c_str());
    return 0;
  }
  // Where the engine's calls bind.
  std::printf("bind ncclAllReduce %s\n", objectOf(reinterpret_cast<void*>(&ncclAllReduce)).c_str());
  std::printf("bind ncclCommInitAll %s\n", objectOf(reinterpret_cast<void*>(&ncclCommInitAll)).c_str());
  std::printf("bind ncclGroupStart %s\n", objectOf(reinterpret_cast<void*>(&ncclGroupStart)).c_str());
  std::printf("bind ncclGetVersion %s\n", objectOf(reinterpret_cast<void*>(&ncclGetVersion)).c_str());
  std::printf("bind ncclAllGather %s\n", objectOf(reinterpret_cast<void*>(&ncclAllGather)).c_str());
  std::printf("bind ncclBroadcast %s\n", objectOf(reinterpret_cast<void*>(&ncclBroadcast)).c_str());
  std::printf("bind ncclGetErrorString %s\n", objectOf(reinterpret_cast<void*>(&ncclGetErrorString)).c_str());
  // Result codes of calls that need no GPU, or fail the same way without one.
  int version = 0;
  ncclResult_t vr = ncclGetVersion(&version);
  std::printf("rc ncclGetVersion %d %d\n", vr, version);
  std::printf("rc ncclGroupStart %d\n", ncclGroupStart());
  std::printf("rc ncclGroupStart(nested) %d\n", ncclGroupStart());
  std::printf("rc ncclGroupEnd(inner) %d\n", ncclGroupEnd());
  std::printf("rc ncclGroupEnd %d\n", ncclGroupEnd());
  std::printf("rc ncclGroupEnd(unbalanced) %d\n", ncclGroupEnd());
  ncclComm_t comms[1] = {nullptr};
  int dev0 = 0;
  std::printf("rc ncclCommInitAll(-1) %d\n", ncclCommInitAll(comms, -1, &dev0));
  float x = 1.0f;
  std::printf("rc ncclAllReduce(null recv) %d\n",
              ncclAllReduce(&x, nullptr, 1, ncclFloat32, ncclSum, nullptr, nullptr));
  std::printf("rc ncclReduceScatter(null recv) %d\n",
              ncclReduceScatter(&x, nullptr, 1, ncclFloat32, ncclSum, nullptr, nullptr));
  std::printf("rc ncclAllGather(null recv) %d\n", ncclAllGather(&x, nullptr, 1, ncclFloat32, nullptr, nullptr));
  std::printf("rc ncclCommDestroy(null) %d\n", ncclCommDestroy(nullptr));
  std::printf("rc ncclCommAbort(null) %d\n", ncclCommAbort(nullptr));
  std::printf("rc ncclCommFinalize(null) %d\n", ncclCommFinalize(nullptr));
  return 0;
}
