// An algorithm is one schedule over one transport (oneshot_p2p, staged_host, ring_nccl...).
// supports() and costUs() are pure functions of the topology and the call; run() does the work
// through the communicator's transports. The registry (registry.h) is the one list of them.
#pragma once

#include <string>

#include "collectives/coll_args.h"
#include "topology/topology.h"
#include "tpcomm/status.h"

namespace tpcomm {

struct CommContext;

class Algorithm {
 public:
  virtual ~Algorithm() = default;
  /// "<schedule>_<transport>", e.g. "twoshot_p2p".
  virtual const char* name() const = 0;
  /// Whether this algorithm can run the call on this topology. Pure. `whyNot` gets a reason.
  virtual bool supports(const Topology& topo, const AlgoQuery& q, std::string* whyNot) const = 0;
  /// Predicted time in microseconds (alpha-beta model). Pure.
  virtual double costUs(const Topology& topo, const AlgoQuery& q) const = 0;
  /// Runs the call. Stream-ordered on GPU ranks. kNotSupported makes the caller try the next
  /// candidate (e.g. message larger than a scratch buffer). It must be returned only for reasons
  /// that are the same on every rank (sizes, dtypes), never for rank-local ones such as one
  /// rank's pointer alignment: otherwise ranks run different algorithms and wait for each other
  /// until the timeout.
  virtual Status run(const CollArgs& args) = 0;
  /// Whether the transport it needs was set up in this communicator (false in selection-only
  /// lists built without a context).
  virtual bool available() const = 0;
};

/// alpha + bytes / (GB/s * 1e3) in microseconds.
inline double alphaBetaUs(double alphaUs, double gbPerS, double bytes) { return alphaUs + bytes / (gbPerS * 1e3); }

}  // namespace tpcomm
