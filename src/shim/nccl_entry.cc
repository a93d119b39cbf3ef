// nccl_entry: the NCCL entry points libtpcomm_nccl.so exports (exports.map lists exactly these).
// Under LD_PRELOAD they take precedence over the engine's libnccl for these names only; every
// other NCCL function, ncclGetVersion included, still binds to the engine's own NCCL. Each one
// forwards to the real NCCL (real_nccl.h) and, around that, keeps the side table
// (comm_table.h), NCCL's group semantics (group.h) and the lazy set-up (setup.h); ncclAllReduce,
// ncclReduceScatter and ncclAllGather ask routing.h whether tpcomm runs them. With TPCOMM_SHIM=0 every call is a plain forward.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdio>
#include <mutex>
#include <set>
#include <tuple>

#include "tpcomm/communicator.h"
#include "common/error.h"
#include "common/log.h"
#include "common/params.h"
#include "shim/comm_table.h"
#include "shim/group.h"
#include "shim/real_nccl.h"
#include "shim/routing.h"
#include "shim/setup.h"

using namespace tpcomm;
using namespace tpcomm::shim;

namespace {

bool shimOn() {
  static const bool on = paramInt(ParamId::kShim) != 0;
  return on;
}

const RealNccl* realOrWarn(const char* what) {
  const RealNccl* r = realNccl();
  if (!r) std::fprintf(stderr, "libtpcomm_nccl: %s: no real NCCL to forward to (see TPCOMM_NCCL_LIBRARY)\n", what);
  return r;
}

ncclResult_t toNccl(Status s) {
  switch (s) {
    case Status::kOk:
      return ncclSuccess;
    case Status::kInvalidArgument:
      return ncclInvalidArgument;
    case Status::kCudaError:
      return ncclUnhandledCudaError;
    case Status::kSystemError:
      return ncclSystemError;
    case Status::kTimeout:
    case Status::kRemoteError:
      return ncclRemoteError;
    default:
      return ncclInternalError;
  }
}

// A communicator created by an intercepted init: remember it (outside a group its creation is
// the call itself; inside, the outermost group's).
void remember(ncclComm_t comm, const std::string& key, uint64_t creation) {
  if (!comm) return;
  auto c = std::make_shared<ShimComm>();
  c->real = comm;
  c->key = key;
  c->creation = creation;
  CommTable::instance().add(c);
}

uint64_t creationForThisCall() { return groupDepth() > 0 ? groupCreation() : nextCreation(); }

bool capturing(cudaStream_t stream, bool* ok) {
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  cudaError_t e = cudaStreamIsCapturing(stream, &cs);
  if (e != cudaSuccess) cudaGetLastError();
  *ok = e == cudaSuccess;
  return cs != cudaStreamCaptureStatusNone;
}

const char* kindName(Collective k) {
  return k == Collective::kAllReduce ? "allreduce" : k == Collective::kReduceScatter ? "reducescatter" : "allgather";
}

// Logs a decision once per (collective, power-of-two size bucket, dtype, capturing) per process.
void logOnce(const ShimComm& c, const RouteCall& call, const RouteDecision& d) {
  if (!logEnabled(LogLevel::kInfo, kColl)) return;
  static std::mutex mu;
  static std::set<std::tuple<int, int, int, bool>> seen;
  size_t bytes = call.count * ncclTypeSize(call.dtype);
  int bucket = 0;
  while ((size_t{1} << bucket) < bytes && bucket < 63) ++bucket;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!seen.insert({static_cast<int>(call.kind), bucket, static_cast<int>(call.dtype), call.capturing}).second) return;
  }
  TPCOMM_INFO(kColl, "libtpcomm_nccl: %s <= %zu bytes per rank, ncclDataType %d%s -> %s (%s) [rank %d of %d]",
              kindName(call.kind), size_t{1} << bucket, static_cast<int>(call.dtype),
              call.capturing ? ", graph capture" : "", d.algo.c_str(), d.why.c_str(), c.rank, c.nRanks);
}

