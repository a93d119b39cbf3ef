// fake_api.cc: the NCCL functions the NCCL test double exports (fake_nccl.h says what it is).
// Signatures and types come from the <nccl.h> tpcomm builds against, so the double has that
// header's ABI. Each call checks its arguments as NCCL does, is logged with its result, and
// runs synchronously (fake_world.cc); inside ncclGroupStart/End, collectives and splits are
// queued and run at the outermost ncclGroupEnd, so one thread can drive every rank.
#include <nccl.h>

#include <cstring>
#include <vector>

#include "fake_internal.h"

using namespace fakenccl;

namespace {

thread_local int tGroupDepth = 0;
thread_local std::vector<Op> tGroupOps;
thread_local ncclResult_t tGroupError = ncclSuccess;

// Logs the call with its result. A collective or split that fails inside a group fails the
// group's ncclGroupEnd too, as in NCCL.
ncclResult_t finish(fakeNcclCall* rec, ncclResult_t r) {
  rec->result = r;
  logCall(rec);
  if (tGroupDepth > 0 && r != ncclSuccess && r != ncclInProgress && std::strncmp(rec->fn, "ncclGroup", 9) != 0 &&
      tGroupError == ncclSuccess)
    tGroupError = r;
  return r;
}

// An argument NCCL would reject: the message for ncclGetLastError, the result logged.
ncclResult_t reject(fakeNcclCall* rec, ncclResult_t r, const char* why) {
  setLastError("fake NCCL: %s: %s", rec->fn, why);
  return finish(rec, r);
}

int blockingOf(const ncclConfig_t* config) {
  return !config || config->blocking == NCCL_CONFIG_UNDEF_INT ? 1 : config->blocking;
}

bool validConfig(const ncclConfig_t* config) {
  const ncclConfig_t reference = NCCL_CONFIG_INITIALIZER;
  return !config || config->magic == reference.magic;
}

// A non-blocking communicator reports ncclInProgress to its first FAKE_NCCL_INPROGRESS polls.
ncclResult_t initResult(ncclComm* c) {
  int polls = c->blocking ? 0 : static_cast<int>(envInt("FAKE_NCCL_INPROGRESS", 0));
  c->inProgressPolls = polls;
  return polls > 0 ? ncclInProgress : ncclSuccess;
}

ncclResult_t initRank(const char* fn, ncclComm_t* comm, int nranks, const ncclUniqueId& id, int rank, int device,
                      const ncclConfig_t* config) {
  fakeNcclCall rec = callRecord(fn, nullptr);
  rec.nranks = nranks;
  rec.rank = rank;
  rec.device = device;
  rec.blocking = blockingOf(config);
  rec.inGroup = tGroupDepth > 0;
  ncclResult_t injected;
  if (injectedFailure(fn, &injected)) return finish(&rec, injected);
  if (!comm) return reject(&rec, ncclInvalidArgument, "comm is null");
  *comm = nullptr;
  if (nranks < 1 || nranks > kMaxRanks) return reject(&rec, ncclInvalidArgument, "nranks out of range");
  if (rank < 0 || rank >= nranks) return reject(&rec, ncclInvalidArgument, "rank out of range");
  if (!validConfig(config)) return reject(&rec, ncclInvalidArgument, "config not made with NCCL_CONFIG_INITIALIZER");
  std::string name = worldNameOf(id);
  if (name.empty()) return reject(&rec, ncclInvalidArgument, "not a unique id of the double (ncclGetUniqueId)");
  auto* c = new ncclComm;
  c->rank = rank;
  c->nranks = nranks;
  c->device = device;
  c->blocking = rec.blocking;
  ncclResult_t r = joinWorld(name, nranks, rank, &c->world);
  if (r != ncclSuccess) {
    delete c;
    return finish(&rec, r);
  }
  addLive(c);
  *comm = c;
  rec.comm = c;
  rec.world = c->world.id;
  return finish(&rec, initResult(c));
}

// Queues `o` in the current group, or runs it now.
ncclResult_t submit(fakeNcclCall* rec, Op o) {
  rec->inGroup = tGroupDepth > 0;
  if (tGroupDepth > 0) {
    tGroupOps.push_back(std::move(o));
    return finish(rec, ncclSuccess);
  }
  std::vector<Op> one{std::move(o)};
  return finish(rec, runOps(&one));
}

ncclResult_t collective(const char* fn, Kind kind, const void* send, void* recv, size_t count, ncclDataType_t dtype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  ncclComm* c = live(comm);
  fakeNcclCall rec = callRecord(fn, c);
  rec.comm = comm;
  rec.count = count;
  rec.dtype = dtype;
  const bool reduces = kind == Kind::kAllReduce || kind == Kind::kReduceScatter || kind == Kind::kReduce;
  if (reduces) rec.op = op;
  if (kind == Kind::kBroadcast || kind == Kind::kReduce) rec.root = root;
  rec.sendbuff = send;
  rec.recvbuff = recv;
  rec.stream = stream;
  rec.inGroup = tGroupDepth > 0;
  ncclResult_t injected;
  if (injectedFailure(fn, &injected)) return finish(&rec, injected);
  if (!c) return reject(&rec, ncclInvalidArgument, "not a live communicator");
  if (c->pending) return reject(&rec, ncclInvalidUsage, "the communicator's split has not completed");
  if (typeSize(dtype) == 0) return reject(&rec, ncclInvalidArgument, "unknown datatype");
  if (reduces && !canReduce(dtype, op))
    return reject(&rec, ncclInvalidArgument, "op/datatype the double does not reduce");
  if ((kind == Kind::kBroadcast || kind == Kind::kReduce) && (root < 0 || root >= c->nranks))
    return reject(&rec, ncclInvalidArgument, "root out of range");
  const bool needSend = kind != Kind::kBroadcast || c->rank == root;
  const bool needRecv = kind != Kind::kReduce || c->rank == root;
  if (count > 0 && ((needSend && !send) || (needRecv && !recv)))
    return reject(&rec, ncclInvalidArgument, "a buffer is null");
  bool capturing = false;
  ncclResult_t r = streamCapturing(stream, &capturing);
  if (r != ncclSuccess) return finish(&rec, r);
  if (capturing) return reject(&rec, ncclInvalidUsage, "the double cannot run in a CUDA graph capture");
  Op o;
  o.kind = kind;
  o.comm = c;
  o.send = send;
  o.recv = recv;
  o.count = count;
  o.dtype = dtype;
  o.op = op;
  o.root = root;
  o.stream = stream;
  return submit(&rec, std::move(o));
}

// Completes the children of splits that ran (a failed one is destroyed and its handle nulled).
void settleSplits(std::vector<Op>* ops, ncclComm_t** where, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    Op& o = (*ops)[i];
    if (o.kind != Kind::kSplit || !o.child) continue;
    o.child->pending = false;
    if (o.result != ncclSuccess) {
      leaveWorld(&o.child->world);
      retire(o.child);
      if (where[i]) *where[i] = nullptr;
    }
  }
}

