#include "algos/staged_host.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "algos/host_reduce.h"
#include "collectives/comm_context.h"
#include "common/error.h"
#include "transports/host_staged.h"

namespace tpcomm {

namespace {
constexpr size_t kVecBytes = 16;
}

bool StagedHostAlgorithm::available() const { return !ctx_ || ctx_->hostStaged != nullptr; }

bool StagedHostAlgorithm::supports(const Topology& topo, const AlgoQuery& q, std::string* whyNot) const {
  if (!topo.singleNode()) {
    if (whyNot) *whyNot = "ranks span several nodes";
    return false;
  }
  if (topo.allGpu()) {
    if (q.capturing) {
      if (whyNot) *whyNot = "sequence numbers are host-side: not CUDA-graph capturable";
      return false;
    }
    if (q.kind != CollKind::kAllReduce) {
      if (whyNot) *whyNot = "GPU ranks: all-reduce only";
      return false;
    }
    return true;
  }
  if (!topo.allHost()) {
    if (whyNot) *whyNot = "mixed host and GPU ranks";
    return false;
  }
  return true;
}

double StagedHostAlgorithm::costUs(const Topology& topo, const AlgoQuery& q) const {
  int n = topo.nRanks();
  double b = static_cast<double>(q.bytes);
  if (topo.allGpu()) {
    // Kernel launch plus flag round trips over PCIe to host memory; each GPU streams N bytes
    // out and (n-1) N bytes back in, ~20 GB/s effective after the pipeline's bubbles.
    return alphaBetaUs(12.0, 20.0 / (n > 1 ? n - 1 : 1), b);
  }
  // Host ranks: three barriers and ~2.75 N bytes of memory traffic per rank.
  return alphaBetaUs(3.0 * n, 4.0, b);
}

Status StagedHostAlgorithm::run(const CollArgs& a) {
  if (!ctx_ || !ctx_->hostStaged) return TPCOMM_ERROR(kInternal, "staged_host: no transport");
  if (ctx_->device >= 0) return runDevice(a);
  Status s = ctx_->hostStaged->sameProcess() ? runHostThreads(a) : runHostProcesses(a);
  // A host barrier that timed out leaves its arrival counted: the segment's barrier is out of
  // step for good. Mark the communicator failed so later calls return kTimeout (checkError)
  // instead of passing a barrier their peer never reached and reading stale pointers.
  if (s == Status::kTimeout && ctx_->asyncError.word && *ctx_->asyncError.word == 0)
    *ctx_->asyncError.word = AsyncError::encode(s, -1);
  return s;
}

Status StagedHostAlgorithm::runHostThreads(const CollArgs& a) {
  HostStagedTransport& t = *ctx_->hostStaged;
  const int n = t.nRanks(), me = t.rank();
  const size_t es = a.elemSize();
  std::vector<const void*> sends(n);
  std::vector<void*> recvs(n);
  TPCOMM_TRY(t.exchangePointers(a.send, a.recv, sends.data(), recvs.data()));
  std::vector<const void*> srcs(n);
  switch (a.kind) {
    case CollKind::kAllReduce: {
      size_t b, e;
      partition(a.count, n, me, kVecBytes / es, &b, &e);
      for (int r = 0; r < n; ++r) srcs[r] = static_cast<const char*>(sends[r]) + b * es;
      hostReduce(static_cast<char*>(a.recv) + b * es, srcs.data(), n, e - b, a.dtype, a.op);
      TPCOMM_TRY(t.barrier());
      for (int r = 0; r < n; ++r) {
        if (r == me) continue;
        partition(a.count, n, r, kVecBytes / es, &b, &e);
        std::memcpy(static_cast<char*>(a.recv) + b * es, static_cast<const char*>(recvs[r]) + b * es, (e - b) * es);
      }
      return t.barrier();
    }
    case CollKind::kReduceScatter: {
      for (int r = 0; r < n; ++r) srcs[r] = static_cast<const char*>(sends[r]) + me * a.count * es;
      hostReduce(a.recv, srcs.data(), n, a.count, a.dtype, a.op);
      return t.barrier();
    }
    case CollKind::kAllGather: {
      for (int r = 0; r < n; ++r) {
        char* dst = static_cast<char*>(a.recv) + r * a.count * es;
        if (dst != sends[r]) std::memcpy(dst, sends[r], a.count * es);
      }
      return t.barrier();
    }
  }
  return TPCOMM_ERROR(kInternal, "staged_host: unknown collective");
}

Status StagedHostAlgorithm::runHostProcesses(const CollArgs& a) {
  HostStagedTransport& t = *ctx_->hostStaged;
  const int n = t.nRanks(), me = t.rank();
  const size_t es = a.elemSize();
  const size_t cap = t.slotsBytes() / es;  // elements one rank can stage at once
  std::vector<const void*> srcs(n);
  const char* send = static_cast<const char*>(a.send);
  char* recv = static_cast<char*>(a.recv);
  switch (a.kind) {
    case CollKind::kAllReduce:
      for (size_t off = 0; off < a.count; off += cap) {
        size_t len = a.count - off < cap ? a.count - off : cap;
        std::memcpy(t.slots(me), send + off * es, len * es);
        TPCOMM_TRY(t.barrier());
        size_t b, e;
        partition(len, n, me, kVecBytes / es, &b, &e);
        for (int r = 0; r < n; ++r) srcs[r] = t.slots(r) + b * es;
        hostReduce(t.result() + b * es, srcs.data(), n, e - b, a.dtype, a.op);
        TPCOMM_TRY(t.barrier());
        std::memcpy(recv + off * es, t.result(), len * es);
        TPCOMM_TRY(t.barrier());
      }
      return Status::kOk;
    case CollKind::kReduceScatter: {
      const size_t per = cap / n;  // elements of each destination's piece per round
      for (size_t off = 0; off < a.count; off += per) {
        size_t len = a.count - off < per ? a.count - off : per;
        for (int r = 0; r < n; ++r) std::memcpy(t.slots(me) + r * len * es, send + (r * a.count + off) * es, len * es);
        TPCOMM_TRY(t.barrier());
        for (int r = 0; r < n; ++r) srcs[r] = t.slots(r) + me * len * es;
        hostReduce(recv + off * es, srcs.data(), n, len, a.dtype, a.op);
        TPCOMM_TRY(t.barrier());
      }
      return Status::kOk;
    }
    case CollKind::kAllGather:
      for (size_t off = 0; off < a.count; off += cap) {
        size_t len = a.count - off < cap ? a.count - off : cap;
        std::memcpy(t.slots(me), send + off * es, len * es);
        TPCOMM_TRY(t.barrier());
        for (int r = 0; r < n; ++r) std::memcpy(recv + (r * a.count + off) * es, t.slots(r), len * es);
        TPCOMM_TRY(t.barrier());
      }
      return Status::kOk;
  }
  return TPCOMM_ERROR(kInternal, "staged_host: unknown collective");
}

Status StagedHostAlgorithm::runDevice(const CollArgs& a) {
  HostStagedTransport& t = *ctx_->hostStaged;
  const auto& g = t.geometry();
  StagedDeviceLaunch p{};
  p.send = a.send;
  p.recv = a.recv;
  p.count = a.count;
  p.dtype = static_cast<int>(a.dtype);
  p.op = static_cast<int>(a.op);
  p.rank = t.rank();
  p.nRanks = t.nRanks();
  p.slots = t.slot(0, 0);
  p.nSlots = g.slots;
  p.chunkBytes = g.chunkBytes;
  p.blocks = g.blocks;
  p.ready = t.readyFlags();
  p.consumed = t.consumedFlags();
  size_t chunks = (a.count * a.elemSize() + g.chunkBytes - 1) / g.chunkBytes;
  p.seqBase = t.takeSequence(chunks);
  p.errorWord = ctx_->asyncError.deviceWord;
  p.timeoutNs = static_cast<uint64_t>(ctx_->timeoutMs) * 1000000ull;
  return launchStagedDevice(p, a.stream);
}

#ifndef TPCOMM_HAVE_CUDA
Status launchStagedDevice(const StagedDeviceLaunch&, cudaStream_t) {
  return TPCOMM_ERROR(kNotSupported, "staged_host: built without CUDA");
}
#endif

}  // namespace tpcomm
