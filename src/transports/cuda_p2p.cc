#include "transports/cuda_p2p.h"

#include <algorithm>
#include <cstring>
#include <utility>

#ifdef TPCOMM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "common/error.h"
#include "common/log.h"

namespace tpcomm {

const P2pRegion* P2pPlan::find(const std::string& key) const {
  for (size_t i = 0; i < keys.size(); ++i)
    if (keys[i] == key) return &regions[i];
  return nullptr;
}

Status planP2pBuffer(int nRanks, const std::vector<P2pScratchRequest>& asks, P2pPlan* out) {
  P2pPlan plan;
  std::vector<const P2pScratchRequest*> distinct;
  int maxBlocks = 0;
  for (const P2pScratchRequest& a : asks) {
    if (a.blocks < 1 || a.blocks > 1024)
      return TPCOMM_INVALID("cuda_p2p: '%s' asks for %d blocks: 1..1024 (TPCOMM_P2P_BLOCKS / TPCOMM_TWOSHOT_BLOCKS)",
                            a.key.c_str(), a.blocks);
    if (a.buffers < 1) return TPCOMM_INVALID("cuda_p2p: '%s' asks for %d buffers", a.key.c_str(), a.buffers);
    auto same =
        std::find_if(distinct.begin(), distinct.end(), [&](const P2pScratchRequest* d) { return d->key == a.key; });
    if (same == distinct.end()) {
      distinct.push_back(&a);
    } else if (!(**same == a)) {
      return TPCOMM_INVALID("cuda_p2p: two requests for the region '%s' differ", a.key.c_str());
    }
    maxBlocks = std::max(maxBlocks, a.blocks);
  }
  P2pLayout& l = plan.layout;
  l.nRanks = nRanks;
  l.maxBlocks = maxBlocks;
  l.channels = static_cast<int>(distinct.size());
  const size_t slots = static_cast<size_t>(l.channels) * nRanks * maxBlocks;  // per table row kind
  size_t off = 0;
  l.flagsOffset = off;
  off = alignUp(off + sizeof(uint64_t) * slots, 4096);
  l.epochsOffset = off;
  size_t words = static_cast<size_t>(l.channels) * maxBlocks;  // epochs, then the local words
  for (const P2pScratchRequest* a : distinct) {
    P2pRegion r;
    r.channel = static_cast<int>(plan.keys.size());
    r.buffers = a->buffers;
    r.slotBytes = a->slotBytes;
    r.sharedBytes = a->sharedBytes;
    r.bufferBytes = a->slotBytes * nRanks + a->sharedBytes;
    r.wordsOffset = l.epochsOffset + sizeof(uint64_t) * words;
    words += a->localWords;
    plan.keys.push_back(a->key);
    plan.regions.push_back(r);
  }
  l.poisonOffset = l.epochsOffset + sizeof(uint64_t) * words;
  l.arrivalOffset = l.poisonOffset + sizeof(uint64_t);
  off = alignUp(l.arrivalOffset + sizeof(uint64_t), 4096);
  l.signaturesOffset = off;
  off = alignUp(off + sizeof(uint64_t) * slots * 3, 4096);
  for (P2pRegion& r : plan.regions) {
    r.offset = off;
    off = alignUp(off + r.buffers * r.bufferBytes, 4096);
  }
  l.totalBytes = off;
  *out = std::move(plan);
  return Status::kOk;
}

#ifdef TPCOMM_HAVE_CUDA

Status CudaP2pTransport::create(const TransportEnv& ctx, const std::vector<P2pScratchRequest>& asks,
                                std::unique_ptr<CudaP2pTransport>* out) {
  const Topology& topo = ctx.topo;
  if (ctx.device < 0) return TPCOMM_ERROR(kNotSupported, "cuda_p2p: host ranks");
  if (!topo.allPairsP2p()) {
    for (int a = 0; a < topo.nRanks(); ++a)
      for (int b = 0; b < topo.nRanks(); ++b)
        if (a != b && !topo.links[a][b].p2pVerified)
          return TPCOMM_ERROR(kNotSupported, "cuda_p2p: no verified P2P between ranks %d and %d (%s)", a, b,
                              topo.links[a][b].why.c_str());
    return TPCOMM_ERROR(kNotSupported, "cuda_p2p: ranks are not all GPUs on one node");
  }
  if (ctx.nRanks > kMaxP2pRanks)
    return TPCOMM_ERROR(kNotSupported, "cuda_p2p: %d ranks exceed %d", ctx.nRanks, kMaxP2pRanks);
  if (ctx.nRanks < 2) return TPCOMM_ERROR(kNotSupported, "cuda_p2p: one rank needs no peers");

  std::unique_ptr<CudaP2pTransport> t(new CudaP2pTransport());
  TPCOMM_TRY(planP2pBuffer(ctx.nRanks, asks, &t->plan_));
  t->rank_ = ctx.rank;
  t->nRanks_ = ctx.nRanks;
  t->device_ = ctx.device;
  t->ipc_ = !topo.singleProcess();
  t->peers_.assign(ctx.nRanks, nullptr);

  // Allocate and zero before anyone maps (flags, epochs, scratch). The synchronize makes the
  // memset complete before the handles go out.
  TPCOMM_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&t->local_), t->plan_.layout.totalBytes));
  TPCOMM_CUDA_TRY(cudaMemset(t->local_, 0, t->plan_.layout.totalBytes));
  TPCOMM_CUDA_TRY(cudaDeviceSynchronize());
  t->peers_[ctx.rank] = t->local_;

  struct Offer {
    cudaIpcMemHandle_t handle;
    uint64_t pointer;
    int ok;
  } mine{};
  mine.pointer = reinterpret_cast<uint64_t>(t->local_);
  mine.ok = 1;
  if (t->ipc_ && cudaIpcGetMemHandle(&mine.handle, t->local_) != cudaSuccess) {
    cudaGetLastError();
    mine.ok = 0;
  }
  std::vector<Offer> all(ctx.nRanks);
  TPCOMM_TRY(ctx.bootstrap->allGather(&mine, all.data(), sizeof(Offer)));
  for (int r = 0; r < ctx.nRanks; ++r)
    if (!all[r].ok)
      return TPCOMM_ERROR(kNotSupported, "cuda_p2p: rank %d could not export its buffer (cudaIpcGetMemHandle)", r);
  for (int r = 0; r < ctx.nRanks; ++r) {
    if (r == ctx.rank) continue;
    if (t->ipc_) {
      void* p = nullptr;
      TPCOMM_CUDA_TRY(cudaIpcOpenMemHandle(&p, all[r].handle, cudaIpcMemLazyEnablePeerAccess));
      t->peers_[r] = static_cast<char*>(p);
    } else {
      int peerDev = topo.ranks[r].cudaDevice;
      cudaError_t e = peerDev == ctx.device ? cudaSuccess : cudaDeviceEnablePeerAccess(peerDev, 0);
      if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) {
        cudaGetLastError();
        return TPCOMM_ERROR(kNotSupported, "cuda_p2p: cudaDeviceEnablePeerAccess(%d -> %d): %s", ctx.device, peerDev,
                            cudaGetErrorString(e));
      }
      cudaGetLastError();
      t->peers_[r] = reinterpret_cast<char*>(all[r].pointer);
    }
  }
  TPCOMM_INFO(kInit, "cuda_p2p: rank %d mapped %d peers via %s, %zu bytes per rank", ctx.rank, ctx.nRanks - 1,
              t->ipc_ ? "CUDA IPC" : "peer access", t->plan_.layout.totalBytes);
  *out = std::move(t);
  return Status::kOk;
}

CudaP2pTransport::~CudaP2pTransport() {
  if (device_ < 0) return;
  int prev = -1;
  cudaGetDevice(&prev);
  cudaSetDevice(device_);
  for (int r = 0; r < nRanks_; ++r)
    if (r != rank_ && peers_[r] && ipc_) cudaIpcCloseMemHandle(peers_[r]);
  if (local_) cudaFree(local_);
  cudaGetLastError();
  if (prev >= 0) cudaSetDevice(prev);
}

#else

Status CudaP2pTransport::create(const TransportEnv&, const std::vector<P2pScratchRequest>&,
                                std::unique_ptr<CudaP2pTransport>*) {
  return TPCOMM_ERROR(kNotSupported, "cuda_p2p: tpcomm was built without CUDA");
}
CudaP2pTransport::~CudaP2pTransport() = default;

#endif

}  // namespace tpcomm