// Finalize, destroy, abort: a null handle is a no-op (as in NCCL); one already gone is refused.
template <typename Act>
ncclResult_t teardown(const char* fn, ncclComm_t comm, Act act) {
  ncclComm* c = live(comm);
  fakeNcclCall rec = callRecord(fn, c);
  rec.comm = comm;
  ncclResult_t injected;
  if (injectedFailure(fn, &injected)) return finish(&rec, injected);
  if (!comm) return finish(&rec, ncclSuccess);
  if (!c) return reject(&rec, ncclInvalidArgument, "not a live communicator (destroyed or aborted already?)");
  act(c);
  return finish(&rec, ncclSuccess);
}

thread_local std::vector<ncclComm_t*> tGroupSplitOut;  // per queued op: where a split's handle goes

const char* errorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return "fake NCCL: no error";
    case ncclUnhandledCudaError:
      return "fake NCCL: unhandled cuda error";
    case ncclSystemError:
      return "fake NCCL: unhandled system error";
    case ncclInternalError:
      return "fake NCCL: internal error";
    case ncclInvalidArgument:
      return "fake NCCL: invalid argument";
    case ncclInvalidUsage:
      return "fake NCCL: invalid usage";
    case ncclRemoteError:
      return "fake NCCL: remote error (a peer aborted, failed or did not arrive)";
    case ncclInProgress:
      return "fake NCCL: operation in progress";
    default:
      return "fake NCCL: unknown result code";
  }
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  if (!version) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) { return errorString(result); }

