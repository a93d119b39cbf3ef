// routing: the pure decision of routing.h. ring_nccl is added to the communicator's list as a
// selection-only entry (it stands for the real NCCL: the shim's tpcomm builds no NCCL transport
// of its own), so the selector compares tpcomm's algorithms against NCCL's fitted cost and a
// TPCOMM_ALGO rule naming ring_nccl (or excluding it) steers the shim exactly as it steers tpcomm.
#include "shim/routing.h"

#include <cstdio>
#include <utility>

namespace tpcomm {
namespace shim {

namespace {
// NCCL's value -> tpcomm's, for the types and ops tpcomm reduces; anything else is NCCL's alone
// (ncclProd, ncclAvg, ncclRedOpCreatePreMulSum's custom ops, integer types...).
template <typename From, typename To, size_t N>
bool mapValue(const std::pair<From, To> (&table)[N], From v, To* out) {
  for (const auto& e : table)
    if (e.first == v) {
      *out = e.second;
      return true;
    }
  return false;
}
}  // namespace

bool tpcommDataType(ncclDataType_t t, DataType* out) {
  static const std::pair<ncclDataType_t, DataType> kTypes[] = {
    {ncclFloat32, DataType::kF32},
    {ncclFloat16, DataType::kF16},
#if defined(NCCL_MAJOR) && (NCCL_MAJOR > 2 || NCCL_MINOR >= 10)
    {ncclBfloat16, DataType::kBF16},
#endif
  };
  return mapValue(kTypes, t, out);
}

bool tpcommReduceOp(ncclRedOp_t op, ReduceOp* out) {
  static const std::pair<ncclRedOp_t, ReduceOp> kOps[] = {
      {ncclSum, ReduceOp::kSum}, {ncclMax, ReduceOp::kMax}, {ncclMin, ReduceOp::kMin}};
  return mapValue(kOps, op, out);
}

size_t ncclTypeSize(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclFloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
#if defined(NCCL_MAJOR) && (NCCL_MAJOR > 2 || NCCL_MINOR >= 10)
    case ncclBfloat16:
      return 2;
#endif
    default:
      return 0;  // fp8 and types newer than this header: never routed
  }
}

bool shapeEligible(const RouteCall& call) {
  DataType d;
  ReduceOp o;
  return call.count > 0 && tpcommDataType(call.dtype, &d) && tpcommReduceOp(call.op, &o);
}

RouteDecision decideRoute(const RouteContext& ctx, const RouteCall& call) {
  RouteDecision d;
  d.algo = "nccl";
  DataType dtype;
  ReduceOp op;
  if (!ctx.shimOn) return d.why = "TPCOMM_SHIM=0", d;
  if (!ctx.ready || !ctx.explain) return d.why = "tpcomm not set up for this communicator", d;
  if (!tpcommReduceOp(call.op, &op)) return d.why = "op is not sum/max/min", d;
  if (!tpcommDataType(call.dtype, &dtype)) return d.why = "dtype is not f32/f16/bf16", d;
  if (call.count == 0) return d.why = "count is 0", d;
  std::vector<AlgorithmChoice> ranked;
  if (ctx.explain(call.kind, call.count, dtype, op, call.capturing, &ranked) != Status::kOk)
    return d.why = std::string("tpcomm cannot explain the call: ") + lastErrorMessage(), d;
  // What can run: the available tpcomm algorithms, and ring_nccl standing for the real NCCL
  // (whether or not this communicator has an NCCL transport of its own), in the ranking's order.
  std::vector<AlgorithmChoice> c;
  bool anyTpcomm = false;
  for (const AlgorithmChoice& x : ranked) {
    const bool nccl = x.name == "ring_nccl";
    if (!nccl && !x.available) continue;
    anyTpcomm = anyTpcomm || !nccl;
    c.push_back(x);
  }
  if (!anyTpcomm && ctx.deterministic) {
    d.route = Route::kRefuse;
    d.algo = "none";
    return d.why = "TPCOMM_DETERMINISTIC=1 and no deterministic tpcomm algorithm can serve this call", d;
  }
  if (!anyTpcomm) return d.why = "the topology allows no tpcomm algorithm for this call", d;
  char line[256];
  if (c[0].name == "ring_nccl") {
    std::snprintf(line, sizeof(line), "NCCL %s (%.1f us) vs %s (%.1f us)",
                  c[0].forced ? "forced by TPCOMM_ALGO" : "cheaper", c[0].costUs, c[1].name.c_str(), c[1].costUs);
    d.why = line;
    return d;
  }
  d.route = Route::kTpcomm;
  d.algo = c[0].name;
  double ncclUs = -1;
  for (const AlgorithmChoice& x : c)
    if (x.name == "ring_nccl") ncclUs = x.costUs;
  if (c[0].forced)
    std::snprintf(line, sizeof(line), "%s forced by TPCOMM_ALGO", d.algo.c_str());
  else if (ncclUs >= 0)
    std::snprintf(line, sizeof(line), "%s (%.1f us) vs NCCL (%.1f us)", d.algo.c_str(), c[0].costUs, ncclUs);
  else
    std::snprintf(line, sizeof(line), "%s (NCCL excluded by TPCOMM_ALGO)", d.algo.c_str());
  d.why = line;
  return d;
}

}  // namespace shim
}  // namespace tpcomm
