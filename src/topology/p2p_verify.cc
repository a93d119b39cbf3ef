// p2p_verify.cc: see p2p_verify.h. Host side of the probe child; the kernels are in
// p2p_verify_kernels.cu. Multicast is only queried (CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED),
// never exercised: no multicast object is ever created here.
#include "topology/p2p_verify.h"

#include <cstdint>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>

#ifdef TPCOMM_HAVE_CUDA
#include <cuda.h>
#include <cuda_runtime_api.h>
#endif

#include "topology/nvml_loader.h"
#include "topology/sysfs_pci.h"

namespace tpcomm {

#ifdef TPCOMM_HAVE_CUDA
uint32_t p2pPatternWord(uint32_t seed, uint32_t i);
cudaError_t launchWritePattern(uint32_t* dst, uint32_t n, uint32_t seed);
cudaError_t launchCheckPattern(const uint32_t* buf, uint32_t n, uint32_t seed, uint32_t* result);
cudaError_t launchStoreBandwidth(void* dst, size_t bytes, uint32_t v, cudaStream_t s);
cudaError_t launchPingPong(uint32_t* remote, uint32_t* local, uint32_t iters, bool pinger, long long timeoutCycles,
                           uint32_t* error, cudaStream_t s);
#endif

namespace {

constexpr uint32_t kCheckWords = 256 * 1024;  // 1 MiB per check: small, but many pages and lines
constexpr size_t kMeasureBytes = 64u << 20;

#ifdef TPCOMM_HAVE_CUDA
std::string cudaText(const char* what, cudaError_t e) { return std::string(what) + ": " + cudaGetErrorString(e); }

#define TPCOMM_VERIFY_CUDA(call, what)                 \
  do {                                                 \
    cudaError_t e_ = (call);                           \
    if (e_ != cudaSuccess) {                           \
      cudaGetLastError();                              \
      p->checkDetail = cudaText(what, e_);             \
      *result = P2pCheck::kCudaError;                  \
      return;                                          \
    }                                                  \
  } while (0)

// Device buffer on `dev`, freed on scope exit.
struct DevBuf {
  int dev = -1;
  void* ptr = nullptr;
  DevBuf(int d, size_t bytes) : dev(d) {
    cudaSetDevice(d);
    if (cudaMalloc(&ptr, bytes) != cudaSuccess) {
      cudaGetLastError();
      ptr = nullptr;
    }
  }
  ~DevBuf() {
    if (ptr) {
      cudaSetDevice(dev);
      cudaFree(ptr);
    }
  }
  template <class T>
  T* as() const { return static_cast<T*>(ptr); }
};

// Enables a -> b peer access; *enabledHere tells whether this call did it.
cudaError_t enablePeer(int a, int b, bool* enabledHere) {
  cudaSetDevice(a);
  cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
  *enabledHere = e == cudaSuccess;
  if (e == cudaErrorPeerAccessAlreadyEnabled) {
    cudaGetLastError();
    return cudaSuccess;
  }
  return e;
}
#endif

}  // namespace

Status collectFacts(const ProbeOptions& opts, MachineProbe* m) {
  SysfsReader sys(opts.sysfsRoot);
  m->cmdline = sys.cmdline();
  m->driverVersion = sys.driverVersion();
  Nvml nvml(opts.nvmlLibrary);
  m->nvmlLoaded = nvml.ok();
  m->nvmlWhy = nvml.why();
  if (m->driverVersion.empty()) m->driverVersion = nvml.driverVersion();
#ifdef TPCOMM_HAVE_CUDA
  cudaDriverGetVersion(&m->cudaDriverApi);
  cudaRuntimeGetVersion(&m->cudaRuntime);
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    cudaGetLastError();
    m->gpuError = e != cudaSuccess ? cudaText("no usable GPU: cudaGetDeviceCount", e) : "no GPU: cudaGetDeviceCount = 0";
  }
  for (int d = 0; d < count; ++d) {
    GpuFacts g;
    g.index = d;
    cudaDeviceProp prop;
    if ((e = cudaGetDeviceProperties(&prop, d)) != cudaSuccess) {
      cudaGetLastError();
      m->gpuError = cudaText("cudaGetDeviceProperties", e);
      continue;
    }
    g.name = prop.name;
    g.ccMajor = prop.major;
    g.ccMinor = prop.minor;
    g.smCount = prop.multiProcessorCount;
    char bus[32] = {0};
    cudaDeviceGetPCIBusId(bus, sizeof(bus), d);
    g.busId = normalizeBusId(bus);
    const unsigned char* u = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
    char uuid[48];
    std::snprintf(uuid, sizeof(uuid), "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                  u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
    g.uuid = uuid;
    int mc = 0;  // queried only
    if (cudaDeviceGetAttribute(&mc, static_cast<cudaDeviceAttr>(CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED), d) != cudaSuccess) {
      cudaGetLastError();
      mc = 0;
    }
    g.multicastSupported = mc != 0;
    m->gpus.push_back(g);
  }
#else
  m->gpuError = "tpcomm was built without CUDA";
#endif
  std::vector<PciDeviceInfo> pcis;
  for (GpuFacts& g : m->gpus) {
    g.pci = sys.device(g.busId);
    g.nvml = nvml.gpu(g.busId);
    pcis.push_back(g.pci);
  }
  m->iommu = sys.iommu(pcis);
  const int n = m->nGpus();
  m->pairs.assign(n, std::vector<PairFacts>(n));
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      PairFacts& p = m->pairs[a][b];
      const GpuFacts& ga = m->gpus[a];
      const GpuFacts& gb = m->gpus[b];
      for (const std::string& r : ga.nvml.remoteBusIds) p.nvlinks += r == gb.busId;
      p.viaSwitch = ga.nvml.switchLinks > 0 && gb.nvml.switchLinks > 0;
      p.pciPath = pciPathType(ga.pci, gb.pci);
      if (p.pciPath.empty()) p.pciPath = nvml.commonAncestor(ga.busId, gb.busId);
#ifdef TPCOMM_HAVE_CUDA
      int v = 0;
      if (cudaDeviceCanAccessPeer(&v, ga.index, gb.index) == cudaSuccess) p.canAccessPeer = v != 0;
      if (cudaDeviceGetP2PAttribute(&v, cudaDevP2PAttrPerformanceRank, ga.index, gb.index) == cudaSuccess) p.perfRank = v;
      if (cudaDeviceGetP2PAttribute(&v, cudaDevP2PAttrNativeAtomicSupported, ga.index, gb.index) == cudaSuccess)
        p.atomics = v != 0;
      cudaGetLastError();
#endif
    }
  return Status::kOk;
}

