// Communicator: the public API's entry points. Each checks its arguments and hands the call to
// runCollective (call_path.cc); create runs the steps of bring_up.h. The explain calls (the
// selection reported instead of run) are in call_path.cc, beside the lookup they mirror.
#include "tpcomm/communicator.h"

#include <chrono>
#include <cmath>
#include <string>
#include <thread>

#include "algos/fused/fused_rmsnorm.h"
#include "bootstrap/bootstrap_timeout.h"
#include "collectives/call_checks.h"
#include "collectives/communicator_impl.h"
#include "collectives/registry.h"
#include "common/log.h"
#include "common/params.h"
#include "tpcomm/rmsnorm.h"
#include "transports/cuda_p2p.h"
#include "transports/host_staged.h"
#include "transports/multicast.h"
#include "transports/nccl_transport.h"

namespace tpcomm {

namespace {

// Opening of every collective entry point: clears the thread's error, takes the communicator for
// this thread (one atomic exchange; a second caller at once is refused: two threads in one call
// would share its state and crash), rejects use after destroy(), reports an earlier asynchronous
// failure. The destructor gives the communicator back.
class CallScope {
 public:
  CallScope(Communicator& self, Communicator::Impl* impl, const char* what) {
    clearError();
    if (!impl) {
      status_ = TPCOMM_INVALID("%s: the communicator was destroyed", what);
      return;
    }
    if (impl->inCall.exchange(true, std::memory_order_acquire)) {
      status_ = busy(what);
      return;
    }
    held_ = impl;
    if (impl->destroyed) {
      status_ = TPCOMM_INVALID("%s: the communicator was destroyed", what);
      return;
    }
    status_ = self.checkError();
  }
  ~CallScope() {
    if (held_) held_->inCall.store(false, std::memory_order_release);
  }
  CallScope(const CallScope&) = delete;
  CallScope& operator=(const CallScope&) = delete;
  Status status() const { return status_; }
  static Status busy(const char* what) {
    return TPCOMM_INVALID(
        "%s: another thread is inside a call on this communicator: a communicator takes one caller at a time (like "
        "an NCCL communicator); serialize the calls or give each thread its own communicator",
        what);
  }

