// routing: whether one ncclAllReduce goes to tpcomm or to the real NCCL. A pure function of the
// call and of what the communicator knows (topology, its tpcomm algorithms, its TPCOMM_ALGO
// override), so every rank decides alike and the table of decisions is unit-tested on the CPU.
// tpcomm runs the call only when all hold: the shim is on and set up for this communicator;
// the ranks are on one node; op is sum/max/min; dtype is f32/f16/bf16; count > 0; and the
// selector, given the communicator's own tpcomm algorithms plus ring_nccl, puts a tpcomm
// algorithm first (by cost, or forced by TPCOMM_ALGO).
#pragma once

#include <nccl.h>

#include <cstddef>
#include <string>
#include <vector>

#include "collectives/algo_override.h"
#include "algos/algorithm.h"
#include "topology/topology.h"

namespace tpcomm {
namespace shim {

enum class Route { kNccl, kTpcomm };

/// The call, in NCCL's terms.
struct RouteCall {
  ncclDataType_t dtype = ncclFloat32;
  ncclRedOp_t op = ncclSum;
  size_t count = 0;
  bool capturing = false;  ///< the stream is capturing a CUDA graph
};

/// What the communicator knows. Pointers may be null only when `ready` is false.
struct RouteContext {
  bool shimOn = true;  ///< TPCOMM_SHIM
  bool ready = false;  ///< tpcomm is set up for this communicator
  const Topology* topo = nullptr;
  const std::vector<Algorithm*>* algos = nullptr;  ///< the communicator's tpcomm algorithms
  const AlgoOverride* override = nullptr;
};

struct RouteDecision {
  Route route = Route::kNccl;
  std::string algo;  ///< the algorithm that runs it: a tpcomm name, or "nccl"
  std::string why;   ///< one line for TPCOMM_DEBUG=INFO
};

/// NCCL's element type as tpcomm's; false for types tpcomm does not reduce.
bool tpcommDataType(ncclDataType_t t, DataType* out);
/// NCCL's operator as tpcomm's; false for prod, avg and custom operators.
bool tpcommReduceOp(ncclRedOp_t op, ReduceOp* out);
/// Bytes per element of an NCCL type (0 for an unknown one).
size_t ncclTypeSize(ncclDataType_t t);

/// The decision for `call` on a communicator described by `ctx`. Pure.
RouteDecision decideRoute(const RouteContext& ctx, const RouteCall& call);

/// Whether the call's shape (op, dtype, count) could ever go to tpcomm: the test for starting
/// the lazy set-up. Pure.
bool shapeEligible(const RouteCall& call);

}  // namespace shim
}  // namespace tpcomm