// The cached decision for this call on a ready communicator. Caller holds c.mu.
const RouteDecision& decide(ShimComm& c, const RouteCall& call) {
  auto key = std::make_tuple(static_cast<int>(call.kind), static_cast<int>(call.dtype), static_cast<int>(call.op),
                             call.count, call.capturing);
  auto it = c.decisions.find(key);
  if (it != c.decisions.end()) return it->second;
  if (c.decisions.size() > 4096) c.decisions.clear();
  RouteContext ctx;
  ctx.shimOn = true;
  ctx.deterministic = paramInt(ParamId::kDeterministic) != 0;
  ctx.ready = c.state == SetupState::kReady && c.tp;
  if (ctx.ready) {
    const Communicator* tp = c.tp;
    ctx.explain = [tp](Collective kind, size_t count, DataType dtype, ReduceOp op, bool capturing,
                       std::vector<AlgorithmChoice>* out) {
      return tp->explainCollective(kind, count, dtype, op, capturing, out);
    };
  }
  RouteDecision d = decideRoute(ctx, call);
  logOnce(c, call, d);
  return c.decisions.emplace(key, std::move(d)).first->second;
}

// The call on the real NCCL.
ncclResult_t forwardReal(const RealNccl& real, const DeferredAllReduce& a, ncclDataType_t ncclType, ncclRedOp_t ncclOp,
                         ncclComm_t comm) {
  switch (a.kind) {
    case Collective::kReduceScatter:
      return real.reduceScatter(a.send, a.recv, a.count, ncclType, ncclOp, comm, a.stream);
    case Collective::kAllGather:
      return real.allGather(a.send, a.recv, a.count, ncclType, comm, a.stream);
    default:
      return real.allReduce(a.send, a.recv, a.count, ncclType, ncclOp, comm, a.stream);
  }
}

// Runs a tpcomm-routed call now. kNotSupported (every candidate declined, e.g. a scratch limit)
// falls back to the real NCCL.
ncclResult_t runTpcomm(const RealNccl& real, ShimComm& c, const DeferredAllReduce& a, ncclDataType_t ncclType,
                       ncclRedOp_t ncclOp) {
  Status s = a.kind == Collective::kReduceScatter ? c.tp->reduceScatter(a.send, a.recv, a.count, a.dtype, a.op, a.stream)
             : a.kind == Collective::kAllGather   ? c.tp->allGather(a.send, a.recv, a.count, a.dtype, a.stream)
                                                  : c.tp->allReduce(a.send, a.recv, a.count, a.dtype, a.op, a.stream);
  if (s == Status::kOk) return ncclSuccess;
  if (s == Status::kNotSupported && paramInt(ParamId::kDeterministic) != 0) {
    TPCOMM_WARN(kColl, "libtpcomm_nccl: tpcomm declined (%s) and TPCOMM_DETERMINISTIC=1: the call fails", lastErrorMessage());
    return ncclInvalidUsage;
  }
  if (s == Status::kNotSupported) {
    TPCOMM_WARN(kColl, "libtpcomm_nccl: tpcomm declined (%s); NCCL runs this call", lastErrorMessage());
    return forwardReal(real, a, ncclType, ncclOp, c.real);
  }
  TPCOMM_WARN(kColl, "libtpcomm_nccl: rank %d: tpcomm %s failed: %s", c.rank, kindName(a.kind), lastErrorMessage());
  return toNccl(s);
}

ncclDataType_t ncclTypeOf(DataType t) {
  return t == DataType::kF32 ? ncclFloat32 : t == DataType::kF16 ? ncclFloat16 : ncclBfloat16;
}
ncclRedOp_t ncclOpOf(ReduceOp o) { return o == ReduceOp::kSum ? ncclSum : o == ReduceOp::kMax ? ncclMax : ncclMin; }

