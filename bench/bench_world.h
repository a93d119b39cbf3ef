// bench_world: who takes part in an allreduce_perf run and how they agree on numbers.
//
// A "controller" is one thread of control that drives one or more ranks: a process under
// mpirun (one rank), a thread of -t mode (one rank), or the single thread of -g mode (all
// ranks). Controllers meet through a tpcomm Bootstrap (MPI or threads), which the bench also
// hands to tpcomm and uses to spread NCCL's unique id, so tpcomm and NCCL start from the same
// rendezvous.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tpcomm/bootstrap.h"

namespace tpcomm_bench {

class World {
 public:
  /// `bootstrap` may be null when there is a single controller (-g mode, or one thread).
  /// `firstRank`: global rank of this controller's first local rank; `localRanks`: how many it
  /// drives; `nRanks`: total ranks.
  World(tpcomm::Bootstrap* bootstrap, int firstRank, int localRanks, int nRanks);

  int nRanks() const { return nRanks_; }
  int firstRank() const { return firstRank_; }
  int localRanks() const { return localRanks_; }
  /// True for the controller that prints (the one driving rank 0).
  bool isMain() const { return firstRank_ == 0; }
  tpcomm::Bootstrap* bootstrap() const { return bootstrap_; }

  /// All controllers meet. Returns false (with a message on stderr) on a bootstrap failure.
  bool barrier();
  /// Maximum / sum of a value over controllers.
  double maxOf(double v);
  double minOf(double v);
  int64_t sumOf(int64_t v);
  /// Every controller's string (truncated to 1 KB), in controller order.
  std::vector<std::string> gatherStrings(const std::string& mine);
  /// Rank 0's bytes to everyone (e.g. NCCL's unique id).
  bool broadcastFromFirst(void* data, size_t bytes);

 private:
  bool gather(const void* mine, void* all, size_t bytes);
  tpcomm::Bootstrap* bootstrap_;
  int firstRank_, localRanks_, nRanks_;
};

}  // namespace tpcomm_bench