void verifyPair(const MachineProbe& m, int a, int b, const char* stage, PairFacts* p) {
  const bool kernel = std::strcmp(stage, "kernel") == 0;
  P2pCheck* result = kernel ? &p->kernelCheck : &p->copyCheck;
#ifdef TPCOMM_HAVE_CUDA
  const int da = m.gpus[a].index, db = m.gpus[b].index;
  const size_t bytes = kCheckWords * sizeof(uint32_t);
  bool enabledHere = false;
  TPCOMM_VERIFY_CUDA(enablePeer(da, db, &enabledHere), "cudaDeviceEnablePeerAccess");
  DevBuf dst(db, bytes), src(da, bytes), res(db, 2 * sizeof(uint32_t));
  if (!dst.ptr || !src.ptr || !res.ptr) TPCOMM_VERIFY_CUDA(cudaErrorMemoryAllocation, "cudaMalloc");
  const uint32_t seed = 0x5eed0000u ^ (static_cast<uint32_t>(a) << 8) ^ static_cast<uint32_t>(b) ^ (kernel ? 0 : 0x80000000u);
  cudaSetDevice(db);
  TPCOMM_VERIFY_CUDA(cudaMemset(dst.ptr, 0xA4, bytes), "cudaMemset (poison)");
  TPCOMM_VERIFY_CUDA(cudaDeviceSynchronize(), "poison on the reader");
  if (kernel) {
    cudaSetDevice(da);
    TPCOMM_VERIFY_CUDA(launchWritePattern(dst.as<uint32_t>(), kCheckWords, seed), "peer-store kernel launch");
    TPCOMM_VERIFY_CUDA(cudaDeviceSynchronize(), "peer-store kernel");
  } else {
    cudaSetDevice(da);
    TPCOMM_VERIFY_CUDA(launchWritePattern(src.as<uint32_t>(), kCheckWords, seed), "local pattern kernel");
    TPCOMM_VERIFY_CUDA(cudaDeviceSynchronize(), "local pattern kernel");
    TPCOMM_VERIFY_CUDA(cudaMemcpyPeer(dst.ptr, db, src.ptr, da, bytes), "cudaMemcpyPeer");
    cudaSetDevice(da);
    TPCOMM_VERIFY_CUDA(cudaDeviceSynchronize(), "cudaMemcpyPeer (writer)");
  }
  cudaSetDevice(db);
  TPCOMM_VERIFY_CUDA(cudaDeviceSynchronize(), "writes visible on the reader");
  uint32_t init[2] = {0, 0xffffffffu}, out[2] = {0, 0};
  TPCOMM_VERIFY_CUDA(cudaMemcpy(res.ptr, init, sizeof(init), cudaMemcpyHostToDevice), "cudaMemcpy");
  TPCOMM_VERIFY_CUDA(launchCheckPattern(dst.as<uint32_t>(), kCheckWords, seed, res.as<uint32_t>()), "check kernel launch");
  TPCOMM_VERIFY_CUDA(cudaMemcpy(out, res.ptr, sizeof(out), cudaMemcpyDeviceToHost), "check kernel");
  if (out[0] == 0) {
    *result = P2pCheck::kOk;
  } else {
    uint32_t got = 0;
    cudaMemcpy(&got, dst.as<uint32_t>() + out[1], sizeof(got), cudaMemcpyDeviceToHost);
    char d[200];
    std::snprintf(d, sizeof(d), "%s: %u of %u words wrong, first at word %u: got 0x%08x, want 0x%08x", stage, out[0],
                  kCheckWords, out[1], got, p2pPatternWord(seed, out[1]));
    p->checkDetail = d;
    *result = P2pCheck::kCorrupt;
  }
  (void)enabledHere;
#else
  (void)m, (void)a, (void)b;
  *result = P2pCheck::kNotRun;
  p->checkDetail = "built without CUDA";
#endif
}