// One collective call: to tpcomm when routing.h says so (now, or at the outermost ncclGroupEnd
// inside a group), else to the real NCCL. `count` is the call's own (reduce-scatter: recvcount,
// all-gather: sendcount); all-gather passes ncclSum, which it ignores.
ncclResult_t route(const RealNccl& real, Collective kind, const void* sendbuff, void* recvbuff, size_t count,
                   ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  DataType dtype = DataType::kF32;
  ReduceOp rop = ReduceOp::kSum;
  const bool known = tpcommDataType(datatype, &dtype) && tpcommReduceOp(op, &rop);
  DeferredAllReduce a{nullptr, sendbuff, recvbuff, count, dtype, rop, stream, kind};
  auto forward = [&] {
    if (kind == Collective::kReduceScatter) return real.reduceScatter(sendbuff, recvbuff, count, datatype, op, comm, stream);
    if (kind == Collective::kAllGather) return real.allGather(sendbuff, recvbuff, count, datatype, comm, stream);
    return real.allReduce(sendbuff, recvbuff, count, datatype, op, comm, stream);
  };
  if (!shimOn() || !sendbuff || !recvbuff || !known) return forward();
  std::shared_ptr<ShimComm> c = CommTable::instance().find(comm);
  if (!c) return forward();
  bool streamOk = true;
  RouteCall call{datatype, op, count, capturing(stream, &streamOk), kind};
  if (!streamOk) {
    // No usable CUDA context for this stream (no device, or a broken one): NCCL's own path,
    // said once so the user can see which path ran and why.
    static std::once_flag said;
    std::call_once(said, [] {
      TPCOMM_INFO(kColl, "libtpcomm_nccl: cudaStreamIsCapturing failed on the call's stream (no usable device?): "
                  "every call goes to NCCL");
    });
    return forward();
  }
  if (!shapeEligible(call)) return forward();
  std::unique_lock<std::mutex> lock(c->mu);
  if (c->state == SetupState::kPending && !call.capturing) {
    if (groupDepth() > 0) {
      groupWantSetup(c);
    } else {
      lock.unlock();
      runSetup(c, real, stream);
      lock.lock();
    }
  }
  if (c->state != SetupState::kReady) return forward();
  const RouteDecision& d = decide(*c, call);
  if (d.route == Route::kRefuse) {
    TPCOMM_WARN(kColl, "libtpcomm_nccl: rank %d: %s", c->rank, d.why.c_str());
    return ncclInvalidUsage;
  }
  if (d.route != Route::kTpcomm) return forward();
  a.comm = c;
  if (groupDepth() > 0) {
    groupDefer(a);
    return ncclSuccess;
  }
  return runTpcomm(real, *c, a, datatype, op);
}

}  // namespace

