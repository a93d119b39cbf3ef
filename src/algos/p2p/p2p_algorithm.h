// Common base of the algorithms that run over the cuda_p2p transport (oneshot_p2p, twoshot_p2p,
// lamport_p2p, ll_p2p, twoshot_p2p+fp8/int8): availability, the shared support rules (GPU ranks
// of one node with verified P2P, all-reduce; reduce-scatter and all-gather where the subclass
// runs them), what it asks of the transport (needs(): the region its scratch() declares), the one
// place their kernel parameters are filled (launchParams: the region the transport placed under
// the request's key), and the fused all-reduce + residual + RMSNorm entry point. A subclass names
// itself, its scratch, its size limit, its grid and its two launchers.
#pragma once

#include "algos/common/algorithm.h"
#include "algos/p2p/p2p_launch.h"

namespace tpcomm {

class P2pAlgorithm : public Algorithm {
 public:
  P2pAlgorithm(const AlgoContext* ctx, const char* name, const char* fusedName);
  const char* name() const override { return name_; }
  const char* fusedName() const override { return fusedName_; }
  const char* transport() const override { return "cuda_p2p"; }
  TransportNeeds needs(int nRanks) const override;
  bool available() const override;
  bool supports(const Topology& topo, const AlgoQuery& q, std::string* whyNot) const override;
  bool launchesOnly() const override { return true; }
  bool deterministic() const override { return true; }  // fp32 in rank order, per element
  Status run(const CollArgs& args) override;
  Status runFusedNorm(const CollArgs& args, const NormArgs& norm) override;

 protected:
  /// Whether it also runs reduce-scatter and all-gather (launchPlain then gets P2pLaunch::kind).
  virtual bool runsHalves() const { return false; }
  /// Its region of every rank's cuda_p2p buffer for nRanks ranks (what needs() asks for; sized
  /// by the parameters sizedBy() names). Algorithms that share scratch ask under one key.
  virtual P2pScratchRequest scratch(int nRanks) const = 0;
  /// Largest message in bytes (0: no limit), from the transport's layout or the params table.
  virtual size_t maxBytes() const = 0;
  /// Grid of both kernels (they share per-block epochs): one of ctx->launch's block counts.
  virtual int blocks() const = 0;
  virtual Status launchPlain(const P2pLaunch& p, cudaStream_t stream) = 0;
  /// May fill the fused launch's algorithm-specific fields (two-shot's row geometry) first.
  virtual Status launchFused(FusedP2pLaunch& f, cudaStream_t stream) = 0;
  /// kNotSupported when the message exceeds maxBytes().
  Status checkSize(const CollArgs& a) const;
  /// Its region as the transport placed it; nullptr while there is no transport (or no region).
  const P2pRegion* region() const;
  const AlgoContext* ctx_;

 private:
  /// Launch parameters for `a` with `blocks` blocks.
  P2pLaunch launchParams(const CollArgs& a, int blocks) const;
  /// maxBytes() read once per communicator (see p2p_algorithm.cc for why that is safe).
  size_t cachedMaxBytes() const;
  const char* name_;
  const char* fusedName_;
  mutable size_t maxBytes_ = 0;
  mutable bool maxBytesRead_ = false;
  mutable const P2pRegion* region_ = nullptr;
  /// The call-independent part of launchParams(), built on the first launch.
  mutable P2pLaunch launchBase_{};
  mutable bool launchBaseReady_ = false;
};

}  // namespace tpcomm