 private:
  Communicator::Impl* held_ = nullptr;
  Status status_ = Status::kOk;
};

}  // namespace

Communicator::Impl::~Impl() {
  algos.clear();  // algorithms first: they point into the context's transports
  if (ctx) freeErrorWord(ctx.get());
#ifdef TPCOMM_HAVE_CUDA
  if (streamOrderEvent) cudaEventDestroy(static_cast<cudaEvent_t>(streamOrderEvent));
#endif
}

namespace {

// Frees what one rank owns, peers not consulted: algorithms first (they point into the
// transports), then the transports, the error word and the stream-order event.
void releaseLocal(Communicator::Impl& impl) {
  AlgoContext& c = *impl.ctx;
  impl.algos.clear();
  impl.algoList.clear();
  c.nccl.reset();
  c.multicast.reset();
  c.p2p.reset();
  c.hostStaged.reset();
  freeErrorWord(&c);
#ifdef TPCOMM_HAVE_CUDA
  if (impl.streamOrderEvent) cudaEventDestroy(static_cast<cudaEvent_t>(impl.streamOrderEvent));
#endif
  impl.streamOrderEvent = nullptr;
  impl.destroyed = true;
}

}  // namespace

namespace {
// A step of create that failed on a peer (a timeout, a peer's failure) says which step it was.
Status createStep(const char* step, Status s) {
  if (s != Status::kTimeout && s != Status::kRemoteError) return s;
  return prefixError(s, (std::string("create, ") + step).c_str());
}
}  // namespace

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Communicator::~Communicator() {
  if (impl_ && !impl_->destroyed) destroy();
}

Status Communicator::create(Bootstrap& bootstrap, int device, const Config& config,
                            std::unique_ptr<Communicator>* out) {
  clearError();
  if (!out) return TPCOMM_INVALID("create: out is null");
  out->reset();
  TPCOMM_TRY(checkCreateArgs(bootstrap, device, config));
  DeviceGuard guard(device);
  // An explicit bound bounds the bootstrap's exchanges too (over TPCOMM_TIMEOUT_MS).
  auto impl = std::make_unique<Impl>();
  impl->bootstrap = &bootstrap;
  impl->setupTimeoutMs = config.setupTimeoutMs > 0 ? config.setupTimeoutMs : config.timeoutMs;
  impl->setupTimeoutSource = config.setupTimeoutMs > 0 ? "Config::setupTimeoutMs" : "Config::timeoutMs";
  ScopedBootstrapTimeout bound(impl->setupTimeoutMs, impl->setupTimeoutSource);
  TPCOMM_TRY(createStep("agreeing on settings", agreeOnSettings(bootstrap, config, &impl->override)));
  TPCOMM_TRY(createStep("probing the topology", initContext(bootstrap, device, config, impl->ctx.get())));
  TPCOMM_TRY(createStep("loading the tuning table", loadTuning(bootstrap, impl->ctx->topo, &impl->tuning)));
  impl->algos = makeAlgorithms(impl->ctx.get());
  impl->algoList = rawList(impl->algos);
  TPCOMM_TRY(createStep("loading kernels", preloadAlgorithms(bootstrap, *impl->ctx, impl->algos)));
  TPCOMM_TRY(createStep("checking residency", checkResidency(bootstrap, *impl->ctx)));
  TPCOMM_TRY(
      createStep("bringing up transports", bringUpTransports(bootstrap, config, impl->algos, impl->ctx.get(), &impl->transports)));
  TPCOMM_TRY(createStep("setting up algorithms", setUpAlgorithms(bootstrap, impl->algos)));
  warnUnrunnableOverrides(impl->override, impl->algos, impl->transports, impl->ctx->rank);
  if (impl->ctx->rank == 0 && logEnabled(LogLevel::kInfo, kInit)) {
    std::string table = initTable(*impl);
    TPCOMM_INFO(kInit, "\n%s", table.c_str());
  }
  out->reset(new Communicator(std::move(impl)));
  return Status::kOk;
}

Status Communicator::createGroup(const std::vector<int>& devices, const Config& config,
                                 std::vector<std::unique_ptr<Communicator>>* out) {
  clearError();
  if (!out) return TPCOMM_INVALID("createGroup: out is null");
  out->clear();
  if (devices.empty()) return TPCOMM_INVALID("createGroup: devices is empty");
  for (size_t i = 0; i < devices.size(); ++i) {
    if (devices[i] < 0)
      return TPCOMM_INVALID("createGroup: devices[%zu] = %d: expected a CUDA device index >= 0", i, devices[i]);
    for (size_t j = 0; j < i; ++j)
      if (devices[j] == devices[i] && paramInt(ParamId::kAllowSharedDevice) == 0)
        return TPCOMM_INVALID(
            "createGroup: device %d appears twice: one GPU per rank (TPCOMM_ALLOW_SHARED_DEVICE=1 lets tests share "
            "one)",
            devices[i]);
  }
  const int n = static_cast<int>(devices.size());
  auto group = ThreadGroup::create(n);
  std::vector<std::unique_ptr<Communicator>> comms(n);
  std::vector<Status> status(n, Status::kOk);
  std::vector<std::string> messages(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<Bootstrap> bs;
      status[r] = makeThreadBootstrap(group, r, &bs);
      if (status[r] == Status::kOk) status[r] = create(*bs, devices[r], config, &comms[r]);
      if (status[r] == Status::kOk) comms[r]->impl_->ownedBootstrap = std::move(bs);
      messages[r] = lastErrorMessage();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r)
    if (status[r] != Status::kOk)
      return setError(status[r], __FILE__, __LINE__, "createGroup: rank %d (device %d): %s", r, devices[r],
                      messages[r].c_str());
  *out = std::move(comms);
  return Status::kOk;
}

Status Communicator::groupStart() {
  TPCOMM_TRY(ncclGroupStartIfAny());
  normGroupStarted();  // norms after ring_nccl wait for the outermost groupEnd
  return Status::kOk;
}
Status Communicator::groupEnd() { return normGroupEnded(ncclGroupEndIfAny()); }

namespace {
// Both allReduce overloads after their own checks; compression -1: the communicator's.
Status runAllReduce(Communicator::Impl& impl, const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                    cudaStream_t stream, int compression) {
  DeviceGuard guard(impl.ctx->device);
  TPCOMM_TRY(validateCall("allReduce", send, recv, count, dtype, op, impl.ctx->nRanks, false));
  const size_t bytes = count * dataTypeSize(dtype);
  TPCOMM_TRY(checkOverlap("allReduce", send, bytes, recv, bytes, send == recv));
  CollArgs a = collArgs(CollKind::kAllReduce, send, recv, count, dtype, op, stream);
  a.compression = compression;
  return runCollective(impl, a, nullptr, "allReduce");
}
}  // namespace

Status Communicator::allReduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                               cudaStream_t stream) {
  CallScope scope(*this, impl_.get(), "allReduce");
  TPCOMM_TRY(scope.status());
  return runAllReduce(*impl_, send, recv, count, dtype, op, stream, -1);
}

