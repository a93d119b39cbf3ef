// An algorithm is one schedule over one transport (oneshot_p2p, staged_host, ring_nccl...).
// Everything about one algorithm is declared by its class: which transport it runs over and what
// it asks of it (needs(): the communicator sizes the transports from every algorithm's answer,
// without knowing who asked), whether it can run a call (supports, pure), its kernels' preload,
// its set-up once the transports are up, run, and, where it has one, a fused all-reduce +
// residual + RMSNorm. What a call costs is not here: every cost is in one table,
// src/collectives/cost_model.cc. The one list of algorithms is src/collectives/registry.cc.
#pragma once

#include <string>
#include <vector>

#include "algos/common/algo_context.h"
#include "algos/common/coll_args.h"
#include "common/params.h"
#include "topology/topology.h"
#include "tpcomm/status.h"
#include "transports/cuda_p2p.h"
#include "transports/multicast.h"

namespace tpcomm {

/// The norm that follows the all-reduce in allReduceResidualRmsNorm (arithmetic:
/// algos/fused/fused_rmsnorm.h). The all-reduce's CollArgs carry in (send), out (recv) and the dtype.
struct NormArgs {
  void* residual = nullptr;
  const void* weight = nullptr;
  float eps = 0;
  size_t rows = 0, hidden = 0;
};

/// What an algorithm asks of the transports for a communicator of a given size. Create hands
/// every algorithm's requests to the transports before they come up (bring_up.cc).
struct TransportNeeds {
  std::vector<P2pScratchRequest> p2p;   ///< regions of every rank's cuda_p2p buffer
  MulticastTransport::Sizes multicast;  ///< the multicast allocation (zero: none)
};

class Algorithm {
 public:
  virtual ~Algorithm() = default;
  /// "<schedule>_<transport>", e.g. "twoshot_p2p".
  virtual const char* name() const = 0;
  /// The transport it runs over, as the INFO table names it ("cuda_p2p", "host_staged", "nccl",
  /// "multicast"; "" for none), so create can say why it is unavailable.
  virtual const char* transport() const = 0;
  /// What it asks of the transports for nRanks ranks. Default: nothing beyond the transport.
  virtual TransportNeeds needs(int nRanks) const {
    (void)nRanks;
    return {};
  }
  /// The parameters needs() depends on. Ranks that differ in one would address each other's
  /// scratch at different offsets, so create compares them on every rank and fails naming the
  /// parameter. Called on selection-only instances (no context).
  virtual std::vector<ParamId> sizedBy() const { return {}; }
  /// Whether this algorithm can run the call on this topology. Pure. `whyNot` gets a reason.
  virtual bool supports(const Topology& topo, const AlgoQuery& q, std::string* whyNot) const = 0;
  /// Whether the transport it needs came up in this communicator (true in selection-only lists
  /// built without a context).
  virtual bool available() const = 0;
  /// Loads its kernels into the current device's context (at create, before any launch: see
  /// dev::preload in algos/common/launch.cuh). Default: nothing to load.
  virtual Status preload() { return Status::kOk; }
  /// Runs once after the transports are up, before create returns on any rank (so before any
  /// peer can launch into this rank's memory). Default: nothing.
  virtual Status setUp() { return Status::kOk; }
  /// Runs the call. Stream-ordered on GPU ranks. kNotSupported makes the caller try the next
  /// candidate (e.g. message larger than a scratch buffer). It must be returned only for reasons
  /// that are the same on every rank (sizes, dtypes), never for rank-local ones such as one
  /// rank's pointer alignment: otherwise ranks run different algorithms and wait for each other
  /// until the timeout.
  virtual Status run(const CollArgs& args) = 0;
  /// The all-reduce (sum) of `args` and the residual add + RMSNorm of `norm` in one kernel.
  /// kNotSupported (the default) makes the communicator run run() and then the separate norm;
  /// the same rule as run(): refuse only for reasons every rank shares.
  virtual Status runFusedNorm(const CollArgs& args, const NormArgs& norm) {
    (void)args;
    (void)norm;
    return Status::kNotSupported;
  }
  /// The name lastAlgorithm() reports after runFusedNorm() ran ("fused_<name>").
  virtual const char* fusedName() const { return name(); }
  /// Whether it keeps the determinism contract (docs/determinism.md): element i of the result
  /// is the fp32 reduction of the ranks' element i in rank order (the zero rule applied), the
  /// same bits whatever the size, offset, grid, chunking or graph. Default: no.
  virtual bool deterministic() const { return false; }
  /// The wire format it compresses to (kNone: full precision). The selector offers an algorithm
  /// that compresses only to communicators whose compression (Config::compression /
  /// TPCOMM_COMPRESSION) is that format.
  virtual Compression compression() const { return Compression::kNone; }
  /// Whether run() inside Communicator::groupStart/groupEnd only queues work that is launched at
  /// the outermost groupEnd (NCCL's group semantics): a norm that follows must wait until then.
  virtual bool deferredInGroup() const { return false; }
  /// Whether run() refuses only by call shape (kNotSupported, before any CUDA call) and otherwise
  /// enqueues one kernel whose launch fails on an invalid stream: the communicator then need not
  /// query the stream's capture status before running it (collectives/call_path.cc).
  virtual bool launchesOnly() const { return false; }
};

/// What every algorithm class starts with: the context it runs with (nullptr: a selection-only
/// instance), its name and its transport, and availability from that transport.
class AlgorithmBase : public Algorithm {
 public:
  AlgorithmBase(const AlgoContext* ctx, const char* name, const char* transport)
      : ctx_(ctx), name_(name), transport_(transport) {}
  const char* name() const override { return name_; }
  const char* transport() const override { return transport_; }
  bool available() const override { return !ctx_ || ctx_->hasTransport(transport_); }

 protected:
  const AlgoContext* ctx_;

 private:
  const char* name_;
  const char* transport_;
};

}  // namespace tpcomm