void measurePair(const MachineProbe& m, int a, int b, PairFacts* p) {
#ifdef TPCOMM_HAVE_CUDA
  const int da = m.gpus[a].index, db = m.gpus[b].index;
  DevBuf src(da, kMeasureBytes), dst(db, kMeasureBytes);
  if (!src.ptr || !dst.ptr) return;
  bool here = false;
  if (enablePeer(da, db, &here) != cudaSuccess) return;
  cudaSetDevice(da);
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  const int reps = 5;
  float ms = 0;
  cudaMemcpyPeerAsync(dst.ptr, db, src.ptr, da, kMeasureBytes, s);  // warm-up
  cudaEventRecord(e0, s);
  for (int i = 0; i < reps; ++i) cudaMemcpyPeerAsync(dst.ptr, db, src.ptr, da, kMeasureBytes, s);
  cudaEventRecord(e1, s);
  if (cudaEventSynchronize(e1) == cudaSuccess && cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess && ms > 0)
    p->ceGBs = reps * static_cast<double>(kMeasureBytes) / (ms * 1e6);
  launchStoreBandwidth(dst.ptr, kMeasureBytes, 1, s);  // warm-up
  cudaEventRecord(e0, s);
  for (int i = 0; i < reps; ++i) launchStoreBandwidth(dst.ptr, kMeasureBytes, i, s);
  cudaEventRecord(e1, s);
  if (cudaEventSynchronize(e1) == cudaSuccess && cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess && ms > 0)
    p->smGBs = reps * static_cast<double>(kMeasureBytes) / (ms * 1e6);
  // Flag round trip: needs b -> a peer access too.
  int back = 0;
  cudaDeviceCanAccessPeer(&back, db, da);
  bool hereBack = false;
  if (back && enablePeer(db, da, &hereBack) == cudaSuccess) {
    DevBuf flagA(da, 64), flagB(db, 64);
    cudaSetDevice(db);
    cudaStream_t sb;
    cudaStreamCreateWithFlags(&sb, cudaStreamNonBlocking);
    cudaMemset(flagB.ptr, 0, 64);
    cudaDeviceSynchronize();
    cudaSetDevice(da);
    cudaMemset(flagA.ptr, 0, 64);
    cudaDeviceSynchronize();
    const uint32_t iters = 2000;
    const long long timeout = 2000000000LL;  // ~1 s of clocks
    uint32_t* errA = flagA.as<uint32_t>() + 8;
    uint32_t* errB = flagB.as<uint32_t>() + 8;
    cudaSetDevice(db);
    launchPingPong(flagA.as<uint32_t>(), flagB.as<uint32_t>(), iters, false, timeout, errB, sb);
    cudaSetDevice(da);
    auto t0 = std::chrono::steady_clock::now();
    launchPingPong(flagB.as<uint32_t>(), flagA.as<uint32_t>(), iters, true, timeout, errA, s);
    cudaStreamSynchronize(s);
    auto t1 = std::chrono::steady_clock::now();
    cudaSetDevice(db);
    cudaStreamSynchronize(sb);
    uint32_t ea = 0, eb = 0;
    cudaMemcpy(&ea, errA, 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(&eb, errB, 4, cudaMemcpyDeviceToHost);
    if (!ea && !eb) p->rttUs = std::chrono::duration<double, std::micro>(t1 - t0).count() / iters;
    cudaStreamDestroy(sb);
  }
  cudaSetDevice(da);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaStreamDestroy(s);
  cudaGetLastError();
#else
  (void)m, (void)a, (void)b, (void)p;
#endif
}

Status probeMachineInProcess(const ProbeOptions& opts, MachineProbe* m) {
  Status s = collectFacts(opts, m);
  if (s != Status::kOk) return s;
#ifdef TPCOMM_HAVE_CUDA
  int prev = 0;
  cudaGetDevice(&prev);
  for (int a = 0; a < m->nGpus(); ++a)
    for (int b = 0; b < m->nGpus(); ++b) {
      if (a == b || !m->pairs[a][b].canAccessPeer) continue;
      // Was a -> b already enabled by the caller? Leave it as found.
      cudaSetDevice(m->gpus[a].index);
      cudaError_t e = cudaDeviceEnablePeerAccess(m->gpus[b].index, 0);
      bool ours = e == cudaSuccess;
      cudaGetLastError();
      verifyPair(*m, a, b, "kernel", &m->pairs[a][b]);
      verifyPair(*m, a, b, "copy", &m->pairs[a][b]);
      if (opts.measure && m->pairs[a][b].verified()) measurePair(*m, a, b, &m->pairs[a][b]);
      if (ours) {
        cudaSetDevice(m->gpus[a].index);
        cudaDeviceDisablePeerAccess(m->gpus[b].index);
        cudaGetLastError();
      }
    }
  cudaSetDevice(prev);
#endif
  m->measured = opts.measure;
  m->complete = true;
  return Status::kOk;
}

int probeChildMain(int argc, char** argv) {
  ProbeOptions opts;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--sysfs-root" && i + 1 < argc) opts.sysfsRoot = argv[++i];
    else if (a == "--measure") opts.measure = true;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  MachineProbe m;
  collectFacts(opts, &m);
  std::printf("tpcomm-probe-child 1\nfacts %s\n", m.toJson().c_str());
  std::fflush(stdout);
  for (int a = 0; a < m.nGpus(); ++a)
    for (int b = 0; b < m.nGpus(); ++b) {
      if (a == b || !m.pairs[a][b].canAccessPeer) continue;
      PairFacts& p = m.pairs[a][b];
      for (const char* stage : {"kernel", "copy"}) {
        std::printf("begin %d %d %s\n", a, b, stage);
        std::fflush(stdout);
        p.checkDetail.clear();
        verifyPair(m, a, b, stage, &p);
        P2pCheck r = std::strcmp(stage, "kernel") == 0 ? p.kernelCheck : p.copyCheck;
        std::printf("result %d %d %s %s %s\n", a, b, stage, p2pCheckName(r), p.checkDetail.c_str());
        std::fflush(stdout);
      }
      if (opts.measure && p.verified()) {
        std::printf("begin %d %d measure\n", a, b);
        std::fflush(stdout);
        measurePair(m, a, b, &p);
        std::printf("measure %d %d %.3f %.3f %.3f\n", a, b, p.ceGBs, p.smGBs, p.rttUs);
        std::fflush(stdout);
      }
    }
  std::printf("done\n");
  std::fflush(stdout);
  return 0;
}

}  // namespace tpcomm