Status Communicator::allReduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                               cudaStream_t stream, Compression compression) {
  CallScope scope(*this, impl_.get(), "allReduce");
  TPCOMM_TRY(scope.status());
  if (compression != Compression::kNone && compression != Compression::kFp8 && compression != Compression::kInt8)
    return TPCOMM_INVALID("allReduce: compression %d: expected Compression::kNone, kFp8 or kInt8",
                          static_cast<int>(compression));
  // Asked for by name on this call, a compressed max or min is refused rather than quietly run
  // uncompressed (a quantized max is not the max); the communicator-wide setting falls back.
  if (compression != Compression::kNone && op != ReduceOp::kSum)
    return TPCOMM_INVALID("allReduce: compression %s with op %s: only sums are compressed; pass Compression::kNone",
                          compressionName(compression), reduceOpName(op));
  return runAllReduce(*impl_, send, recv, count, dtype, op, stream, static_cast<int>(compression));
}

Status Communicator::reduceScatter(const void* send, void* recv, size_t recvCount, DataType dtype, ReduceOp op,
                                   cudaStream_t stream) {
  CallScope scope(*this, impl_.get(), "reduceScatter");
  TPCOMM_TRY(scope.status());
  DeviceGuard guard(impl_->ctx->device);
  TPCOMM_TRY(validateCall("reduceScatter", send, recv, recvCount, dtype, op, impl_->ctx->nRanks, true));
  const size_t piece = recvCount * dataTypeSize(dtype);
  TPCOMM_TRY(checkOverlap("reduceScatter", send, piece * impl_->ctx->nRanks, recv, piece,
                          isAtOffset(recv, send, piece * impl_->ctx->rank)));
  CollArgs a = collArgs(CollKind::kReduceScatter, send, recv, recvCount, dtype, op, stream);
  return runCollective(*impl_, a, nullptr, "reduceScatter");
}

Status Communicator::allGather(const void* send, void* recv, size_t sendCount, DataType dtype, cudaStream_t stream) {
  CallScope scope(*this, impl_.get(), "allGather");
  TPCOMM_TRY(scope.status());
  DeviceGuard guard(impl_->ctx->device);
  TPCOMM_TRY(validateCall("allGather", send, recv, sendCount, dtype, ReduceOp::kSum, impl_->ctx->nRanks, true));
  const size_t piece = sendCount * dataTypeSize(dtype);
  TPCOMM_TRY(checkOverlap("allGather", send, piece, recv, piece * impl_->ctx->nRanks,
                          isAtOffset(send, recv, piece * impl_->ctx->rank)));
  CollArgs a = collArgs(CollKind::kAllGather, send, recv, sendCount, dtype, ReduceOp::kSum, stream);
  return runCollective(*impl_, a, nullptr, "allGather");
}

Status Communicator::allReduceResidualRmsNorm(const void* in, void* residualInOut, const void* weight, float eps,
                                              void* out, size_t rows, size_t hidden, DataType dtype,
                                              cudaStream_t stream) {
  static const char* const kWhat = "allReduceResidualRmsNorm";
  CallScope scope(*this, impl_.get(), kWhat);
  TPCOMM_TRY(scope.status());
  DeviceGuard guard(impl_->ctx->device);
  TPCOMM_TRY(validateNorm(kWhat, "in", in, residualInOut, weight, eps, out, rows, hidden, dtype));
  CollArgs a = collArgs(CollKind::kAllReduce, in, out, rows * hidden, dtype, ReduceOp::kSum, stream);
  NormArgs norm;
  norm.residual = residualInOut;
  norm.weight = weight;
  norm.eps = eps;
  norm.rows = rows;
  norm.hidden = hidden;
  return runCollective(*impl_, a, &norm, kWhat);
}

