// Common base of the algorithms that run over the cuda_p2p transport (oneshot_p2p, twoshot_p2p,
// lamport_p2p, ll_p2p, twoshot_p2p+fp8/int8): availability, the shared support rules (GPU ranks
// of one node with verified P2P, all-reduce; reduce-scatter and all-gather where the subclass
// runs them), what it asks of the transport (needs(): the region its scratch() declares), the one
// place their kernel parameters are filled (launchParams: the region the transport placed under
// the request's key), and the fused all-reduce + residual + RMSNorm entry point. A subclass names
// itself, its scratch, its size limit, its grid and its kernels (P2pKernels, from its .cu).
#pragma once

#include "algos/common/algorithm.h"
#include "algos/p2p/p2p_launch.h"

namespace tpcomm {

class P2pAlgorithm : public AlgorithmBase {
 public:
  /// `kernels`: TPCOMM_P2P_KERNELS(its set) (nullptr in a build without CUDA).
  P2pAlgorithm(const AlgoContext* ctx, const char* name, const char* fusedName, const P2pKernels* kernels);
  const char* fusedName() const override { return fusedName_; }
  TransportNeeds needs(int nRanks) const override;
  bool supports(const Topology& topo, const AlgoQuery& q, std::string* whyNot) const override;
  bool launchesOnly() const override { return true; }
  bool deterministic() const override { return true; }  // fp32 in rank order, per element
  Status preload() override;
  Status run(const CollArgs& args) override;
  Status runFusedNorm(const CollArgs& args, const NormArgs& norm) override;

 protected:
  /// Whether it also runs reduce-scatter and all-gather (its launch then gets P2pLaunch::kind).
  virtual bool runsHalves() const { return false; }
  /// Its region of every rank's cuda_p2p buffer for nRanks ranks (what needs() asks for; sized
  /// by the parameters sizedBy() names). Algorithms that share scratch ask under one key.
  virtual P2pScratchRequest scratch(int nRanks) const = 0;
  /// Largest message in bytes (0: no limit), from the transport's layout or the params table.
  virtual size_t maxBytes() const = 0;
  /// Grid of its kernels, plain and fused (they share per-block epochs): the one its scratch
  /// declares flags and epochs for (P2pScratchRequest::blocks).
  int blocks() const;
  /// kNotSupported when the message exceeds maxBytes().
  Status checkSize(const CollArgs& a) const;
  /// Its region as the transport placed it; nullptr while there is no transport (or no region).
  const P2pRegion* region() const;

 private:
  /// Launch parameters for `a` with `blocks` blocks.
  P2pLaunch launchParams(const CollArgs& a, int blocks) const;
  /// maxBytes() read once per communicator (see p2p_algorithm.cc for why that is safe).
  size_t cachedMaxBytes() const;
  const char* fusedName_;
  const P2pKernels* kernels_;
  mutable size_t maxBytes_ = 0;
  mutable bool maxBytesRead_ = false;
  mutable const P2pRegion* region_ = nullptr;
  mutable int blocks_ = 0;
  /// The call-independent part of launchParams(), built on the first launch.
  mutable P2pLaunch launchBase_{};
  mutable bool launchBaseReady_ = false;
};

}  // namespace tpcomm
