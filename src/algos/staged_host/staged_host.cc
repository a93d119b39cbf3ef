// staged_host: every collective through host memory (the host_staged transport). The path for
// GPUs without P2P and for CPU ranks.
//
// Host ranks, threads of one process: zero-copy. Ranks swap (send, recv) pointers (one
// barrier), rank r reduces slice r of every rank's send buffer (rank order 0..n-1, fp32
// accumulation) and stores it into slice r of every rank's recv, then a barrier. Per rank and
// message byte: one read, one write, the least possible; two barriers per call.
// Host ranks, separate processes: recv buffers are private, so results travel through the
// shared segment. A three-stage pipeline over chunks with one barrier per round: copy in the
// slices the peers reduce, reduce my slice (my own input read in place) into recv and the
// shared result, copy the peers' slices out of the shared result (allReduceProcesses in the
// .cc explains why one barrier per round is enough).
// Outputs of 8 MiB and more are written with non-temporal stores (no read-for-ownership).
// GPU ranks: one kernel per call (staged_host.cu), no host thread involved; see there. With
// TPCOMM_STAGED_COPY_ENGINES=1 (experimental) the copy engines move the bytes between small flag
// and reduce kernels on four internal streams (staged_host_ce.cu).
// staged_host+fp8 / staged_host+int8 (Config::compression): the same class with a wire format,
// all-reduce sums: host ranks run staged_host_compressed.cc's schedule, GPU ranks
// staged_host_compressed.cu's kernel (same slots, flags and sequence numbers as the plain kernel).
#include "algos/staged_host/staged_host.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "algos/common/algorithm.h"
#include "algos/common/call_signature.h"
#include "algos/compressed/quantize.h"
#include "algos/host/host_reduce.h"
#include "algos/staged_host/staged_host_ce.h"
#include "algos/staged_host/staged_pieces.h"
#include "common/error.h"
#include "common/params.h"
#include "transports/host_staged.h"

