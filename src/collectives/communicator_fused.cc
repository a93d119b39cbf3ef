// Communicator::allReduceResidualRmsNorm: all-reduce (sum) + residual add + RMSNorm, the
// epilogue of every tensor-parallel decoder layer, in one call (arithmetic: algos/fused_rmsnorm.h).
//
// Selection is the all-reduce's: the same selector, cost model, TPCOMM_ALGO override and cache,
// for a message of rows * hidden elements. Candidates are tried in order:
//   lamport_p2p, oneshot_p2p, twoshot_p2p: the fused kernel of that algorithm (one kernel; it
//     shares the plain kernel's scratch, flags and epochs) while its blocks >=
//     TPCOMM_FUSED_BLOCKS_PER_ROW x rows (fusedPaysOff); beyond that, or when the fused kernel
//     declines (size, alignment, rows that do not fit a chunk), that algorithm's all-reduce, then
//     the residual + norm kernel;
//   any other algorithm (ring_nccl, staged_host): its all-reduce into `out`, then the unfused
//     residual + norm kernel (fused_rmsnorm_kernel.cu) on the same stream;
//   host ranks: staged_host's all-reduce into `out`, then hostResidualRmsNorm on the CPU.
// Every path gives the same bits (the GPU tests check the GPU paths against the host one).
// lastAlgorithm() reports "fused_<algo>" for a fused kernel, the all-reduce's name otherwise.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#ifdef TPCOMM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "algos/fused_rmsnorm.h"
#include "collectives/communicator_impl.h"
#include "transports/cuda_p2p.h"

