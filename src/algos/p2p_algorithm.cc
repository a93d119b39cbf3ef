#include "algos/p2p_algorithm.h"

#include <cstdint>
#include <cstring>

#include "collectives/comm_context.h"
#include "common/error.h"
#include "common/params.h"

namespace tpcomm {

P2pAlgorithm::P2pAlgorithm(CommContext* ctx)
    : ctx_(ctx),
      p2pBlocks_(static_cast<int>(paramInt(ParamId::kP2pBlocks))),
      twoshotBlocks_(static_cast<int>(paramInt(ParamId::kTwoshotBlocks))) {
  // Programmatic dependent launch needs sm_90+; the kernels' griddepcontrol is a no-op below.
  pdl_ = ctx && ctx->topo.ranks[ctx->rank].ccMajor >= 9 && paramInt(ParamId::kPdl) != 0;
}

bool P2pAlgorithm::available() const { return !ctx_ || ctx_->p2p != nullptr; }

bool P2pAlgorithm::supports(const Topology& topo, const AlgoQuery& q, std::string* whyNot) const {
  const char* why = nullptr;
  if (!topo.allPairsP2p())
    why = "needs verified P2P between every pair of GPU ranks on one node";
  else if (topo.nRanks() < 2 || topo.nRanks() > kMaxP2pRanks)
    why = "needs 2..16 ranks";
  else if (q.kind != CollKind::kAllReduce)
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
    b.rank = t.rank();
    b.nRanks = t.nRanks();
    for (int r = 0; r < t.nRanks(); ++r) b.peers[r] = t.base(r);
    b.layout = t.layout();
    b.errorWord = ctx_->asyncError.deviceWord;
    b.timeoutNs = static_cast<uint64_t>(ctx_->timeoutMs) * 1000000ull;
    b.pdl = pdl_;
    launchBaseReady_ = true;
  }
  P2pLaunch p = launchBase_;
  p.send = a.send;
  p.recv = a.recv;
  p.count = a.count;
  p.dtype = static_cast<int>(a.dtype);
  p.op = static_cast<int>(a.op);
  p.blocks = blocks;
  return p;
}

bool isP2pAlgorithm(const Algorithm* a) { return dynamic_cast<const P2pAlgorithm*>(a) != nullptr; }

#ifndef TPCOMM_HAVE_CUDA
Status launchOneshot(const P2pLaunch&, cudaStream_t) { return TPCOMM_ERROR(kNotSupported, "built without CUDA"); }
Status launchTwoshot(const P2pLaunch&, cudaStream_t) { return TPCOMM_ERROR(kNotSupported, "built without CUDA"); }
Status launchLamport(const P2pLaunch&, cudaStream_t) { return TPCOMM_ERROR(kNotSupported, "built without CUDA"); }
Status launchLamportFill(char*, size_t, cudaStream_t) { return TPCOMM_ERROR(kNotSupported, "built without CUDA"); }
#endif

}  // namespace tpcomm
