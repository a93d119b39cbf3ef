// call_path.cc: every collective call after its arguments are checked: look up the selection
// for the call's shape (cached), query the stream's capture status only when the first
// candidate's run could depend on it, and walk the candidates, moving on at kNotSupported.
// allReduceResidualRmsNorm walks the same loop: each candidate's fused kernel where it has one
// (Algorithm::runFusedNorm), else its all-reduce and then the one separate norm (the GPU kernel
// of fused_rmsnorm.cu, or hostResidualRmsNorm on host ranks). Every path gives the same bits.
// explainAllReduce / explainCollective: the candidates a call of that shape would walk, reported
// instead of run (selected afresh, not from the cache).
#include <vector>

#include "algos/fused/fused_rmsnorm.h"
#include "collectives/call_checks.h"
#include "collectives/communicator_impl.h"
#include "common/log.h"
#include "transports/host_staged.h"

namespace tpcomm {

namespace {

// Norms waiting for the outermost groupEnd (see normGroupStarted).
struct PendingNorm {
  int device;
  RmsNormLaunch launch;
  cudaStream_t stream;
};
thread_local int tGroupDepth = 0;
thread_local std::vector<PendingNorm> tPending;
// Calls made inside a group: their end is marked (recordCallEnd) at the outermost groupEnd, after
// what the group deferred (NCCL's launches, the norms above) was enqueued.
thread_local std::vector<std::pair<Communicator::Impl*, CollArgs>> tCallEnds;

// The unfused norm kernel (one block of 512 per row) launches early under PDL and waits on the
// all-reduce: that hides its launch up to 64 rows but costs time beyond (measured in
// docs/fused_rmsnorm.md). So PDL up to 64 rows.
constexpr size_t kNormPdlMaxRows = 64;

Status launchNormOn(const RmsNormLaunch& l, int device, cudaStream_t stream) {
  DeviceGuard guard(device);
  return TPCOMM_CUDA_ONLY(launchResidualRmsNorm(l, stream));
}

// The norm after a plain all-reduce into a.recv.
Status runSeparateNorm(const AlgoContext& c, const Algorithm& algo, const CollArgs& a, const NormArgs& n) {
  if (c.device < 0) {  // host ranks: the all-reduce was synchronous
    hostResidualRmsNorm(a.recv, n.residual, n.weight, n.eps, a.recv, n.rows, n.hidden, a.dtype);
    return Status::kOk;
  }
  RmsNormLaunch l{};
  l.x = a.recv;
  l.residual = n.residual;
  l.weight = n.weight;
  l.out = a.recv;
  l.eps = n.eps;
  l.rows = n.rows;
  l.hidden = n.hidden;
  l.dtype = static_cast<int>(a.dtype);
  l.pdl = c.launch.pdl && n.rows <= kNormPdlMaxRows;
  if (tGroupDepth > 0 && algo.deferredInGroup()) {
    l.pdl = 0;  // follows ncclGroupEnd's launches, which do not trigger dependents
    tPending.push_back({c.device, l, a.stream});
    return Status::kOk;
  }
  return TPCOMM_CUDA_ONLY(launchResidualRmsNorm(l, a.stream));
}

// The stream's capture status, into a.capturing (GPU ranks only).
Status queryCapture(const AlgoContext& c, CollArgs& a, const char* what) {
#ifdef TPCOMM_HAVE_CUDA
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  cudaError_t e = cudaStreamIsCapturing(a.stream, &cs);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return TPCOMM_INVALID("%s: stream is not a valid CUDA stream on device %d: %s", what, c.device,
                          cudaGetErrorString(e));
  }
  a.capturing = cs == cudaStreamCaptureStatusActive;
#else
  (void)c;
  (void)a;
  (void)what;
#endif
  return Status::kOk;
}

const Communicator::Impl::CachedSelection& lookupSelection(Communicator::Impl& impl, const CollArgs& a) {
  const Communicator::Impl::ShapeKey key{static_cast<int>(a.kind), static_cast<int>(a.dtype), static_cast<int>(a.op),
                                         a.bytes(), a.compression};
  if (impl.lastSelection && key == impl.lastShape) return *impl.lastSelection;
  auto hit = impl.selectionCache.find(key);
  if (hit == impl.selectionCache.end()) {
    if (impl.selectionCache.size() > 4096) {
      impl.selectionCache.clear();
      impl.lastSelection = nullptr;
    }
    Communicator::Impl::CachedSelection e;
    e.sel = selectForShape(impl.algoList, impl.ctx->topo, AlgoQuery::of(a), impl.override, impl.tuning.table.get());
    e.deferCaptureQuery = impl.ctx->device >= 0 && e.sel.sameFirst && e.sel.eager[0].algo->launchesOnly();
    hit = impl.selectionCache.emplace(key, std::move(e)).first;
  }
  impl.lastShape = key;
  impl.lastSelection = &hit->second;
  return hit->second;
}

// After an eager GPU call was enqueued: the order event marks its end on its stream, for the
// next call on another stream (followPreviousStream). Calls captured into a CUDA graph record
// nothing (a node between two kernels would end their programmatic dependent launch; the graphs'
// launches are ordered by the caller). Made at the first call.
Status recordCallEnd(Communicator::Impl& impl, const CollArgs& a, bool captureKnown) {
#ifdef TPCOMM_HAVE_CUDA
  if (!impl.orderStreams) return Status::kOk;
  bool capturing = a.capturing;
  if (!captureKnown) {
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    TPCOMM_CUDA_TRY(cudaStreamIsCapturing(a.stream, &cs));
    capturing = cs == cudaStreamCaptureStatusActive;
  }
  if (capturing) return Status::kOk;
  if (!impl.streamOrderEvent) {
    cudaEvent_t e;
    TPCOMM_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    impl.streamOrderEvent = e;
  }
  TPCOMM_CUDA_TRY(cudaEventRecord(static_cast<cudaEvent_t>(impl.streamOrderEvent), a.stream));
#else
  (void)impl;
  (void)a;
#endif
  return Status::kOk;
}

// One communicator's calls share epochs, flags and scratch, so they must run in call order even
// when the caller switches streams (NCCL orders one communicator's work the same way, and the
// drop-in stands in for it). Every eager call ends by recording the order event on its stream
// (recordCallEnd); a call on another stream first waits for it (inside a CUDA graph capture, as
// an external-event node). The previous stream itself is never touched again: the caller may have
// destroyed it, and a destroyed stream's handle must not reach CUDA.
Status followPreviousStream(Communicator::Impl& impl, CollArgs& a, const char* what) {
#ifdef TPCOMM_HAVE_CUDA
  if (!impl.haveLastStream || a.stream == impl.lastStream) {
    impl.haveLastStream = true;
    impl.lastStream = a.stream;
    return Status::kOk;
  }
  // The previous call was made in this group: mark its end now (its stream is in use this very
  // moment), before this call waits for it.
  for (size_t i = 0; i < tCallEnds.size(); ++i)
    if (tCallEnds[i].first == &impl) {
      TPCOMM_TRY(recordCallEnd(impl, tCallEnds[i].second, true));
      tCallEnds.erase(tCallEnds.begin() + static_cast<long>(i));
      break;
    }
  if (impl.streamOrderEvent) {
    cudaStreamCaptureStatus next = cudaStreamCaptureStatusNone;
    cudaError_t e = cudaStreamIsCapturing(a.stream, &next);
    if (e == cudaSuccess)
      e = cudaStreamWaitEvent(a.stream, static_cast<cudaEvent_t>(impl.streamOrderEvent),
                              next == cudaStreamCaptureStatusActive ? cudaEventWaitExternal : 0);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return TPCOMM_INVALID(
          "%s: cannot order this call after the previous one on another stream (%s): one communicator's calls "
          "must be ordered",
          what, cudaGetErrorString(e));
    }
  }
  impl.lastStream = a.stream;
#else
  (void)impl;
  (void)a;
  (void)what;
#endif
  return Status::kOk;
}

}  // namespace

