// routing: whether one ncclAllReduce, ncclReduceScatter or ncclAllGather goes to tpcomm or to the
// real NCCL. A pure function of the call and of the communicator's own ranking of it
// (Communicator::explainCollective: its
// algorithms, ring_nccl among them, by cost or forced by TPCOMM_ALGO), so every rank decides
// alike and the table of decisions is unit-tested on the CPU. tpcomm runs the call only when all
// hold: the shim is on and set up for this communicator; op is sum/max/min; dtype is
// f32/f16/bf16; count > 0; and among the available tpcomm algorithms and ring_nccl (which stands
// for the real NCCL underneath), a tpcomm algorithm comes first.
#pragma once

#include <nccl.h>

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "tpcomm/communicator.h"

namespace tpcomm {
namespace shim {

/// kRefuse: TPCOMM_DETERMINISTIC=1 and tpcomm cannot serve an eligible call; the call fails
/// (ncclInvalidUsage, the reason logged) rather than run on NCCL's non-deterministic paths.
enum class Route { kNccl, kTpcomm, kRefuse };

/// The call, in NCCL's terms.
struct RouteCall {
  ncclDataType_t dtype = ncclFloat32;
  ncclRedOp_t op = ncclSum;
  size_t count = 0;
  bool capturing = false;  ///< the stream is capturing a CUDA graph
  Collective kind = Collective::kAllReduce;  ///< count is the call's own (reduce-scatter: recvcount)
};

/// What the communicator knows. `explain` is called only when `ready` (and may then be unset
/// only in tests that stop earlier): Communicator::explainCollective for the call.
struct RouteContext {
  bool shimOn = true;  ///< TPCOMM_SHIM
  bool ready = false;  ///< tpcomm is set up for this communicator
  bool deterministic = false;  ///< TPCOMM_DETERMINISTIC: eligible calls never go to NCCL
  std::function<Status(Collective, size_t count, DataType, ReduceOp, bool capturing, std::vector<AlgorithmChoice>*)>
      explain;
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
