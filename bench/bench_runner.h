// bench_runner: what one controller of allreduce_perf drives: its local ranks (buffers, stream,
// events), the implementation under test (a Backend: tpcomm with a given selection, or NCCL),
// and the timed and checked runs. The same buffers, streams and timing code serve every
// backend, so tpcomm and NCCL are measured alike.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bench_args.h"
#include "bench_world.h"
#include "tpcomm/types.h"

namespace tpcomm_bench {

/// One rank driven by this controller.
struct LocalRank {
  int rank = 0;               ///< global rank
  int device = -1;            ///< CUDA device, -1: host rank
  void* send = nullptr;       ///< maxBytes, device memory (or host memory for host ranks)
  void* recv = nullptr;
  cudaStream_t stream = nullptr;
  void* evStart = nullptr;    ///< cudaEvent_t
  void* evStop = nullptr;
  std::vector<char> hostScratch;  ///< fill / read-back staging for GPU ranks
};

/// Allocates buffers of `maxBytes`, a stream and events for each rank. false + message on error.
bool setupRanks(std::vector<LocalRank>* ranks, size_t maxBytes, std::string* error);
void teardownRanks(std::vector<LocalRank>* ranks);

/// Where one rank's collective reads and writes (nccl-tests' layout). `count` is the whole
/// buffer in elements, a multiple of nRanks for reduce-scatter and all-gather: a reduce-scatter
/// reduces `count` into a shard of count/n (in place: the shard is recv + rank * count/n, inside
/// the full input in recv); an all-gather gathers count/n from each rank into `count` (in place:
/// the own block is recv + rank * count/n).
struct CollBuffers {
  const void* send;
  void* recv;
  size_t perRank;  ///< all-reduce: count; reduce-scatter: recv count; all-gather: send count
};
CollBuffers collBuffers(Coll coll, const LocalRank& r, bool inPlace, size_t count, size_t elemSize, int nRanks);

/// The implementation under test.
class Backend {
 public:
  Backend(Coll coll, int nRanks) : coll_(coll), nRanks_(nRanks) {}
  virtual ~Backend() = default;
  /// One collective (coll()) on every local rank: enqueued on each rank's stream for GPU ranks,
  /// completed on return for host ranks. `count`: see CollBuffers. false + message on error.
  virtual bool run(std::vector<LocalRank>& ranks, bool inPlace, size_t count, tpcomm::DataType dtype,
                   tpcomm::ReduceOp op, std::string* error) = 0;
  Coll coll() const { return coll_; }
  int nRanks() const { return nRanks_; }
  /// Algorithm that ran the last call on the first local rank ("nccl" for NCCL).
  virtual std::string lastAlgorithm() const = 0;
  /// Collective teardown.
  virtual void destroy() = 0;

 protected:
  Coll coll_;
  int nRanks_;
};

/// tpcomm with `algo`: "auto" (selector; TPCOMM_ALGO still applies) or a TPCOMM_ALGO string.
/// Collective over the world's controllers.
std::unique_ptr<Backend> makeTpcommBackend(World& world, const std::vector<LocalRank>& ranks,
                                           const std::string& algo, std::string* error, Coll coll = Coll::kAllReduce,
                                           tpcomm::Compression compression = tpcomm::Compression::kNone);
/// NCCL itself, communicators created from the same world (unique id spread by the bootstrap;
/// ncclCommInitAll in -g mode). null + message where NCCL is not built or ranks are host ranks.
std::unique_ptr<Backend> makeNcclBackend(World& world, const std::vector<LocalRank>& ranks, std::string* error,
                                         Coll coll = Coll::kAllReduce);

/// How one size is measured.
struct TimingPlan {
  int warmup = 5;
  int iters = 20;
  int repeats = 5;
  int graphLaunches = 0;  ///< > 0: time replays of a CUDA graph of `iters` collectives
};

/// Runs warm-up then `repeats` timed batches; *usPerColl = median over batches of the slowest
/// rank's batch time per collective. Collective over the world. false + message on error.
bool timeCollective(World& world, Backend& backend, std::vector<LocalRank>& ranks, bool inPlace, size_t count,
                    tpcomm::DataType dtype, tpcomm::ReduceOp op, const TimingPlan& plan, double* usPerColl,
                    std::string* error);

/// Writes every local rank's input of the call: the integer-valued check data, or with
/// `errorData` the random data of the compression columns (bench_error.h); with `poisonOutput`
/// also poison over the output that is not input. The controller writes the inputs before it
/// times a size too, so every timing runs on the data the check runs on (a compressed kernel
/// quantizes a zero block faster than real data). false + message on error.
bool writeInputs(World& world, Backend& backend, std::vector<LocalRank>& ranks, bool inPlace, size_t count,
                 tpcomm::DataType dtype, bool errorData, bool poisonOutput, std::string* error);

/// Fills inputs, poisons outputs, runs one collective (in a one-collective CUDA graph when
/// `graph`), and counts wrong elements on the local ranks. false + message on error.
/// With `accuracy` (all-reduce sums, --compression): random inputs (bench_error.h) instead, and
/// accuracy[0] = largest |error|, accuracy[1] = ||error|| / ||exact|| over the local ranks.
bool checkCollective(World& world, Backend& backend, std::vector<LocalRank>& ranks, bool inPlace, size_t count,
                     tpcomm::DataType dtype, tpcomm::ReduceOp op, bool graph, int64_t* wrong, std::string* error,
                     double* accuracy = nullptr);

}  // namespace tpcomm_bench
