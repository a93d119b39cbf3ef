#include "algos/p2p/p2p_algorithm.h"

#include <cstdint>

#include "algos/common/call_signature.h"
#include "common/error.h"
#include "transports/host_staged.h"

namespace tpcomm {

P2pAlgorithm::P2pAlgorithm(const AlgoContext* ctx, const char* name, const char* fusedName, const P2pKernels* kernels)
    : AlgorithmBase(ctx, name, "cuda_p2p"), fusedName_(fusedName), kernels_(kernels) {}

Status P2pAlgorithm::preload() { return kernels_ ? kernels_->preload() : builtWithoutCuda(name(), __FILE__, __LINE__); }

TransportNeeds P2pAlgorithm::needs(int nRanks) const {
  TransportNeeds n;
  n.p2p.push_back(scratch(nRanks));
  return n;
}

// Read once: the grid is fixed from create (LaunchSettings), and run() needs it per call.
int P2pAlgorithm::blocks() const {
  if (blocks_ == 0) blocks_ = scratch(ctx_->nRanks).blocks;
  return blocks_;
}

// Looked up once: the transport and its regions live as long as the algorithm.
const P2pRegion* P2pAlgorithm::region() const {
  if (!region_ && ctx_ && ctx_->p2p) region_ = ctx_->p2p->region(scratch(ctx_->nRanks).key);
  return region_;
}

bool P2pAlgorithm::supports(const Topology& topo, const AlgoQuery& q, std::string* whyNot) const {
  const char* why = nullptr;
  if (!topo.allPairsP2p())
    why = "needs verified P2P between every pair of GPU ranks on one node";
  else if (topo.nRanks() < 2 || topo.nRanks() > kMaxP2pRanks)
    why = "needs 2..16 ranks";
  else if (q.kind != CollKind::kAllReduce && !runsHalves())
    why = "all-reduce only";
  else if (size_t cap = ctx_ ? cachedMaxBytes() : maxBytes(); cap != 0 && q.bytes > cap)
    why = "message larger than this algorithm's scratch";
  if (why && whyNot) *whyNot = why;
  return why == nullptr;
}

// Cached: maxBytes() reads the params table (a mutex and a parse) and checkSize() runs per call.
// Safe: the scratch it bounds was sized from the same parameter when the transport was created,
// before any call, so the first value read is the one the layout holds; a later change of the
// environment (reloadParams(), tests only) could not grow the scratch anyway.
size_t P2pAlgorithm::cachedMaxBytes() const {
  if (!maxBytesRead_) {
    maxBytes_ = maxBytes();
    maxBytesRead_ = true;
  }
  return maxBytes_;
}

Status P2pAlgorithm::checkSize(const CollArgs& a) const {
  if (!ctx_ || !ctx_->p2p) return TPCOMM_ERROR(kInternal, "%s: no cuda_p2p transport", name());
  if (!region()) return TPCOMM_ERROR(kInternal, "%s: the cuda_p2p transport holds no region for it", name());
  const size_t cap = cachedMaxBytes();
  if (cap != 0 && a.bytes() > cap)
    return TPCOMM_ERROR(kNotSupported, "%s: %zu bytes exceed its %zu-byte scratch", name(), a.bytes(), cap);
  return Status::kOk;
}

P2pLaunch P2pAlgorithm::launchParams(const CollArgs& a, int blocks) const {
  // Cached: ranks, peer bases, layout, error word, timeout and PDL are fixed from create (the
  // transport and the error word live until destroy(), which drops the algorithms first), so
  // only the call's own fields are written per call.
  if (!launchBaseReady_) {
    const CudaP2pTransport& t = *ctx_->p2p;
    P2pLaunch& b = launchBase_;
    b = P2pLaunch{};
    for (int r = 0; r < t.nRanks(); ++r) b.peers[r] = t.base(r);
    b.layout = t.layout();
    b.region = *region();
    b.errorWord = ctx_->asyncError.deviceWord;
    b.timeoutNs = ctx_->timeoutNs();
    b.pdl = ctx_->launch.pdl;
    b.hostCalls = ctx_->hostStaged ? ctx_->hostStaged->callCounters() : nullptr;
    launchBaseReady_ = true;
  }
  P2pLaunch p = launchBase_;
  static_cast<CallParams&>(p) = callParams(a, ctx_->p2p->rank(), ctx_->p2p->nRanks());
  p.callNumber = p.hostCalls ? a.callNumber : 0;
  p.blocks = blocks;
  p.signature = ctx_->launch.checkCalls ? callSignature(a, false, compression()) : 0;
  p.kind = static_cast<int>(a.kind);
  return p;
}

Status P2pAlgorithm::run(const CollArgs& a) {
  TPCOMM_TRY(checkSize(a));
  if (!kernels_) return builtWithoutCuda(name(), __FILE__, __LINE__);
  return kernels_->launch(launchParams(a, blocks()), a.stream);
}

// The fused kernels give whole rows to blocks, so with many rows per block the row work queues
// inside each block, while the plain all-reduce spreads over every block and the norm kernel
// runs one block per row: the fused kernel runs only while blocks >= TPCOMM_FUSED_BLOCKS_PER_ROW
// x rows (0: always; measurements in docs/fused_rmsnorm.md). The rule depends on the call's
// shape only, so every rank takes the same path.
Status P2pAlgorithm::runFusedNorm(const CollArgs& a, const NormArgs& norm) {
  if (!kernels_ || !kernels_->launchFused) return Status::kNotSupported;  // the all-reduce, then the norm kernel
  TPCOMM_TRY(checkSize(a));
  const int grid = blocks();
  const LaunchSettings& s = ctx_->launch;
  if (s.fusedBlocksPerRow > 0 && norm.rows * static_cast<size_t>(s.fusedBlocksPerRow) > static_cast<size_t>(grid))
    return TPCOMM_ERROR(kNotSupported, "%s: %zu rows exceed %d blocks / TPCOMM_FUSED_BLOCKS_PER_ROW %d", fusedName(),
                        norm.rows, grid, s.fusedBlocksPerRow);
  if (grid < 1 || grid > ctx_->p2p->layout().maxBlocks)
    return TPCOMM_ERROR(kNotSupported, "%s: %d blocks outside the transport's 1..%d", fusedName(), grid,
                        ctx_->p2p->layout().maxBlocks);
  CollArgs sum = a;
  sum.op = ReduceOp::kSum;
  FusedP2pLaunch f{};
  f.p2p = launchParams(sum, grid);
  if (f.p2p.signature) f.p2p.signature = callSignature(sum, true, compression());
  f.residual = norm.residual;
  f.weight = norm.weight;
  f.eps = norm.eps;
  f.rows = norm.rows;
  f.hidden = norm.hidden;
  return kernels_->launchFused(f, a.stream);
}

bool fusedVectorizable(const FusedP2pLaunch& f) {
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const size_t unit = 16 / dataTypeSize(static_cast<DataType>(f.p2p.dtype));
  return f.hidden % unit == 0 && aligned(f.p2p.send) && aligned(f.p2p.recv) && aligned(f.residual) && aligned(f.weight);
}

}  // namespace tpcomm
