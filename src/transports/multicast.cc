// multicast transport: set-up and tear-down of the NVSwitch multicast object (see multicast.h
// for what it is, the gate, and how handles are shared). UNTESTED ON HARDWARE.
//
// Set-up, collective, one agreement after each step so that no rank goes on alone:
//   0. gate (Topology::multicastUsable) closed -> return, no driver call, no bootstrap call
//   1. every rank: resolve the driver symbols, re-query CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED,
//      granularities                                                             -> agree
//   2. rank 0: cuMulticastCreate (+ export as a POSIX fd across processes)      -> gather offer
//   3. every rank: import (pidfd_getfd), cuMulticastAddDevice(own device)        -> agree
//   4. every rank: cuMemCreate, cuMulticastBindMem, map UC and MC views, zero counters -> agree
// Bind comes after every device was added (the driver requires it); rank 0 closes its exported
// fd only after everyone imported it. The environment switches are re-read right before each
// multicast driver call (steps 2, 3, 4).
#include "transports/multicast.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#ifdef TPCOMM_HAVE_CUDA
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "common/error.h"
#include "topology/topology.h"

namespace tpcomm {

namespace {
size_t alignUp(size_t v, size_t a) { return (v + a - 1) / a * a; }
std::atomic<MulticastSymbolLoader> gLoader{nullptr};
}  // namespace

MulticastLayout MulticastLayout::make(int nRanks, int maxBlocks, size_t dataBytes, size_t granularity) {
  MulticastLayout l;
  l.maxBlocks = maxBlocks;
  l.countersOffset = 0;
  l.epochsOffset = alignUp(sizeof(uint64_t) * maxBlocks, 4096);
  l.dataOffset = alignUp(l.epochsOffset + sizeof(uint64_t) * maxBlocks, 65536);
  // Whole 16-byte packs for every rank's slice.
  const size_t unit = 16 * static_cast<size_t>(nRanks > 0 ? nRanks : 1);
  l.dataBytes = std::max(unit, dataBytes / unit * unit);
  l.totalBytes = alignUp(l.dataOffset + l.dataBytes, std::max<size_t>(granularity, 1));
  return l;
}

void setMulticastSymbolLoader(MulticastSymbolLoader loader) { gLoader.store(loader); }

#ifdef TPCOMM_HAVE_CUDA

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

// The driver functions the transport uses, resolved at run time (never linked).
struct MulticastDriver {
  decltype(&::cuGetErrorString) getErrorString = nullptr;
  decltype(&::cuDeviceGet) deviceGet = nullptr;
  decltype(&::cuDeviceGetAttribute) deviceGetAttribute = nullptr;
  decltype(&::cuMulticastGetGranularity) multicastGetGranularity = nullptr;
  decltype(&::cuMulticastCreate) multicastCreate = nullptr;
  decltype(&::cuMulticastAddDevice) multicastAddDevice = nullptr;
  decltype(&::cuMulticastBindMem) multicastBindMem = nullptr;
  decltype(&::cuMulticastUnbind) multicastUnbind = nullptr;
  decltype(&::cuMemGetAllocationGranularity) memGetAllocationGranularity = nullptr;
  decltype(&::cuMemCreate) memCreate = nullptr;
  decltype(&::cuMemRelease) memRelease = nullptr;
  decltype(&::cuMemExportToShareableHandle) memExportToShareableHandle = nullptr;
  decltype(&::cuMemImportFromShareableHandle) memImportFromShareableHandle = nullptr;
  decltype(&::cuMemAddressReserve) memAddressReserve = nullptr;
  decltype(&::cuMemAddressFree) memAddressFree = nullptr;
  decltype(&::cuMemMap) memMap = nullptr;
  decltype(&::cuMemUnmap) memUnmap = nullptr;
  decltype(&::cuMemSetAccess) memSetAccess = nullptr;

