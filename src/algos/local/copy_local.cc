// copy_local: the collectives of a one-rank communicator. With one rank, all-reduce,
// reduce-scatter and all-gather all return the rank's own input, so the call is one copy from
// send to recv on the stream (a memcpy node in a CUDA graph), or nothing at all in place. No
// transport and no peer: the path TP=1 engines and one-GPU tests take, capturable even where
// NCCL is absent (the Python wheel) and staged_host is not.
#include <cstring>
#include <memory>

#ifdef TPCOMM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "algos/common/algorithm.h"
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

  Status run(const CollArgs& a) override {
    if (!ctx_) return TPCOMM_ERROR(kInternal, "copy_local: selection-only instance");
    if (a.send == a.recv) return Status::kOk;
    const size_t bytes = a.bytes();
    if (ctx_->device < 0) {
      std::memcpy(a.recv, a.send, bytes);
      return Status::kOk;
    }
#ifdef TPCOMM_HAVE_CUDA
    TPCOMM_CUDA_TRY(cudaMemcpyAsync(a.recv, a.send, bytes, cudaMemcpyDefault, a.stream));
    return Status::kOk;
#else
    return builtWithoutCuda("copy_local", __FILE__, __LINE__);
#endif
  }
};

}  // namespace

std::unique_ptr<Algorithm> makeCopyLocal(const AlgoContext* ctx) { return std::make_unique<CopyLocal>(ctx); }

}  // namespace tpcomm