namespace tpcomm {

namespace {
constexpr size_t kVecBytes = 16;
// Threads mode: a peer-access phase checks for a broken barrier between blocks of this many bytes
// (a few microseconds of work: how long a timed-out peer waits for it to stop).
constexpr size_t kAccessBlockBytes = size_t{256} << 10;
// Outputs of at least this many bytes per rank are written with streaming (non-temporal)
// stores: they are far larger than L2 and nobody reads them before the call returns, so the
// read-for-ownership of every output line would be wasted memory traffic.
constexpr size_t kStreamingMinBytes = size_t{8} << 20;
// Processes: the staging area of each rank is split into this many chunk buffers, the
// pipeline's depth (chunk c lives in buffer c % kBuffers). Two is the least that lets one
// barrier per round separate every write from its reads (see allReduceProcesses).
constexpr size_t kBuffers = 2;

// All-reduce across processes: a three-stage pipeline over chunks, one barrier per round.
// Round j: copy out chunk j-2 (the other ranks' slices, from the shared result into recv),
// copy in chunk j (the slices other ranks reduce, from send into my staging buffer), reduce my
// slice of chunk j-1 (my own slice straight from send, the others' from their staging buffers)
// into recv and into the shared result; then barrier. Rounds = chunks + 2.
// Why one barrier suffices: staging buffer c % 2 is written in round c and read in round c+1,
// next written in round c+2; result buffer c % 2 is written in round c+1 and read in round c+2,
// next written in round c+3; a barrier ends every round. The last round (copy out only) needs
// no barrier: the only shared area it reads, the result, is next written after the first
// barrier of the next call, which this rank reaches only after its copy-out.
// Per rank and byte of the message: read send once, write recv once (memory), plus 3/4 staged
// and 1/4 result in and out of the staging area, which stays in cache.
Status allReduceProcesses(HostStagedTransport& t, const CollArgs& a) {
  const int n = t.nRanks(), me = t.rank();
  const size_t es = a.elemSize(), align = kVecBytes / es;
  const size_t chunk = t.slotsBytes() / kBuffers / es;  // elements per round
  const size_t chunks = (a.count + chunk - 1) / chunk;
  const bool streaming = a.count * es >= kStreamingMinBytes;
  const char* send = static_cast<const char*>(a.send);
  char* recv = static_cast<char*>(a.recv);
  auto staged = [&](int r, size_t c) { return t.slots(r) + (c % kBuffers) * chunk * es; };
  auto result = [&](size_t c) { return t.result() + (c % kBuffers) * chunk * es; };
  auto length = [&](size_t c) { return a.count - c * chunk < chunk ? a.count - c * chunk : chunk; };
  std::vector<const void*> srcs(n);
  size_t b, e;
  for (size_t j = 0; j < chunks + 2; ++j) {
    if (j >= 2) {  // copy out chunk j-2
      const size_t c = j - 2, off = c * chunk;
      for (int q = 0; q < n; ++q) {
        if (q == me) continue;
        partition(length(c), n, q, align, &b, &e);
        hostCopy(recv + (off + b) * es, result(c) + b * es, (e - b) * es, streaming);
      }
      if (j == chunks + 1) break;
    }
    if (j < chunks) {  // copy in chunk j
      const size_t off = j * chunk;
      for (int q = 0; q < n; ++q) {
        if (q == me) continue;
        partition(length(j), n, q, align, &b, &e);
        std::memcpy(staged(me, j) + b * es, send + (off + b) * es, (e - b) * es);
      }
    }
    if (j >= 1 && j - 1 < chunks) {  // reduce chunk j-1
      const size_t c = j - 1, off = c * chunk;
      partition(length(c), n, me, align, &b, &e);
      for (int r = 0; r < n; ++r) srcs[r] = r == me ? send + (off + b) * es : staged(r, c) + b * es;
      void* dsts[2] = {recv + (off + b) * es, result(c) + b * es};
      hostReduceTo(dsts, 2, srcs.data(), n, e - b, a.dtype, a.op, streaming ? 1u : 0u);
    }
    TPCOMM_TRY(t.barrier());
  }
  if (streaming) hostStreamFence();
  return Status::kOk;
}
class StagedHost final : public AlgorithmBase {
 public:
  StagedHost(const AlgoContext* ctx, Compression wire)
      : AlgorithmBase(ctx,
                      wire == Compression::kFp8    ? "staged_host+fp8"
                      : wire == Compression::kInt8 ? "staged_host+int8"
                                                   : "staged_host",
                      "host_staged"),
        wire_(wire) {}
  bool supports(const Topology& topo, const AlgoQuery& q, std::string* whyNot) const override;
  // Uncompressed: fp32 in rank order, per element. Compressed: an element depends on its block.
  bool deterministic() const override { return wire_ == Compression::kNone; }
  Compression compression() const override { return wire_; }
  Status preload() override {
    if (wire_ != Compression::kNone) return TPCOMM_CUDA_ONLY(preloadStagedCompressedKernels());
    TPCOMM_TRY(TPCOMM_CUDA_ONLY(preloadStagedDevice()));
    // Before the transports exist (create preloads first), so by the setting they will follow.
    return paramInt(ParamId::kStagedCopyEngines) != 0 ? TPCOMM_CUDA_ONLY(preloadStagedCe()) : Status::kOk;
  }
  Status run(const CollArgs& args) override;

