// copy_local: the collectives of a one-rank communicator. With one rank, all-reduce and
// reduce-scatter return the rank's own input read by the determinism contract's rule (x + 0 in
// fp32, rounded once: a -0.0 comes out +0.0, as on every other size; docs/determinism.md), and
// all-gather returns the input's bits. On host ranks that is hostReduce over one source
// (in place too); on GPU ranks one pass of a small kernel (copy_local.cu) for the reductions and
// one copy for all-gather, on the stream (a kernel or memcpy node in a CUDA graph). No transport
// and no peer: the path TP=1 engines and one-GPU tests take, capturable even where NCCL is
// absent (the Python wheel) and staged_host is not.
#include <cstring>
#include <memory>

#ifdef TPCOMM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "algos/common/algorithm.h"
#include "algos/host/host_reduce.h"
#include "algos/local/copy_local.h"
#include "common/error.h"

namespace tpcomm {

namespace {

class CopyLocal final : public AlgorithmBase {
 public:
  explicit CopyLocal(const AlgoContext* ctx) : AlgorithmBase(ctx, "copy_local", "") {}  // no transport: a copy
  bool deterministic() const override { return true; }  // one rank: the input itself

  bool supports(const Topology& topo, const AlgoQuery&, std::string* whyNot) const override {
    if (topo.nRanks() == 1) return true;
    if (whyNot) *whyNot = "one rank only";
    return false;
  }

  Status preload() override { return TPCOMM_CUDA_ONLY(preloadZeroRuleCopy()); }

  Status run(const CollArgs& a) override {
    if (!ctx_) return TPCOMM_ERROR(kInternal, "copy_local: selection-only instance");
    const bool reduction = a.kind != CollKind::kAllGather;
    if (!reduction && a.send == a.recv) return Status::kOk;
    if (ctx_->device < 0) {
      if (reduction)
        hostReduce(a.recv, &a.send, 1, a.count, a.dtype, a.op);
      else
        std::memcpy(a.recv, a.send, a.bytes());
      return Status::kOk;
    }
#ifdef TPCOMM_HAVE_CUDA
    if (reduction) return launchZeroRuleCopy(a.send, a.recv, a.count, a.dtype, a.stream);
    TPCOMM_CUDA_TRY(cudaMemcpyAsync(a.recv, a.send, a.bytes(), cudaMemcpyDefault, a.stream));
    return Status::kOk;
#else
    return builtWithoutCuda("copy_local", __FILE__, __LINE__);
#endif
  }
};

}  // namespace

std::unique_ptr<Algorithm> makeCopyLocal(const AlgoContext* ctx) { return std::make_unique<CopyLocal>(ctx); }

}  // namespace tpcomm