  const char* errorText(CUresult r) const {
    const char* s = nullptr;
    if (getErrorString && getErrorString(r, &s) == CUDA_SUCCESS && s) return s;
    return "unknown driver error";
  }
};

namespace {

void* defaultSymbolLoader(const char* symbol) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
  // The ABI of CUDA 12.1, where the multicast API appeared.
  cudaError_t e = cudaGetDriverEntryPointByVersion(symbol, &fn, 12010, cudaEnableDefault, &found);
#else
  cudaError_t e = cudaGetDriverEntryPoint(symbol, &fn, cudaEnableDefault, &found);
#endif
  if (e != cudaSuccess || found != cudaDriverEntryPointSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return fn;
}

Status resolveDriver(MulticastDriver* d) {
  MulticastSymbolLoader loader = gLoader.load();
  if (!loader) loader = defaultSymbolLoader;
  const char* missing = nullptr;
  auto get = [&](auto* slot, const char* name) {
    *slot = reinterpret_cast<std::remove_pointer_t<decltype(slot)>>(loader(name));
    if (!*slot && !missing) missing = name;
  };
  get(&d->getErrorString, "cuGetErrorString");
  get(&d->deviceGet, "cuDeviceGet");
  get(&d->deviceGetAttribute, "cuDeviceGetAttribute");
  get(&d->multicastGetGranularity, "cuMulticastGetGranularity");
  get(&d->multicastCreate, "cuMulticastCreate");
  get(&d->multicastAddDevice, "cuMulticastAddDevice");
  get(&d->multicastBindMem, "cuMulticastBindMem");
  get(&d->multicastUnbind, "cuMulticastUnbind");
  get(&d->memGetAllocationGranularity, "cuMemGetAllocationGranularity");
  get(&d->memCreate, "cuMemCreate");
  get(&d->memRelease, "cuMemRelease");
  get(&d->memExportToShareableHandle, "cuMemExportToShareableHandle");
  get(&d->memImportFromShareableHandle, "cuMemImportFromShareableHandle");
  get(&d->memAddressReserve, "cuMemAddressReserve");
  get(&d->memAddressFree, "cuMemAddressFree");
  get(&d->memMap, "cuMemMap");
  get(&d->memUnmap, "cuMemUnmap");
  get(&d->memSetAccess, "cuMemSetAccess");
  if (missing) return TPCOMM_ERROR(kNotSupported, "multicast: the CUDA driver does not provide %s", missing);
  return Status::kOk;
}

// Defence in depth: the environment switches, read live (not only the cached params) right
// before a multicast driver call.
Status gateStillOpen(const char* call) {
  // Read live (not the cached params) and failing closed: any value of either switch that is not
  // clearly "on" keeps multicast off (topology.h, multicastDisabledBy).
  std::string why;
  if (multicastDisabledBy(std::getenv("NCCL_NVLS_ENABLE"), std::getenv("TPCOMM_MULTICAST"), &why))
    return TPCOMM_ERROR(kNotSupported, "multicast: not calling %s: %s", call, why.c_str());
  return Status::kOk;
}

#define MC_CU(d, call)                                                                                      \
  do {                                                                                                      \
    CUresult r_ = (call);                                                                                   \
    if (r_ != CUDA_SUCCESS) return TPCOMM_ERROR(kCudaError, "multicast: %s: %s", #call, (d).errorText(r_)); \
  } while (0)

// What each rank reports after a step: ok, a few numbers, and its error message.
struct StepReport {
  int32_t ok;
  int32_t pid, fd, maxBlocks;
  uint64_t value, dataBytes;
  char why[200];
};

}  // namespace

// The set-up steps, with access to the transport's private state.
struct MulticastSetup {
  const TransportEnv& ctx;
  MulticastTransport::Sizes sizes;
  MulticastTransport& t;
  MulticastDriver& d;
  CUmulticastObjectProp mcProp{};
  CUmemAllocationProp memProp{};
  bool crossProcess = false;
  size_t granularity = 0;  ///< allocation and VA alignment agreed by every rank