const char* ncclGetLastError(ncclComm_t) { return lastError(); }

ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  fakeNcclCall rec = callRecord("ncclGetUniqueId", nullptr);
  ncclResult_t injected;
  if (injectedFailure(rec.fn, &injected)) return finish(&rec, injected);
  if (!uniqueId) return reject(&rec, ncclInvalidArgument, "uniqueId is null");
  *uniqueId = makeUniqueId();
  return finish(&rec, ncclSuccess);
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return initRank("ncclCommInitRank", comm, nranks, commId, rank, currentDevice(), nullptr);
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config) {
  return initRank("ncclCommInitRankConfig", comm, nranks, commId, rank, currentDevice(), config);
}

// One world for all; one log entry per communicator made.
ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  fakeNcclCall rec = callRecord("ncclCommInitAll", nullptr);
  rec.nranks = ndev;
  rec.inGroup = tGroupDepth > 0;
  ncclResult_t injected;
  if (injectedFailure(rec.fn, &injected)) return finish(&rec, injected);
  if (!comms) return reject(&rec, ncclInvalidArgument, "comms is null");
  if (ndev < 1 || ndev > kMaxRanks) return reject(&rec, ncclInvalidArgument, "ndev out of range");
  for (int i = 0; devlist && i < ndev; ++i)
    if (devlist[i] < 0 || (!hostOnly() && devlist[i] >= deviceCount()))
      return reject(&rec, ncclInvalidArgument, "devlist names a device that is not there");
  ncclUniqueId id = makeUniqueId();
  for (int i = 0; i < ndev; ++i) {
    ncclResult_t r = initRank("ncclCommInitAll", &comms[i], ndev, id, i, devlist ? devlist[i] : i, nullptr);
    if (r != ncclSuccess) {
      for (int j = 0; j < i; ++j) ncclCommDestroy(comms[j]);
      return r;
    }
  }
  return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  ncclComm* c = live(comm);
  fakeNcclCall rec = callRecord("ncclCommSplit", c);
  rec.parent = comm;
  rec.color = color;
  rec.key = key;
  rec.blocking = blockingOf(config);
  rec.inGroup = tGroupDepth > 0;
  ncclResult_t injected;
  if (injectedFailure(rec.fn, &injected)) return finish(&rec, injected);
  if (!c) return reject(&rec, ncclInvalidArgument, "not a live communicator");
  if (!newcomm) return reject(&rec, ncclInvalidArgument, "newcomm is null");
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR) return reject(&rec, ncclInvalidArgument, "negative color");
  if (!validConfig(config)) return reject(&rec, ncclInvalidArgument, "config not made with NCCL_CONFIG_INITIALIZER");
  Op o;
  o.kind = Kind::kSplit;
  o.comm = c;
  o.color = color;
  o.key = key;
  *newcomm = nullptr;
  if (color != NCCL_SPLIT_NOCOLOR) {
    o.child = new ncclComm;
    o.child->blocking = rec.blocking;
    o.child->pending = true;
    addLive(o.child);
    *newcomm = o.child;
  }
  if (tGroupDepth > 0) {
    tGroupSplitOut.resize(tGroupOps.size(), nullptr);
    tGroupSplitOut.push_back(newcomm);
    tGroupOps.push_back(std::move(o));
    rec.comm = *newcomm;
    return finish(&rec, ncclSuccess);
  }
  std::vector<Op> one{std::move(o)};
  ncclResult_t r = runOps(&one);
  settleSplits(&one, &newcomm, 1);
  rec.comm = *newcomm;
  if (*newcomm) {
    rec.rank = (*newcomm)->rank;
    rec.nranks = (*newcomm)->nranks;
    rec.world = (*newcomm)->world.id;
  }
  if (r == ncclSuccess && *newcomm) r = initResult(*newcomm);
  return finish(&rec, r);
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  return teardown("ncclCommFinalize", comm, [](ncclComm* c) { c->finalized = true; });
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  return teardown("ncclCommDestroy", comm, [](ncclComm* c) {
    leaveWorld(&c->world);
    retire(c);
  });
}