Status Communicator::checkError() {
  if (!impl_ || impl_->destroyed) return TPCOMM_INVALID("checkError: the communicator was destroyed");
  const uint32_t w = impl_->ctx->asyncError.read();
  if (w == 0) return Status::kOk;
  const Status s = asyncErrorStatus(w);
  const int peer = asyncErrorPeer(w);
  const int me = impl_->ctx->rank, boundMs = impl_->ctx->timeoutMs;
  // What the waiter saw of the late rank ("" when it could not tell).
  const std::string late = s == Status::kTimeout && peer >= 0 ? latenessText(w, boundMs) : std::string();
  // The word names the rank that did not arrive, not the one whose wait expired: a rank that
  // finds itself named learned of the timeout from a peer's poison.
  if (s == Status::kTimeout && peer == me && !late.empty())
    return setError(s, __FILE__, __LINE__,
                    "rank %d: a peer's collective timed out after %d ms waiting for this rank: %s; the communicator "
                    "is unusable (destroy or abort it)",
                    me, boundMs, late.c_str());
  if (s == Status::kTimeout && peer == me)
    return setError(s, __FILE__, __LINE__,
                    "rank %d: a peer's collective timed out after %d ms waiting for this rank (rank %d was late: "
                    "busy, blocked, or its call was never made); the communicator is unusable (destroy or abort it)",
                    me, boundMs, peer);
  if (s == Status::kTimeout && peer >= 0)
    return setError(s, __FILE__, __LINE__,
                    "rank %d: a collective timed out after %d ms waiting for rank %d%s%s; the communicator is unusable "
                    "(destroy or abort it)",
                    me, boundMs, peer, late.empty() ? "" : ": ", late.c_str());
  if (s == Status::kTimeout)
    return setError(s, __FILE__, __LINE__,
                    "rank %d: a peer's wait timed out after %d ms at an earlier barrier (a peer was late or gone); "
                    "the communicator is unusable (destroy or abort it)",
                    me, boundMs);
  if (s == Status::kInvalidArgument && peer >= 0)
    return setError(s, __FILE__, __LINE__,
                    "rank %d: a call differed from rank %d's (collective, count, dtype, op or fused; found by "
                    "TPCOMM_CHECK_CALLS): every rank must make the same calls in the same order; the communicator "
                    "is unusable",
                    me, peer);
  if (s == Status::kRemoteError && peer < 0)
    return setError(s, __FILE__, __LINE__, "rank %d: the communicator was aborted; destroy it", me);
  if (s == Status::kRemoteError)
    return setError(s, __FILE__, __LINE__,
                    "rank %d: rank %d aborted its communicator; this one is unusable (destroy or abort it)", me, peer);
  return setError(s, __FILE__, __LINE__,
                  "rank %d: an earlier collective failed (peer %d); the communicator is unusable", me, peer);
}

Status Communicator::destroy() {
  clearError();
  if (!impl_ || impl_->destroyed) return TPCOMM_INVALID("destroy: the communicator was already destroyed");
  if (impl_->inCall.exchange(true, std::memory_order_acquire)) return CallScope::busy("destroy");
  AlgoContext& c = *impl_->ctx;
  Status result = Status::kOk;
  {
    DeviceGuard guard(c.device);
#ifdef TPCOMM_HAVE_CUDA
    // Kernels in flight read transport memory; every wait in them is bounded, so this returns.
    // A createGroup communicator is destroyed by the one thread that drives all ranks, so it
    // cannot wait for its peers at a barrier: it drains every device of the group instead.
    if (c.device >= 0) {
      for (const RankDevice& d : c.topo.ranks) {
        bool drain =
            d.cudaDevice == c.device || (impl_->ownedBootstrap && d.processId == c.topo.ranks[c.rank].processId);
        if (drain && (cudaSetDevice(d.cudaDevice) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess))
          cudaGetLastError();
      }
      cudaSetDevice(c.device);
    }
#endif
    // No peer may still read our buffers when we free them.
    if (c.nRanks > 1 && impl_->bootstrap && !impl_->ownedBootstrap) {
      ScopedBootstrapTimeout bound(impl_->setupTimeoutMs, impl_->setupTimeoutSource);
      result = impl_->bootstrap->barrier();
      if (result != Status::kOk) prefixError(result, "destroy, the closing barrier");
    }
    releaseLocal(*impl_);
  }
  impl_->inCall.store(false, std::memory_order_release);
  return result;
}