 private:
  Status runHostThreads(const CollArgs& a);
  Status runHostProcesses(const CollArgs& a);
  Status runDevice(const CollArgs& a);
  HostStagedTransport::CallWords signature(const CollArgs& a) const;
  Compression wire_;
  uint64_t calls_ = 0;  // this rank's host calls so far (pairs by barrier order, so a check of the pairing)
};

// Every rank's call signature against rank 0's: a rank that passes another
// count, dtype, op or collective, or that is a call ahead or behind, would otherwise read or write
// past a peer's buffer (threads) or pair with the wrong data (processes). Every rank sees the
// same table, so every rank fails alike, naming the ranks and fields that differ.
Status checkSignatures(const HostStagedTransport::CallWords* all, int n) {
  static const char* const kField[] = {"collective", "count", "compression/dtype/op", "call number"};
  std::string diff;
  for (int r = 1; r < n; ++r)
    for (int f = 0; f < 4; ++f)
      if (all[r].w[f] != all[0].w[f])
        diff += (diff.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + " " + kField[f] + " " +
                std::to_string(all[r].w[f]) + " vs rank 0 " + std::to_string(all[0].w[f]);
  if (diff.empty()) return Status::kOk;
  return TPCOMM_INVALID("staged_host: the ranks made different calls (%s): every rank must make the same collective "
                        "with the same count, dtype and op, in the same order",
                        diff.c_str());
}

}  // namespace

HostStagedTransport::CallWords StagedHost::signature(const CollArgs& a) const {
  HostStagedTransport::CallWords w{};
  w.w[0] = static_cast<uint64_t>(a.kind);
  w.w[1] = a.count;
  w.w[2] = static_cast<uint64_t>(wire_) << 16 | static_cast<uint64_t>(a.dtype) << 8 | static_cast<uint64_t>(a.op);
  w.w[3] = calls_;
  return w;
}

bool StagedHost::supports(const Topology& topo, const AlgoQuery& q, std::string* whyNot) const {
  if (wire_ != Compression::kNone) {
    const char* why = !topo.singleNode()                    ? "ranks span several nodes"
                      : !topo.allHost() && !topo.allGpu()   ? "mixed host and GPU ranks"
                      : topo.allGpu() && q.capturing        ? "sequence numbers are host-side: not CUDA-graph capturable"
                      : q.kind != CollKind::kAllReduce      ? "compressed: all-reduce only"
                      : q.op != ReduceOp::kSum              ? "compressed: sums only (a quantized max is not the max)"
                                                            : nullptr;
    if (why && whyNot) *whyNot = why;
    return why == nullptr;
  }
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

Status StagedHost::run(const CollArgs& a) {
  if (!ctx_ || !ctx_->hostStaged) return TPCOMM_ERROR(kInternal, "staged_host: no transport");
  if (ctx_->device >= 0) return runDevice(a);
  // Compressed calls go through the staging segment in both modes (runHostProcesses).
  const bool zeroCopy = ctx_->hostStaged->sameProcess() && wire_ == Compression::kNone;
  Status s = zeroCopy ? runHostThreads(a) : runHostProcesses(a);
  // A host barrier that timed out leaves its arrival counted: the segment's barrier is out of
  // step for good. Mark the communicator failed so later calls return kTimeout (checkError)
  // instead of passing a barrier their peer never reached and reading stale pointers. The code is
  // the one the first rank whose wait expired published (naming the late rank and why it was
  // late), the same on every rank.
  if (s == Status::kTimeout && ctx_->asyncError.word && *ctx_->asyncError.word == 0) {
    const uint32_t first = ctx_->hostStaged->failureCode();
    *ctx_->asyncError.word = first != 0 ? first : AsyncError::encode(s, ctx_->hostStaged->firstMissing());
  }
  return s;
}

Status StagedHost::runHostThreads(const CollArgs& a) {
  HostStagedTransport& t = *ctx_->hostStaged;
  const int n = t.nRanks(), me = t.rank();
  const size_t es = a.elemSize();
  std::vector<const void*> sends(n);
  std::vector<void*> recvs(n);
  std::vector<HostStagedTransport::CallWords> words(n);
  TPCOMM_TRY(t.exchangePointers(a.send, a.recv, signature(a), sends.data(), recvs.data(), words.data()));
  ++calls_;
  TPCOMM_TRY(checkSignatures(words.data(), n));
  // Every read or write of a peer's own buffers below is one peer-access phase, checked between
  // blocks of kAccessBlockBytes: a peer whose barrier expired waits for it to stop (the
  // transport's beginPeerAccess), so nothing here touches its buffers after its call returned.
  if (!t.beginPeerAccess()) return t.barrier();  // broken: the barrier reports it
  Status s = Status::kOk;
  std::vector<const void*> srcs(n);
  switch (a.kind) {
    case CollKind::kAllReduce: {
      // Rank me reduces slice me of every send buffer and stores it straight into slice me of
      // every recv buffer: each input byte is read once and each output byte written once
      // (the least traffic there is). In place is safe: slice me of any buffer is read and
      // written by rank me only, a block at a time (read from every rank, then stored).
      size_t b, e;
      partition(a.count, n, me, kVecBytes / es, &b, &e);
      std::vector<void*> dsts(n);
      const bool streaming = a.count * es >= kStreamingMinBytes;
      const size_t step = kAccessBlockBytes / es;
      for (size_t lo = b; lo < e && !t.accessBroken(); lo += step) {
        const size_t len = e - lo < step ? e - lo : step;
        for (int r = 0; r < n; ++r) {
          srcs[r] = static_cast<const char*>(sends[r]) + lo * es;
          dsts[r] = static_cast<char*>(recvs[r]) + lo * es;
        }
        hostReduceTo(dsts.data(), n, srcs.data(), n, len, a.dtype, a.op, streaming ? ~0ull : 0);
      }
      if (streaming) hostStreamFence();
      break;
    }
    case CollKind::kReduceScatter: {
      const size_t step = kAccessBlockBytes / es;
      for (size_t lo = 0; lo < a.count && !t.accessBroken(); lo += step) {
        const size_t len = a.count - lo < step ? a.count - lo : step;
        for (int r = 0; r < n; ++r) srcs[r] = static_cast<const char*>(sends[r]) + (me * a.count + lo) * es;
        hostReduce(static_cast<char*>(a.recv) + lo * es, srcs.data(), n, len, a.dtype, a.op);
      }
      break;
    }
    case CollKind::kAllGather: {
      for (int r = 0; r < n && !t.accessBroken(); ++r) {
        char* dst = static_cast<char*>(a.recv) + r * a.count * es;
        for (size_t off = 0; dst != sends[r] && off < a.count * es && !t.accessBroken(); off += kAccessBlockBytes)
          std::memcpy(dst + off, static_cast<const char*>(sends[r]) + off,
                      std::min(kAccessBlockBytes, a.count * es - off));
      }
      break;
    }
    default:
      s = TPCOMM_ERROR(kInternal, "staged_host: unknown collective");
  }
  t.endPeerAccess();
  TPCOMM_TRY(s);
  return t.barrier();  // every slice of my recv is written (by its owner) when this passes
}

Status StagedHost::runHostProcesses(const CollArgs& a) {
  HostStagedTransport& t = *ctx_->hostStaged;
  const int n = t.nRanks(), me = t.rank();
  const size_t es = a.elemSize();
  const size_t cap = t.slotsBytes() / es;  // elements one rank can stage at once
  if (cap / n == 0) return TPCOMM_ERROR(kInternal, "staged_host: %zu-element slots cannot hold a piece per rank", cap);
  std::vector<HostStagedTransport::CallWords> words(n);
  TPCOMM_TRY(t.exchangeWords(signature(a), words.data()));
  ++calls_;
  TPCOMM_TRY(checkSignatures(words.data(), n));
  if (wire_ != Compression::kNone) return stagedHostCompressedAllReduce(t, a, quantFormatOf(wire_));
  std::vector<const void*> srcs(n);
  const char* send = static_cast<const char*>(a.send);
  char* recv = static_cast<char*>(a.recv);
  switch (a.kind) {
    case CollKind::kAllReduce:
      return allReduceProcesses(t, a);
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

Status StagedHost::runDevice(const CollArgs& a) {
  HostStagedTransport& t = *ctx_->hostStaged;
  const auto& g = t.geometry();
  StagedDeviceLaunch p{};
  static_cast<CallParams&>(p) = callParams(a, t.rank(), t.nRanks());
  p.slots = t.slot(0, 0);
  p.nSlots = g.slots;
  p.chunkBytes = g.chunkBytes;
  p.blocks = g.blocks;
  p.ready = t.readyFlags();
  p.consumed = t.consumedFlags();
  p.errorWord = ctx_->asyncError.deviceWord;
  p.timeoutNs = ctx_->timeoutNs();
  p.poison = t.poisonWord();
  p.callNumber = a.callNumber;
  p.hostCalls = t.callCounters();
  p.arrivals = t.arrivalWords();
  p.signature = ctx_->launch.checkCalls ? callSignature(a, false, wire_) : 0;
  p.signatures = t.signatureFlags();
  if (wire_ != Compression::kNone) {
    // Compressed: the SM kernel's chunks are blocks x quantBlocks quantization blocks (codes +
    // scales fill each piece of a slot; staged_host_compressed.cu).
    p.format = static_cast<int>(quantFormatOf(wire_));
    p.quantBlocks = stagedQuantBlocksPerPiece(g.chunkBytes, g.blocks, kQuantBlockElems);
    if (p.quantBlocks == 0)
      return TPCOMM_ERROR(kNotSupported,
                          "%s: a staging piece (%zu-byte slots / %d blocks) cannot hold one %d-element block's codes "
                          "and scale: raise TPCOMM_STAGED_CHUNK_BYTES",
                          name(), g.chunkBytes, g.blocks, kQuantBlockElems);
    p.twin = t.deviceTwin();
    if (!p.twin) return TPCOMM_ERROR(kInternal, "%s: the staging slots have no device twin", name());
  }
  // The chunks, the same on every rank (agreed inputs): the SM kernels' (a slot's bytes; compressed,
  // what its pieces hold), or the copy-engine mode's (stagedCeChunkElems; compressed slots are
  // dense there, so they hold more) when the call fits kCeMaxChunks of those.
  const bool compressed = wire_ != Compression::kNone;
  const size_t es = a.elemSize();
  size_t chunkElems = compressed ? p.quantBlocks * kQuantBlockElems * g.blocks : g.chunkBytes / es;
  bool copyEngines = false;
  if (t.copyEngines()) {
    const size_t slotElems = compressed ? stagedDenseElems(g.chunkBytes, kQuantBlockElems) : g.chunkBytes / es;
    const size_t ceElems = stagedCeChunkElems(a.count, es, slotElems, g.ceSplit);
    copyEngines = (a.count + ceElems - 1) / ceElems <= kCeMaxChunks;
    if (copyEngines) chunkElems = ceElems;
  }
  // Sequence numbers are taken only once the call is sure to launch, so every rank takes the same.
  p.seqBase = t.takeSequence((a.count + chunkElems - 1) / chunkElems);
  if (copyEngines) return TPCOMM_CUDA_ONLY(runStagedCopyEngines(t, p, es, compressed, chunkElems, a.stream));
  return compressed ? TPCOMM_CUDA_ONLY(launchStagedCompressed(p, a.stream))
                    : TPCOMM_CUDA_ONLY(launchStagedDevice(p, a.stream));
}

std::unique_ptr<Algorithm> makeStagedHost(const AlgoContext* ctx) {
  return std::make_unique<StagedHost>(ctx, Compression::kNone);
}
std::unique_ptr<Algorithm> makeStagedHostCompressed(const AlgoContext* ctx, Compression wire) {
  return std::make_unique<StagedHost>(ctx, wire);
}

}  // namespace tpcomm
