// The communicator: one rank's handle on a group of ranks, and the collectives it runs.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tpcomm/bootstrap.h"
#include "tpcomm/status.h"
#include "tpcomm/types.h"

namespace tpcomm {

/// Per-communicator settings. Zero / empty fields mean "take the environment parameter".
struct Config {
  /// Algorithm selection override, same syntax as TPCOMM_ALGO (e.g. "0-64K:oneshot_p2p,
  /// 64K-inf:ring_nccl" or "^ring_nccl"). Empty: use TPCOMM_ALGO.
  std::string algo;
  /// Bound on every wait for a peer, in milliseconds: the collectives' waits, and the bootstrap's
  /// exchanges during create and destroy unless setupTimeoutMs is set. An explicit value here
  /// wins over the environment everywhere. 0: use TPCOMM_TIMEOUT_MS.
  int timeoutMs = 0;
  /// Create an NCCL communicator under tpcomm for the ring_nccl path (GPU communicators only,
  /// when built with NCCL). The environment's TPCOMM_NCCL=0 also turns it off.
  bool useNccl = true;
  /// An engine's existing ncclComm_t (cast to void*) over the same ranks in the same order, on
  /// this rank's device: ring_nccl runs on it instead of a communicator tpcomm would create.
  /// tpcomm never destroys it; it must outlive the Communicator. Null: create one if useNccl.
  void* ncclComm = nullptr;
  /// Use only algorithms that keep tpcomm's determinism contract (docs/determinism.md): element i
  /// of a result depends only on the ranks' element i, the dtype and the op, never on the message
  /// size, the offset, the algorithm, graph or eager. A call no such algorithm can serve fails
  /// with kNotSupported saying so, rather than falling back to NCCL. The environment's
  /// TPCOMM_DETERMINISTIC=1 turns it on too.
  bool deterministic = false;
  /// Compressed all-reduce (docs/compression.md): kFp8 or kInt8 lets the selector use the
  /// compressed algorithms (twoshot_p2p+fp8, staged_host+int8, ...) for bf16/f16/f32 sums where
  /// the cost model says they win; other calls, and calls no compressed algorithm can serve, run
  /// uncompressed. Results are the same bits on every rank and from run to run, but not those of
  /// the uncompressed all-reduce (a stated error bound). kNone: TPCOMM_COMPRESSION decides
  /// (default none). Must be the same on every rank; ignored in the deterministic mode.
  Compression compression = Compression::kNone;
  /// Bound on the bootstrap's exchanges during create and destroy, in milliseconds, when it should
  /// differ from timeoutMs: set-up includes slow local steps a peer waits through (the topology
  /// probe, CUDA context creation), so a short timeoutMs for the collectives may want a longer
  /// one here. 0: timeoutMs (or, when that is 0 too, TPCOMM_TIMEOUT_MS).
  int setupTimeoutMs = 0;
};

/// Which collective a call is (Communicator::explainCollective).
enum class Collective : int { kAllReduce = 0, kReduceScatter = 1, kAllGather = 2 };

/// One algorithm the selector considers for a call (Communicator::explainAllReduce).
struct AlgorithmChoice {
  std::string name;        ///< e.g. "lamport_p2p", "ring_nccl"
  double costUs = 0;       ///< predicted time of this call in microseconds: measured on this machine by
                           ///< tpcomm-doctor --tune where its table covers the call, else the cost model's
  bool forced = false;     ///< placed first by TPCOMM_ALGO / Config::algo rather than by cost
  bool available = false;  ///< its transport came up here; false: listed for comparison only
};

/// One rank of a group. Collectives are stream-ordered for GPU communicators (they enqueue work
/// on `stream` and return) and synchronous for host communicators (device == -1, stream must be
/// null). One communicator takes one caller at a time, like an NCCL communicator: a collective or
/// destroy() entered while another thread is inside a call on the same object is refused with
/// kInvalidArgument (checked with one atomic exchange per call), and abort() from another thread
/// waits (bounded by the timeout) for that call to return before it frees anything. Distinct
/// communicators may be used from distinct threads.
class Communicator {
 public:
  /// Creates this process's rank of a communicator. Collective over `bootstrap`: every rank
  /// calls it. `device` is the CUDA device this rank drives, or -1 for a host (CPU) rank whose
  /// buffers live in host memory. The bootstrap must outlive the communicator.
  static Status create(Bootstrap& bootstrap, int device, const Config& config, std::unique_ptr<Communicator>* out);

  /// Creates one communicator per CUDA device in `devices`, all driven by this process (like
  /// ncclCommInitAll; llama.cpp-style engines). Rank i drives devices[i].
  static Status createGroup(const std::vector<int>& devices, const Config& config,
                            std::vector<std::unique_ptr<Communicator>>* out);