Status Communicator::abort() {
  clearError();
  if (!impl_ || impl_->destroyed) return TPCOMM_INVALID("abort: the communicator was already destroyed");
  AlgoContext& c = *impl_->ctx;
  DeviceGuard guard(c.device);
  // Every wait of this rank's kernels polls the error word (host memory, staged_host and
  // multicast) or the poison word (device memory, the P2P kernels): setting both ends them now.
  if (c.asyncError.word && *c.asyncError.word == 0) *c.asyncError.word = AsyncError::encode(Status::kRemoteError, -1);
#ifdef TPCOMM_HAVE_CUDA
  if (c.device >= 0) {
    // The host segment's failure word (host memory, every rank's GPU and host read it): a peer's
    // staged_host kernel spinning on this rank's flags ends now, and its host reports that rank
    // c.rank aborted. First failure wins: an earlier timeout's code stays.
    if (c.hostStaged) {
      uint32_t none = 0;
      __atomic_compare_exchange_n(c.hostStaged->poisonWord(), &none, AsyncError::encode(Status::kRemoteError, c.rank),
                                  false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    }
    if (c.p2p) {
      // Every rank's poison word, peers' too: a peer spinning on this rank's flags ends now and
      // reports that rank c.rank aborted, instead of waiting out its timeout (and, where ranks
      // share this GPU, holding up the device drain below for that long).
      static const uint32_t kSelf = AsyncError::encode(Status::kRemoteError, -1);
      const uint32_t peerWord = AsyncError::encode(Status::kRemoteError, c.rank);
      cudaStream_t s = nullptr;
      if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess) {
        // Copies on their own stream run beside a spinning kernel (copy engine).
        for (int r = 0; r < c.nRanks; ++r)
          cudaMemcpyAsync(c.p2p->base(r) + c.p2p->layout().poisonOffset, r == c.rank ? &kSelf : &peerWord,
                          sizeof(uint32_t), cudaMemcpyHostToDevice, s);
        cudaStreamSynchronize(s);
        cudaStreamDestroy(s);
      }
    }
    if (c.nccl) c.nccl->abort();
    cudaDeviceSynchronize();  // bounded: every kernel of this rank has just been told to stop
    cudaGetLastError();
  }
#endif
  // Another thread may be inside a call (a host rank waiting for a peer): every wait of that call
  // is bounded by the timeout, so it returns, and only then is what it uses freed.
  const auto giveUp = std::chrono::steady_clock::now() + std::chrono::milliseconds(c.timeoutMs + 2000);
  while (impl_->inCall.exchange(true, std::memory_order_acquire)) {
    if (std::chrono::steady_clock::now() > giveUp)
      return TPCOMM_ERROR(kTimeout,
                          "abort: another thread's call on this communicator did not return within %d ms; nothing was "
                          "freed (destroy the communicator once that call has returned)",
                          c.timeoutMs + 2000);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  releaseLocal(*impl_);
  impl_->inCall.store(false, std::memory_order_release);
  return Status::kOk;
}

Status residualRmsNorm(const void* x, void* residualInOut, const void* weight, float eps, void* out, size_t rows,
                       size_t hidden, DataType dtype, cudaStream_t stream) {
  clearError();
  TPCOMM_TRY(validateNorm("residualRmsNorm", "x", x, residualInOut, weight, eps, out, rows, hidden, dtype));
  RmsNormLaunch l{};
  l.x = x;
  l.residual = residualInOut;
  l.weight = weight;
  l.out = out;
  l.eps = eps;
  l.rows = rows;
  l.hidden = hidden;
  l.dtype = static_cast<int>(dtype);
  return TPCOMM_CUDA_ONLY(launchResidualRmsNorm(l, stream));
}

const char* Communicator::lastAlgorithm() const { return impl_ ? impl_->lastAlgorithm : "none"; }
int Communicator::rank() const { return impl_ && impl_->ctx ? impl_->ctx->rank : -1; }
int Communicator::size() const { return impl_ && impl_->ctx ? impl_->ctx->nRanks : 0; }
int Communicator::device() const { return impl_ && impl_->ctx ? impl_->ctx->device : -1; }

}  // namespace tpcomm