void normGroupStarted() { ++tGroupDepth; }

Status normGroupEnded(Status groupEndStatus) {
  if (tGroupDepth > 0) --tGroupDepth;
  if (tGroupDepth > 0) return groupEndStatus;
  std::vector<PendingNorm> pending;
  pending.swap(tPending);
  std::vector<std::pair<Communicator::Impl*, CollArgs>> ends;
  ends.swap(tCallEnds);
  if (groupEndStatus != Status::kOk) return groupEndStatus;  // the all-reduces did not run
  Status first = Status::kOk;
  for (const PendingNorm& n : pending) {
    Status s = launchNormOn(n.launch, n.device, n.stream);
    if (first == Status::kOk) first = s;
  }
  for (auto& [impl, a] : ends) {
    DeviceGuard guard(impl->ctx->device);
    Status s = recordCallEnd(*impl, a, true);
    if (first == Status::kOk) first = s;
  }
  return first;
}

Status runCollective(Communicator::Impl& impl, CollArgs& a, const NormArgs* norm, const char* what) {
  const AlgoContext& c = *impl.ctx;
  a.nRanks = c.nRanks;
  a.capturing = false;
  if (c.device < 0 && a.stream != nullptr)
    return TPCOMM_INVALID(
        "%s: stream must be null on a host communicator (device -1): host collectives are synchronous", what);
  if (c.device >= 0) TPCOMM_TRY(followPreviousStream(impl, a, what));
  const Communicator::Impl::CachedSelection& entry = lookupSelection(impl, a);
  // Until the capture status is known, only list[0] may run: it is the same algorithm in both
  // modes, and its run() does not depend on a.capturing (Algorithm::launchesOnly).
  bool captureKnown = !entry.deferCaptureQuery;
  const std::vector<Candidate>* list = &entry.sel.eager;
  if (captureKnown && c.device >= 0) {
    TPCOMM_TRY(queryCapture(c, a, what));
    list = &entry.sel.forMode(a.capturing);
  }
  if (list->empty())
    return TPCOMM_ERROR(kNotSupported, "%s: no algorithm supports %s of %zu bytes (%s%s) on this topology%s", what,
                        collKindName(a.kind), a.bytes(), dataTypeName(a.dtype), a.capturing ? ", capturing" : "",
                        impl.override.deterministicOnly
                            ? " among those that keep the determinism contract (TPCOMM_DETERMINISTIC / "
                              "Config::deterministic; docs/determinism.md)"
                            : "");
  // The call's number, published in the host segment before anything is launched (a peer whose
  // wait for this rank expires compares it with its own: common/async_error.h).
  if (c.hostStaged) a.callNumber = c.hostStaged->beginCall();
  for (size_t i = 0; i < list->size(); ++i) {
    Algorithm* algo = (*list)[i].algo;
    bool fused = norm != nullptr;
    Status s = fused ? algo->runFusedNorm(a, *norm) : algo->run(a);
    if (fused && s == Status::kNotSupported) {
      clearError();  // no fused kernel here, or one that declines this shape: the plain path
      fused = false;
      s = algo->run(a);
    }
    if (s != Status::kOk && !captureKnown) {
      // The switch keeps list[0], the candidate that just ran, so the walk goes on at i + 1.
      TPCOMM_TRY(queryCapture(c, a, what));
      captureKnown = true;
      list = &entry.sel.forMode(a.capturing);
    }
    if (s == Status::kNotSupported) continue;
    if (s != Status::kOk) return s;
    impl.lastAlgorithm = fused ? algo->fusedName() : algo->name();
    const Compression asked = a.compression >= 0 ? static_cast<Compression>(a.compression) : impl.override.compression;
    if (asked != Compression::kNone && algo->compression() == Compression::kNone && !impl.compressionFallbackSaid) {
      impl.compressionFallbackSaid = true;  // once per communicator: a decode loop would repeat it every step
      TPCOMM_INFO(kColl,
                  "compression %s is on but %s of %zu bytes (%s %s%s) ran uncompressed on %s: no compressed algorithm "
                  "serves it or none is cheaper (only bf16/f16/f32 sums are compressed; docs/compression.md). Said "
                  "once per communicator",
                  compressionName(asked), what, a.bytes(), dataTypeName(a.dtype), reduceOpName(a.op),
                  a.capturing ? ", capturing" : "", impl.lastAlgorithm);
    }
    TPCOMM_TRACE(kColl, "%s %zu bytes %s -> %s", what, a.bytes(), dataTypeName(a.dtype), impl.lastAlgorithm);
    if (norm && !fused) TPCOMM_TRY(runSeparateNorm(c, *algo, a, *norm));
    if (c.device < 0) return Status::kOk;
    if (tGroupDepth == 0) return recordCallEnd(impl, a, captureKnown);
    if (!captureKnown) TPCOMM_TRY(queryCapture(c, a, what));  // the group's end records eager calls only
    tCallEnds.emplace_back(&impl, a);
    return Status::kOk;
  }
  return TPCOMM_ERROR(kNotSupported, "%s: every candidate declined %zu bytes", what, a.bytes());
}