  /// Starts a group of collectives issued from one thread to several communicators of one
  /// createGroup(); needed when the NCCL path may be chosen (NCCL's group semantics). Nestable.
  static Status groupStart();
  /// Ends the group started by groupStart().
  static Status groupEnd();

  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  /// recv[i] = op over ranks of send[i], i < count. send == recv is in place.
  Status allReduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, cudaStream_t stream);
  /// The same with this call's compression instead of the communicator's (Config::compression):
  /// e.g. kFp8 for a prefill's large all-reduces and kNone for decode on one communicator. Every
  /// rank must pass the same value for the same call (as for count and dtype; TPCOMM_CHECK_CALLS
  /// catches a mismatch). Only bf16/f16/f32 sums are compressed: kFp8/kInt8 with max or min is
  /// kInvalidArgument (the communicator-wide setting runs those uncompressed instead), as is a
  /// value that is not a Compression (docs/compression.md).
  Status allReduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, cudaStream_t stream,
                   Compression compression);

  /// recv[i] = op over ranks of send[rank * recvCount + i], i < recvCount. send holds
  /// size() * recvCount elements.
  Status reduceScatter(const void* send, void* recv, size_t recvCount, DataType dtype, ReduceOp op,
                       cudaStream_t stream);

  /// recv[r * sendCount + i] = send of rank r [i]. recv holds size() * sendCount elements.
  Status allGather(const void* send, void* recv, size_t sendCount, DataType dtype, cudaStream_t stream);

  /// The epilogue of a tensor-parallel decoder layer in one call: x = all-reduce sum of `in`
  /// over ranks, then per row residualInOut += x and out = rmsnorm(residualInOut) * weight, i.e.
  /// out = r / sqrt(mean(r^2) + eps) * weight with r the updated residual. `in`, residualInOut
  /// and out hold rows x hidden elements of dtype (row-major), weight holds hidden; f32, f16 or
  /// bf16; hidden 1..16384, any rows; out may equal in, residualInOut may not alias in or out,
  /// and it must hold the same values on every rank (as in tensor parallelism). The all-reduce
  /// sums in fp32 in rank order (allReduce's bits); the residual add and the norm run in fp32
  /// with one rounding per stored value, in a fixed order: every rank gets the same bits, and so
  /// does every algorithm. The selector picks the algorithm as for allReduce of the same bytes;
  /// the one-shot, Lamport and two-shot P2P algorithms run one fused kernel, every other path the
  /// all-reduce then one residual + norm kernel (host ranks: on the CPU). lastAlgorithm() names
  /// "fused_<algo>" for a fused kernel. Stream-ordered and graph-capturable where the all-reduce is.
  Status allReduceResidualRmsNorm(const void* in, void* residualInOut, const void* weight, float eps, void* out,
                                  size_t rows, size_t hidden, DataType dtype, cudaStream_t stream);

  /// The algorithms an allReduce of `count` elements of `dtype` with `op` would try on this
  /// communicator, best first, eager or inside a CUDA graph capture (`capturing`): the same
  /// selection allReduce makes, so it explains lastAlgorithm() before the call is made. Those
  /// whose transport did not come up here are listed too (available = false, with the cost they
  /// would have), so a caller can compare with a path it has itself (libtpcomm_nccl.so compares
  /// with NCCL this way). Local: no peer is contacted. kInvalidArgument for a bad argument.
  Status explainAllReduce(size_t count, DataType dtype, ReduceOp op, bool capturing,
                          std::vector<AlgorithmChoice>* out) const;
  /// The same for any collective: `count` as that call takes it (reduceScatter's recvCount,
  /// allGather's sendCount; allGather ignores `op`).
  Status explainCollective(Collective kind, size_t count, DataType dtype, ReduceOp op, bool capturing,
                           std::vector<AlgorithmChoice>* out) const;

  /// Reports an asynchronous failure of an earlier collective (e.g. kTimeout when a peer did not
  /// arrive, with its rank in the message). kOk when none happened.
  Status checkError();

  /// Tears the communicator down (collective). Later calls return kInvalidArgument.
  Status destroy();

  /// Tears this rank's side down without its peers (like ncclCommAbort): local, never waits for
  /// a peer. It stops this rank's kernels (each polls the words abort sets, so they end within
  /// microseconds, and within TPCOMM_TIMEOUT_MS in any case), waits for this device to drain,
  /// then frees what is local (buffers, mappings of peers' memory, the NCCL communicator, aborted).
  /// Use it when a peer died or a call timed out; peers must abort or destroy theirs too. Later
  /// calls return kInvalidArgument.
  Status abort();

  /// Name of the algorithm that ran the last collective ("staged_host", "oneshot_p2p", ...).
  const char* lastAlgorithm() const;

  /// This rank's index.
  int rank() const;
  /// Number of ranks.
  int size() const;
  /// CUDA device of this rank, or -1 for a host rank.
  int device() const;

  /// The implementation (src/collectives/communicator_impl.h): opaque outside the library.
  struct Impl;

 private:
  explicit Communicator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tpcomm