namespace tpcomm {

namespace {

// Unfused norms waiting for the outermost groupEnd (see fusedNormGroupStarted).
struct PendingNorm {
  int device;
  RmsNormLaunch launch;
  cudaStream_t stream;
};
thread_local int tGroupDepth = 0;
thread_local std::vector<PendingNorm> tPending;

Status validate(const char* what, const void* in, void* residual, const void* weight, float eps, void* out, size_t rows,
                size_t hidden, DataType dtype) {
  if (!in) return TPCOMM_INVALID("%s: in is null", what);
  if (!residual) return TPCOMM_INVALID("%s: residualInOut is null", what);
  if (!weight) return TPCOMM_INVALID("%s: weight is null", what);
  if (!out) return TPCOMM_INVALID("%s: out is null", what);
  if (dataTypeSize(dtype) == 0)
    return TPCOMM_INVALID("%s: dtype %d is not a DataType (f32, f16, bf16)", what, static_cast<int>(dtype));
  if (rows == 0) return TPCOMM_INVALID("%s: rows is 0: expected at least one row", what);
  if (hidden == 0 || hidden > kMaxRmsNormHidden)
    return TPCOMM_INVALID("%s: hidden %zu: expected 1..%zu", what, hidden, kMaxRmsNormHidden);
  if (!std::isfinite(eps) || eps < 0) return TPCOMM_INVALID("%s: eps %g: expected a finite value >= 0", what, eps);
  if (rows > SIZE_MAX / hidden / dataTypeSize(dtype))
    return TPCOMM_INVALID("%s: rows %zu x hidden %zu overflows the byte size of the buffers", what, rows, hidden);
  if (residual == in || residual == out)
    return TPCOMM_INVALID("%s: residualInOut must not be the same buffer as in or out", what);
  if (weight == out || weight == residual) return TPCOMM_INVALID("%s: weight must not be an output buffer", what);
  return Status::kOk;
}

// Which P2P family has a fused kernel for `name`, or -1.
int fusedFamily(const char* name) {
  if (std::strcmp(name, "lamport_p2p") == 0) return kP2pLamport;
  if (std::strcmp(name, "oneshot_p2p") == 0) return kP2pOneshot;
  if (std::strcmp(name, "twoshot_p2p") == 0) return kP2pTwoshot;
  return -1;
}

const char* fusedName(int family) {
  switch (family) {
    case kP2pLamport:
      return "fused_lamport_p2p";
    case kP2pOneshot:
      return "fused_oneshot_p2p";
    default:
      return "fused_twoshot_p2p";
  }
}

// The plain P2P kernels' launch parameters (P2pAlgorithm::launchParams) plus the norm's. The grid
// is the plain kernel's (epochs are per block and shared with it): both read TPCOMM_*_BLOCKS and
// TPCOMM_PDL once at create (Impl::p2pBlocks, twoshotBlocks, pdl).
// The fused kernels give whole rows to blocks, so with many rows per block the row work queues
// inside each block, while the plain all-reduce spreads over every block and the norm kernel
// runs one block per row. Measured on 2x H200 (bench/results/h200x2.md, session 2, hidden 5120
// bf16, 32 blocks): fused faster up to 16 rows, 1.01-1.23x slower from 32 to 512 rows. So the
// fused kernel runs only while blocks >= TPCOMM_FUSED_BLOCKS_PER_ROW x rows (0: always); the
// rule depends on the call's shape only, so every rank takes the same path.
bool fusedPaysOff(const Communicator::Impl& impl, int family, size_t rows) {
  if (impl.fusedBlocksPerRow <= 0) return true;
  const size_t blocks = static_cast<size_t>(family == kP2pTwoshot ? impl.twoshotBlocks : impl.p2pBlocks);
  return rows * static_cast<size_t>(impl.fusedBlocksPerRow) <= blocks;
}

// The unfused norm kernel (one block of 512 per row) launches early under PDL and waits on the
// all-reduce; measured on 2x H200 (session 3, hidden 5120 bf16, graph): that hides its launch up
// to 64 rows (32 rows 6.64 vs 7.62 us, 64 rows 7.80 vs 8.80) but costs 3.4 us at 128 rows (16.25
// vs 12.80: 128 waiting 512-thread blocks crowd the all-reduce's SMs). So PDL up to 64 rows.
constexpr size_t kNormPdlMaxRows = 64;

Status runFused(const Communicator::Impl& impl, int family, const CollArgs& a, void* residual, const void* weight,
                float eps, size_t rows, size_t hidden) {
  const CommContext& c = *impl.ctx;
  const CudaP2pTransport& t = *c.p2p;
  FusedP2pLaunch f{};
  P2pLaunch& p = f.p2p;
  p.send = a.send;
  p.recv = a.recv;
  p.count = a.count;
  p.dtype = static_cast<int>(a.dtype);
  p.op = static_cast<int>(ReduceOp::kSum);
  p.rank = t.rank();
  p.nRanks = t.nRanks();
  const int blocks = family == kP2pTwoshot ? impl.twoshotBlocks : impl.p2pBlocks;
  if (blocks < 1 || blocks > t.layout().maxBlocks)
    return TPCOMM_ERROR(kNotSupported, "fused P2P: %d blocks outside the transport's 1..%d", blocks,
                        t.layout().maxBlocks);
  p.blocks = blocks;
  for (int r = 0; r < t.nRanks(); ++r) p.peers[r] = t.base(r);
  p.layout = t.layout();
  p.errorWord = c.asyncError.deviceWord;
  p.timeoutNs = static_cast<uint64_t>(c.timeoutMs) * 1000000ull;
  p.pdl = impl.pdl;
  f.residual = residual;
  f.weight = weight;
  f.eps = eps;
  f.rows = rows;
  f.hidden = hidden;
  switch (family) {
    case kP2pLamport:
      return launchFusedLamport(f, a.stream);
    case kP2pOneshot:
      return launchFusedOneshot(f, a.stream);
    default:
      if (!fusedTwoshotGeometry(t.layout(), rows, hidden * a.elemSize(), &f.rowsPerChunk, &f.rowsPerRank))
        return TPCOMM_ERROR(kNotSupported, "fused twoshot_p2p: a %zu-byte row does not fit the two-shot chunk",
                            hidden * a.elemSize());
      return launchFusedTwoshot(f, a.stream);
  }
}

Status launchNorm(const RmsNormLaunch& l, int device, cudaStream_t stream) {
#ifdef TPCOMM_HAVE_CUDA
  int prev = -1;
  if (cudaGetDevice(&prev) != cudaSuccess) prev = -1;
  if (prev != device) cudaSetDevice(device);
  Status s = launchResidualRmsNorm(l, stream);
  if (prev >= 0 && prev != device) cudaSetDevice(prev);
  return s;
#else
  (void)l;
  (void)device;
  (void)stream;
  return TPCOMM_ERROR(kNotSupported, "built without CUDA");
#endif
}

}  // namespace

void fusedNormGroupStarted() { ++tGroupDepth; }

Status fusedNormGroupEnded(Status groupEndStatus) {
  if (tGroupDepth > 0) --tGroupDepth;
  if (tGroupDepth > 0) return groupEndStatus;
  if (tPending.empty()) return groupEndStatus;  // the usual group: nothing deferred
  std::vector<PendingNorm> pending;
  pending.swap(tPending);
  if (groupEndStatus != Status::kOk) return groupEndStatus;  // the all-reduces did not run
  Status first = Status::kOk;
  for (const PendingNorm& n : pending) {
    Status s = launchNorm(n.launch, n.device, n.stream);
    if (first == Status::kOk) first = s;
  }
  return first;
}

Status Communicator::allReduceResidualRmsNorm(const void* in, void* residualInOut, const void* weight, float eps,
                                              void* out, size_t rows, size_t hidden, DataType dtype,
                                              cudaStream_t stream) {
  static const char* const kWhat = "allReduceResidualRmsNorm";
  TPCOMM_API_ENTRY(kWhat);
  TPCOMM_TRY(validate(kWhat, in, residualInOut, weight, eps, out, rows, hidden, dtype));
  Impl& impl = *impl_;
  CommContext& c = *impl.ctx;
  CollArgs a;
  a.kind = CollKind::kAllReduce;
  a.send = in;
  a.recv = out;
  a.count = rows * hidden;
  a.dtype = dtype;
  a.op = ReduceOp::kSum;
  a.stream = stream;

  if (c.device < 0) {  // host ranks: synchronous all-reduce, then the norm on this thread
    TPCOMM_TRY(runCollective(impl, a, kWhat));
    hostResidualRmsNorm(out, residualInOut, weight, eps, out, rows, hidden, dtype);
    return Status::kOk;
  }

  // GPU ranks: runCollective's selection (same cache, same deferred capture query), then a fused
  // kernel where one exists.
  TPCOMM_TRY(prepareCall(impl, a, kWhat));
  CallCandidates cands;
  TPCOMM_TRY(candidatesFor(impl, a, kWhat, &cands));
  for (size_t i = 0; i < cands.list->size(); ++i) {
    Algorithm* algo = (*cands.list)[i].algo;
    const int family = c.p2p ? fusedFamily(algo->name()) : -1;
    if (family >= 0 && fusedPaysOff(impl, family, rows)) {
      Status s = runFused(impl, family, a, residualInOut, weight, eps, rows, hidden);
      if (s == Status::kNotSupported) {
        clearError();
        // The plain algorithm may still run (e.g. rows that do not fit a fused two-shot chunk).
      } else {
        if (s != Status::kOk && !cands.captureKnown) TPCOMM_TRY(resolveCapture(impl, a, kWhat, &cands));
        if (s == Status::kOk) impl.lastAlgorithm = fusedName(family);
        return s;
      }
    }
    Status s = algo->run(a);
    if (s != Status::kOk && !cands.captureKnown) TPCOMM_TRY(resolveCapture(impl, a, kWhat, &cands));
    if (s == Status::kNotSupported) continue;
    if (s != Status::kOk) return s;
    impl.lastAlgorithm = algo->name();
    RmsNormLaunch l{};
    l.x = out;
    l.residual = residualInOut;
    l.weight = weight;
    l.out = out;
    l.eps = eps;
    l.rows = rows;
    l.hidden = hidden;
    l.dtype = static_cast<int>(dtype);
    l.pdl = impl.pdl && rows <= kNormPdlMaxRows;
    if (tGroupDepth > 0 && std::strcmp(algo->name(), "ring_nccl") == 0) {
      l.pdl = 0;  // follows ncclGroupEnd's launches, which do not trigger dependents
      tPending.push_back({c.device, l, stream});
      return Status::kOk;
    }
    return launchResidualRmsNorm(l, stream);
  }
  return TPCOMM_ERROR(kNotSupported, "%s: every candidate declined %zu bytes", kWhat, a.bytes());
}

}  // namespace tpcomm
