#include "transports/cuda_p2p.h"

#include <algorithm>
#include <cstring>

#ifdef TPCOMM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "common/error.h"
#include "common/log.h"

namespace tpcomm {

namespace {
size_t alignUp(size_t v, size_t a) { return (v + a - 1) / a * a; }
}  // namespace

P2pLayout P2pLayout::make(int nRanks, int maxBlocks, size_t lamportBytes, size_t oneshotBytes, size_t twoshotChunk,
                          size_t llBytes) {
  P2pLayout l;
  l.nRanks = nRanks;
  l.maxBlocks = maxBlocks;
  l.lamportBytes = alignUp(lamportBytes, 256);
  l.oneshotBytes = alignUp(oneshotBytes, 256);
  l.twoshotChunk = alignUp(twoshotChunk, 4096);
  // One rank's slice of a chunk, rounded up to whole 16-byte packs plus one spare pack.
  l.twoshotSliceCap = alignUp(l.twoshotChunk / nRanks + 16, 256);
  // ll_p2p: a piece is at most ceil(llBytes / n) bytes, 8 per 16-byte line.
  l.llBytes = llBytes;
  l.llSlotBytes = llBytes == 0 ? 0 : alignUp((llBytes / nRanks + 8) / 8 * 16, 256);
  size_t off = 0;
  l.flagsOffset = off;
  off = alignUp(off + sizeof(uint64_t) * kP2pAlgoCount * nRanks * maxBlocks, 4096);
  l.epochsOffset = off;
  // + 3 words: bytes used per Lamport buffer; then the poison word.
  l.poisonOffset = off + sizeof(uint64_t) * (kP2pAlgoCount * maxBlocks + 3);
  off = alignUp(l.poisonOffset + sizeof(uint64_t), 4096);
  l.signaturesOffset = off;
  off = alignUp(off + sizeof(uint64_t) * kP2pAlgoCount * nRanks * maxBlocks * 3, 4096);
  l.lamportOffset = off;
  off = alignUp(off + 3 * l.lamportBufferBytes(), 4096);
  l.oneshotOffset = off;
  off = alignUp(off + 2 * l.oneshotBufferBytes(), 4096);
  l.twoshotOffset = off;
  off = alignUp(off + 2 * l.twoshotBufferBytes(), 4096);
  l.llOffset = off;
  off = alignUp(off + 2 * l.llBufferBytes(), 4096);
  l.totalBytes = off;
  return l;
}

#ifdef TPCOMM_HAVE_CUDA

Status CudaP2pTransport::create(const TransportEnv& ctx, const Sizes& sizes, std::unique_ptr<CudaP2pTransport>* out) {
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

  if (sizes.maxBlocks < 1 || sizes.maxBlocks > 1024)
    return TPCOMM_INVALID("cuda_p2p: %d blocks: TPCOMM_P2P_BLOCKS / TPCOMM_TWOSHOT_BLOCKS must be 1..1024",
                          sizes.maxBlocks);
  std::unique_ptr<CudaP2pTransport> t(new CudaP2pTransport());
  t->layout_ = P2pLayout::make(ctx.nRanks, sizes.maxBlocks, sizes.lamportBytes, sizes.oneshotBytes, sizes.twoshotChunk,
                                 sizes.llBytes);
  t->rank_ = ctx.rank;
  t->nRanks_ = ctx.nRanks;
  t->device_ = ctx.device;
  t->ipc_ = !topo.singleProcess();
  t->peers_.assign(ctx.nRanks, nullptr);

  // Allocate and zero before anyone maps (flags, epochs, scratch). The synchronize makes the
  // memset complete before the handles go out.
  TPCOMM_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&t->local_), t->layout_.totalBytes));
  TPCOMM_CUDA_TRY(cudaMemset(t->local_, 0, t->layout_.totalBytes));
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
              t->ipc_ ? "CUDA IPC" : "peer access", t->layout_.totalBytes);
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

Status CudaP2pTransport::create(const TransportEnv&, const Sizes&, std::unique_ptr<CudaP2pTransport>*) {
  return TPCOMM_ERROR(kNotSupported, "cuda_p2p: tpcomm was built without CUDA");
}
CudaP2pTransport::~CudaP2pTransport() = default;

#endif

}  // namespace tpcomm