// Ends the world for every rank: their waits and later calls on it fail with ncclRemoteError.
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  return teardown("ncclCommAbort", comm, [](ncclComm* c) {
    uint32_t none = 0;
    if (c->world.h) c->world.h->abortedBy.compare_exchange_strong(none, static_cast<uint32_t>(c->rank + 1));
    leaveWorld(&c->world);
    retire(c);
  });
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  ncclComm* c = live(comm);
  if (!c || !asyncError) return ncclInvalidArgument;
  if (c->inProgressPolls.load() > 0 && c->inProgressPolls.fetch_sub(1) > 0) {
    *asyncError = ncclInProgress;
    return ncclSuccess;
  }
  *asyncError = c->pending ? ncclInProgress : static_cast<ncclResult_t>(c->asyncError.load());
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  ncclComm* c = live(comm);
  if (!c || !count) return ncclInvalidArgument;
  if (c->pending) return ncclInvalidUsage;
  *count = c->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  ncclComm* c = live(comm);
  if (!c || !rank) return ncclInvalidArgument;
  if (c->pending) return ncclInvalidUsage;
  *rank = c->rank;
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  ncclComm* c = live(comm);
  if (!c || !device) return ncclInvalidArgument;
  if (c->pending) return ncclInvalidUsage;
  *device = c->device;
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  fakeNcclCall rec = callRecord("ncclGroupStart", nullptr);
  rec.inGroup = tGroupDepth > 0;
  ncclResult_t injected;
  if (injectedFailure(rec.fn, &injected)) return finish(&rec, injected);
  ++tGroupDepth;
  return finish(&rec, ncclSuccess);
}

// The outermost one runs what the group queued, in call order per communicator.
ncclResult_t ncclGroupEnd() {
  fakeNcclCall rec = callRecord("ncclGroupEnd", nullptr);
  rec.inGroup = tGroupDepth > 1;
  ncclResult_t injected;
  if (injectedFailure(rec.fn, &injected)) return finish(&rec, injected);
  if (tGroupDepth == 0) return reject(&rec, ncclInvalidUsage, "no group to end");
  if (--tGroupDepth > 0) return finish(&rec, ncclSuccess);
  std::vector<Op> ops = std::move(tGroupOps);
  std::vector<ncclComm_t*> out = std::move(tGroupSplitOut);
  tGroupOps.clear();
  tGroupSplitOut.clear();
  out.resize(ops.size(), nullptr);
  ncclResult_t r = runOps(&ops);
  settleSplits(&ops, out.data(), ops.size());
  for (size_t i = 0; i < ops.size(); ++i)
    if (ops[i].kind == Kind::kSplit && ops[i].child && ops[i].result == ncclSuccess) {
      ncclResult_t ir = initResult(ops[i].child);
      if (r == ncclSuccess) r = ir;
    }
  if (tGroupError != ncclSuccess) r = tGroupError;
  tGroupError = ncclSuccess;
  return finish(&rec, r);
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  return collective("ncclAllReduce", Kind::kAllReduce, sendbuff, recvbuff, count, datatype, op, -1, comm, stream);
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return collective("ncclReduceScatter", Kind::kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, -1, comm,
                    stream);
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  return collective("ncclAllGather", Kind::kAllGather, sendbuff, recvbuff, sendcount, datatype, ncclSum, -1, comm,
                    stream);
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  return collective("ncclBroadcast", Kind::kBroadcast, sendbuff, recvbuff, count, datatype, ncclSum, root, comm,
                    stream);
}

ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream) {
  return collective("ncclBcast", Kind::kBroadcast, buff, buff, count, datatype, ncclSum, root, comm, stream);
}

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  return collective("ncclReduce", Kind::kReduce, sendbuff, recvbuff, count, datatype, op, root, comm, stream);
}

}  // extern "C"