  // Gathers every rank's report for a step; kOk only when every rank's `mine` was kOk.
  Status agree(Status mine, StepReport rep, const char* step, std::vector<StepReport>* all) {
    rep.ok = mine == Status::kOk;
    if (!rep.ok) std::snprintf(rep.why, sizeof(rep.why), "%s", lastErrorMessage());
    all->assign(ctx.nRanks, StepReport{});
    TPCOMM_TRY(ctx.bootstrap->allGather(&rep, all->data(), sizeof(StepReport)));
    for (int r = 0; r < ctx.nRanks; ++r)
      if (!(*all)[r].ok)
        return TPCOMM_ERROR(kNotSupported, "multicast: %s failed on rank %d: %.200s", step, r, (*all)[r].why);
    return Status::kOk;
  }

  Status prepare(size_t* granularity) {
    if (ctx.nRanks > kMaxMulticastRanks)
      return TPCOMM_ERROR(kNotSupported, "multicast: %d ranks exceed %d", ctx.nRanks, kMaxMulticastRanks);
    if (ctx.topo.ranks[ctx.rank].ccMajor < 9) return TPCOMM_ERROR(kNotSupported, "multicast: needs sm_90 or newer");
    TPCOMM_TRY(resolveDriver(&d));
    CUdevice dev = 0;
    MC_CU(d, d.deviceGet(&dev, ctx.device));
    int supported = 0;
    MC_CU(d, d.deviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, dev));
    if (!supported)
      return TPCOMM_ERROR(kNotSupported, "multicast: device %d does not report multicast support", ctx.device);
    mcProp.numDevices = static_cast<unsigned int>(ctx.nRanks);
    mcProp.size = 1;
    mcProp.handleTypes = crossProcess ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
    size_t mcGran = 0, ucGran = 0;
    MC_CU(d, d.multicastGetGranularity(&mcGran, &mcProp, CU_MULTICAST_GRANULARITY_MINIMUM));
    memProp.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    memProp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    memProp.location.id = ctx.device;
    memProp.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
    MC_CU(d, d.memGetAllocationGranularity(&ucGran, &memProp, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    *granularity = std::max<size_t>({mcGran, ucGran, 4096});
    return Status::kOk;
  }

  // Rank 0: the object (and its exported fd across processes).
  Status createObject(int* fd) {
    TPCOMM_TRY(gateStillOpen("cuMulticastCreate"));
    mcProp.size = t.layout_.totalBytes;
    CUmemGenericAllocationHandle h = 0;
    MC_CU(d, d.multicastCreate(&h, &mcProp));
    t.mcHandle_ = h;
    t.haveMc_ = true;
    if (crossProcess) {
      int exported = -1;
      MC_CU(d, d.memExportToShareableHandle(&exported, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
      *fd = exported;
    }
    return Status::kOk;
  }

  // Ranks other than 0: take the object; every rank: add its device.
  Status join(const StepReport& offer) {
    if (ctx.rank != 0) {
      if (crossProcess) {
        int pidfd = static_cast<int>(syscall(SYS_pidfd_open, offer.pid, 0));
        if (pidfd < 0)
          return TPCOMM_ERROR(kNotSupported, "multicast: pidfd_open(%d): %s", offer.pid, std::strerror(errno));
        int fd = static_cast<int>(syscall(SYS_pidfd_getfd, pidfd, offer.fd, 0));
        int err = errno;
        close(pidfd);
        if (fd < 0)
          return TPCOMM_ERROR(kNotSupported, "multicast: pidfd_getfd from rank 0 (pid %d): %s (ptrace permission?)",
                              offer.pid, std::strerror(err));
        Status s = gateStillOpen("cuMemImportFromShareableHandle");
        CUmemGenericAllocationHandle h = 0;
        CUresult r = CUDA_SUCCESS;
        if (s == Status::kOk)
          r = d.memImportFromShareableHandle(&h, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)),
                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        close(fd);
        TPCOMM_TRY(s);
        if (r != CUDA_SUCCESS)
          return TPCOMM_ERROR(kCudaError, "multicast: cuMemImportFromShareableHandle: %s", d.errorText(r));
        t.mcHandle_ = h;
      } else {
        t.mcHandle_ = offer.value;  // one process: the handle is valid in every thread
      }
      t.haveMc_ = crossProcess;  // a shared in-process handle is released by rank 0 only
    }
    CUdevice dev = 0;
    MC_CU(d, d.deviceGet(&dev, ctx.device));
    TPCOMM_TRY(gateStillOpen("cuMulticastAddDevice"));
    MC_CU(d, d.multicastAddDevice(t.mcHandle_, dev));
    return Status::kOk;
  }

  // Every rank: its memory, bound into the object, mapped twice, counters zeroed.
  Status bindAndMap() {
    const size_t size = t.layout_.totalBytes;
    CUmemGenericAllocationHandle mem = 0;
    MC_CU(d, d.memCreate(&mem, size, &memProp, 0));
    t.memHandle_ = mem;
    t.haveMem_ = true;
    TPCOMM_TRY(gateStillOpen("cuMulticastBindMem"));
    MC_CU(d, d.multicastBindMem(t.mcHandle_, 0, mem, 0, size, 0));
    t.bound_ = true;
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = ctx.device;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CUdeviceptr uc = 0, mc = 0;
    MC_CU(d, d.memAddressReserve(&uc, size, granularity, 0, 0));
    t.ucAddr_ = static_cast<uintptr_t>(uc);
    t.ucReserved_ = true;
    MC_CU(d, d.memMap(uc, size, 0, mem, 0));
    t.ucMapped_ = true;
    MC_CU(d, d.memSetAccess(uc, size, &access, 1));
    MC_CU(d, d.memAddressReserve(&mc, size, granularity, 0, 0));
    t.mcAddr_ = static_cast<uintptr_t>(mc);
    t.mcReserved_ = true;
    TPCOMM_TRY(gateStillOpen("cuMemMap of the multicast handle"));
    MC_CU(d, d.memMap(mc, size, 0, t.mcHandle_, 0));
    t.mcMapped_ = true;
    MC_CU(d, d.memSetAccess(mc, size, &access, 1));
    // Counters and epochs start at 0 on every rank before any rank's first kernel (the agree
    // that follows this step orders it).
    TPCOMM_CUDA_TRY(cudaMemset(t.unicast(), 0, t.layout_.dataOffset));  // zero the counters
    TPCOMM_CUDA_TRY(cudaDeviceSynchronize());
    return Status::kOk;
  }

  Status run() {
    crossProcess = !ctx.topo.singleProcess();
    std::vector<StepReport> all;
    StepReport rep{};
    Status s = prepare(&granularity);
    rep.value = granularity;
    rep.maxBlocks = static_cast<int32_t>(sizes.maxBlocks);
    rep.dataBytes = static_cast<uint64_t>(sizes.dataBytes);
    TPCOMM_TRY(agree(s, rep, "driver check", &all));
    // One layout everywhere: rank 0's geometry, the coarsest granularity.
    for (const StepReport& r : all) granularity = std::max<size_t>(granularity, r.value);
    int maxBlocks = all[0].maxBlocks;
    if (maxBlocks < 1 || maxBlocks > 1024) return TPCOMM_INVALID("multicast: TPCOMM_TWOSHOT_BLOCKS must be 1..1024");
    t.layout_ = MulticastLayout::make(ctx.nRanks, maxBlocks, all[0].dataBytes, granularity);

    rep = StepReport{};
    rep.pid = static_cast<int32_t>(getpid());
    rep.fd = -1;
    s = ctx.rank == 0 ? createObject(&rep.fd) : Status::kOk;
    rep.value = t.mcHandle_;
    Status created = agree(s, rep, "cuMulticastCreate", &all);
    const StepReport offer = all.empty() ? StepReport{} : all[0];
    if (created != Status::kOk) {
      if (ctx.rank == 0 && rep.fd >= 0) close(rep.fd);
      return created;
    }
    s = join(offer);
    Status joined = agree(s, StepReport{}, "cuMulticastAddDevice", &all);
    if (ctx.rank == 0 && rep.fd >= 0) close(rep.fd);  // every rank has its own duplicate now
    TPCOMM_TRY(joined);
    s = bindAndMap();
    TPCOMM_TRY(agree(s, StepReport{}, "cuMulticastBindMem / map", &all));
    return Status::kOk;
  }
};

Status MulticastTransport::create(const TransportEnv& ctx, const Sizes& sizes, std::unique_ptr<MulticastTransport>* out) {
  // The gate, before anything: no driver symbol is resolved and no peer is contacted unless it
  // is open (every rank agreed it before calling, see multicast.h).
  std::string why;
  if (!ctx.topo.multicastUsable(&why)) return TPCOMM_ERROR(kNotSupported, "multicast: gate closed: %s", why.c_str());
  if (ctx.device < 0 || !ctx.bootstrap)
    return TPCOMM_ERROR(kNotSupported, "multicast: needs a GPU rank and a bootstrap");
  std::unique_ptr<MulticastTransport> t(new MulticastTransport());
  t->driver_.reset(new MulticastDriver());
  t->rank_ = ctx.rank;
  t->nRanks_ = ctx.nRanks;
  t->device_ = ctx.device;
  MulticastSetup setup{ctx, sizes, *t, *t->driver_};
  TPCOMM_TRY(setup.run());
  TPCOMM_INFO(kInit, "multicast: rank %d bound %zu bytes into a %d-rank multicast object (%s)", ctx.rank,
              t->layout_.totalBytes, ctx.nRanks, setup.crossProcess ? "fd via pidfd_getfd" : "one process");
  *out = std::move(t);
  return Status::kOk;
}

MulticastTransport::~MulticastTransport() {
  if (!driver_ || device_ < 0) return;
  const MulticastDriver& d = *driver_;
  int prev = -1;
  if (cudaGetDevice(&prev) != cudaSuccess) prev = -1;
  cudaSetDevice(device_);
  const size_t size = layout_.totalBytes;
  if (mcMapped_) d.memUnmap(static_cast<CUdeviceptr>(mcAddr_), size);
  if (mcReserved_) d.memAddressFree(static_cast<CUdeviceptr>(mcAddr_), size);
  if (ucMapped_) d.memUnmap(static_cast<CUdeviceptr>(ucAddr_), size);
  if (ucReserved_) d.memAddressFree(static_cast<CUdeviceptr>(ucAddr_), size);
  if (bound_) {
    CUdevice dev = 0;
    if (d.deviceGet(&dev, device_) == CUDA_SUCCESS) d.multicastUnbind(mcHandle_, dev, 0, size);
  }
  if (haveMem_) d.memRelease(memHandle_);
  if (haveMc_) d.memRelease(mcHandle_);
  cudaGetLastError();
  if (prev >= 0) cudaSetDevice(prev);
}

#else  // !TPCOMM_HAVE_CUDA

struct MulticastDriver {};

Status MulticastTransport::create(const TransportEnv& ctx, const Sizes&, std::unique_ptr<MulticastTransport>*) {
  std::string why;
  if (!ctx.topo.multicastUsable(&why)) return TPCOMM_ERROR(kNotSupported, "multicast: gate closed: %s", why.c_str());
  return TPCOMM_ERROR(kNotSupported, "multicast: tpcomm was built without CUDA");
}
MulticastTransport::~MulticastTransport() = default;

#endif

}  // namespace tpcomm
