// Common base of the algorithms that run over the cuda_p2p transport: availability, the shared
// support rules (GPU ranks of one node with verified P2P, all-reduce), and the kernel launch
// parameters.
#pragma once

#include "algos/p2p_kernels.h"
#include "collectives/algorithm.h"

namespace tpcomm {

class P2pAlgorithm : public Algorithm {
 public:
  explicit P2pAlgorithm(CommContext* ctx);
  bool available() const override;
  bool supports(const Topology& topo, const AlgoQuery& q, std::string* whyNot) const override;

 protected:
  /// Largest message in bytes (0: no limit), from the transport's layout or the params table.
  virtual size_t maxBytes() const = 0;
  /// Launch parameters for `a` with `blocks` blocks.
  P2pLaunch launchParams(const CollArgs& a, int blocks) const;
  /// kNotSupported when the message exceeds maxBytes().
  Status checkSize(const CollArgs& a) const;
  CommContext* ctx_;
  // Read once: the launch path runs per call and must stay cheap.
  int p2pBlocks_, twoshotBlocks_;
  bool pdl_ = false;

 private:
  /// maxBytes() read once per communicator (see p2p_algorithm.cc for why that is safe).
  size_t cachedMaxBytes() const;
  mutable size_t maxBytes_ = 0;
  mutable bool maxBytesRead_ = false;
  /// The call-independent part of launchParams(), built on the first launch.
  mutable P2pLaunch launchBase_{};
  mutable bool launchBaseReady_ = false;
};

/// Whether `a` is one of the P2P algorithms above. Their run() refuses only by call shape
/// (kNotSupported, before any CUDA call) and otherwise enqueues one kernel on the call's stream,
/// whose launch fails on an invalid stream; the communicator relies on this to defer the
/// stream's capture query (communicator_impl.h).
bool isP2pAlgorithm(const Algorithm* a);

}  // namespace tpcomm