extern "C" {

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  const RealNccl* real = realOrWarn("ncclCommInitRank");
  if (!real) return ncclSystemError;
  ncclResult_t r = real->commInitRank(comm, nranks, commId, rank);
  if (shimOn() && comm && (r == ncclSuccess || r == ncclInProgress))
    remember(*comm, keyOfUniqueId(commId), creationForThisCall());
  return r;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config) {
  const RealNccl* real = realOrWarn("ncclCommInitRankConfig");
  if (!real) return ncclSystemError;
  if (!real->commInitRankConfig) return ncclInvalidUsage;
  ncclResult_t r = real->commInitRankConfig(comm, nranks, commId, rank, config);
  if (shimOn() && comm && (r == ncclSuccess || r == ncclInProgress))
    remember(*comm, keyOfUniqueId(commId), creationForThisCall());
  return r;
}

ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  const RealNccl* real = realOrWarn("ncclCommInitAll");
  if (!real) return ncclSystemError;
  ncclResult_t r = real->commInitAll(comms, ndev, devlist);
  if (shimOn() && comms && r == ncclSuccess) {
    uint64_t creation = creationForThisCall();
    for (int i = 0; i < ndev; ++i) remember(comms[i], keyOfInitAll(creation), creation);
  }
  return r;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  const RealNccl* real = realOrWarn("ncclCommSplit");
  if (!real) return ncclSystemError;
  if (!real->commSplit) return ncclInvalidUsage;
  ncclResult_t r = real->commSplit(comm, color, key, newcomm, config);
  if (shimOn() && newcomm && *newcomm && (r == ncclSuccess || r == ncclInProgress)) {
    std::shared_ptr<ShimComm> parent = CommTable::instance().find(comm);
    char orphan[32];
    std::snprintf(orphan, sizeof(orphan), "comm:%p", static_cast<void*>(comm));
    remember(*newcomm, keyOfSplit(parent ? parent->key : std::string(orphan), color), creationForThisCall());
  }
  return r;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  const RealNccl* real = realOrWarn("ncclCommFinalize");
  if (!real) return ncclSystemError;
  if (!real->commFinalize) return ncclInvalidUsage;
  // No collective may follow a finalize: tpcomm's (collective) teardown goes first.
  if (std::shared_ptr<ShimComm> c = CommTable::instance().find(comm)) teardown(*c, *real, /*abort=*/false);
  return real->commFinalize(comm);
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  const RealNccl* real = realOrWarn("ncclCommDestroy");
  if (!real) return ncclSystemError;
  if (std::shared_ptr<ShimComm> c = CommTable::instance().take(comm)) teardown(*c, *real, /*abort=*/false);
  return real->commDestroy(comm);
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  const RealNccl* real = realOrWarn("ncclCommAbort");
  if (!real) return ncclSystemError;
  if (std::shared_ptr<ShimComm> c = CommTable::instance().take(comm)) teardown(*c, *real, /*abort=*/true);
  return real->commAbort(comm);
}

ncclResult_t ncclGroupStart() {
  const RealNccl* real = realOrWarn("ncclGroupStart");
  if (!real) return ncclSystemError;
  ncclResult_t r = real->groupStart();
  if (r == ncclSuccess && shimOn()) groupEnter();
  return r;
}

ncclResult_t ncclGroupEnd() {
  const RealNccl* real = realOrWarn("ncclGroupEnd");
  if (!real) return ncclSystemError;
  ncclResult_t r = real->groupEnd();
  if (!shimOn()) return r;
  GroupWork work;
  if (!groupLeave(&work)) return r;
  // The real group is launched; now what the shim held back, in call order.
  for (const DeferredAllReduce& a : work.calls) {
    ncclResult_t mine;
    {
      std::lock_guard<std::mutex> lock(a.comm->mu);
      if (!a.comm->tp) {  // torn down inside the group
        mine = forwardReal(*real, a, ncclTypeOf(a.dtype), ncclOpOf(a.op), a.comm->real);
      } else {
        mine = runTpcomm(*real, *a.comm, a, ncclTypeOf(a.dtype), ncclOpOf(a.op));
      }
    }
    if (r == ncclSuccess || r == ncclInProgress) r = mine == ncclSuccess ? r : mine;
  }
  for (const std::shared_ptr<ShimComm>& c : work.setups) runSetup(c, *real, nullptr);
  return r;
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  const RealNccl* real = realOrWarn("ncclAllReduce");
  if (!real) return ncclSystemError;
  return route(*real, Collective::kAllReduce, sendbuff, recvbuff, count, datatype, op, comm, stream);
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  const RealNccl* real = realOrWarn("ncclReduceScatter");
  if (!real) return ncclSystemError;
  return route(*real, Collective::kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, comm, stream);
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  const RealNccl* real = realOrWarn("ncclAllGather");
  if (!real) return ncclSystemError;
  return route(*real, Collective::kAllGather, sendbuff, recvbuff, sendcount, datatype, ncclSum, comm, stream);
}

}  // extern "C"