Status Communicator::explainAllReduce(size_t count, DataType dtype, ReduceOp op, bool capturing,
                                      std::vector<AlgorithmChoice>* out) const {
  return explainCollective(Collective::kAllReduce, count, dtype, op, capturing, out);
}

static_assert(static_cast<int>(Collective::kReduceScatter) == static_cast<int>(CollKind::kReduceScatter) &&
                  static_cast<int>(Collective::kAllGather) == static_cast<int>(CollKind::kAllGather),
              "Collective and CollKind name the same collectives");

Status Communicator::explainCollective(Collective kind, size_t count, DataType dtype, ReduceOp op, bool capturing,
                                       std::vector<AlgorithmChoice>* out) const {
  clearError();
  const char* what = kind == Collective::kAllReduce ? "explainAllReduce" : "explainCollective";
  if (!out) return TPCOMM_INVALID("%s: out is null", what);
  out->clear();
  if (!impl_ || impl_->destroyed) return TPCOMM_INVALID("%s: the communicator was destroyed", what);
  if (static_cast<int>(kind) < 0 || static_cast<int>(kind) > static_cast<int>(Collective::kAllGather))
    return TPCOMM_INVALID("%s: kind %d: expected Collective::kAllReduce, kReduceScatter or kAllGather", what,
                          static_cast<int>(kind));
  const CollKind k = static_cast<CollKind>(kind);
  if (k == CollKind::kAllGather) op = ReduceOp::kSum;
  // Any non-null pointer passes validateCall's null checks: nothing is read or written here.
  int probe = 0;
  TPCOMM_TRY(validateCall(what, &probe, &probe, count, dtype, op, impl_->ctx->nRanks, k != CollKind::kAllReduce));
  const size_t pieces = k == CollKind::kAllReduce ? 1 : static_cast<size_t>(impl_->ctx->nRanks);
  const AlgoQuery q{k, dtype, op, count * dataTypeSize(dtype) * pieces, capturing};
  for (const Candidate& c :
       selectAlgorithms(impl_->algoList, impl_->ctx->topo, q, impl_->override, false, impl_->tuning.table.get()))
    out->push_back({c.algo->name(), c.costUs, c.forced, c.algo->available()});
  return Status::kOk;
}

}  // namespace tpcomm
