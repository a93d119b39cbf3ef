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
  else if (maxBytes() != 0 && q.bytes > maxBytes())
    why = "message larger than this algorithm's scratch";
  if (why && whyNot) *whyNot = why;
  return why == nullptr;
}

Status P2pAlgorithm::checkSize(const CollArgs& a) const {
  if (!ctx_ || !ctx_->p2p) return TPCOMM_ERROR(kInternal, "%s: no cuda_p2p transport", name());
  if (maxBytes() != 0 && a.bytes() > maxBytes())
    return TPCOMM_ERROR(kNotSupported, "%s: %zu bytes exceed its %zu-byte scratch", name(), a.bytes(), maxBytes());
  return Status::kOk;
}

P2pLaunch P2pAlgorithm::launchParams(const CollArgs& a, int blocks) const {
  const CudaP2pTransport& t = *ctx_->p2p;
  P2pLaunch p{};
  p.send = a.send;
  p.recv = a.recv;
  p.count = a.count;
  p.dtype = static_cast<int>(a.dtype);
  p.op = static_cast<int>(a.op);
  p.rank = t.rank();
  p.nRanks = t.nRanks();
  p.blocks = blocks;
  for (int r = 0; r < t.nRanks(); ++r) p.peers[r] = t.base(r);
  p.layout = t.layout();
  p.errorWord = ctx_->asyncError.deviceWord;
  p.timeoutNs = static_cast<uint64_t>(ctx_->timeoutMs) * 1000000ull;
  p.pdl = pdl_;
  return p;
}

#ifndef TPCOMM_HAVE_CUDA
Status launchOneshot(const P2pLaunch&, cudaStream_t) { return TPCOMM_ERROR(kNotSupported, "built without CUDA"); }
Status launchTwoshot(const P2pLaunch&, cudaStream_t) { return TPCOMM_ERROR(kNotSupported, "built without CUDA"); }
Status launchLamport(const P2pLaunch&, cudaStream_t) { return TPCOMM_ERROR(kNotSupported, "built without CUDA"); }
Status launchLamportFill(char*, size_t, cudaStream_t) { return TPCOMM_ERROR(kNotSupported, "built without CUDA"); }
#endif

}  // namespace tpcomm
