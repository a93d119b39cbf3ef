// comm_table: the shim's side table, one entry per real NCCL communicator created through the
// intercepted init calls (InitRank, InitRankConfig, InitAll, Split). An entry records which
// communicator the handle is a rank of (its key) and in which creation it was made, which lets
// the set-up tell the two engine shapes apart: one rank in this process (PyTorch, vLLM: the
// NCCL bootstrap over a split of the real communicator) or every rank made in one creation by
// one thread (llama.cpp's ncclCommInitAll: one createGroup in this process). A communicator the
// table does not know (made by an init the shim does not intercept) always goes to real NCCL.
#pragma once

#include <nccl.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "shim/routing.h"
#include "tpcomm/bootstrap.h"
#include "tpcomm/communicator.h"

namespace tpcomm {
namespace shim {

enum class SetupState { kPending, kReady, kDisabled };

/// All ranks of one communicator, driven by this process from one thread.
struct Clique {
  std::vector<std::unique_ptr<Communicator>> comms;  ///< by rank
};

struct ShimComm {
  ncclComm_t real = nullptr;
  std::string key;        ///< the communicator it is a rank of (unique id, InitAll call, split)
  uint64_t creation = 0;  ///< the init call or outermost group that created it
  std::mutex mu;          ///< guards everything below

  bool infoKnown = false;  ///< rank/nRanks/device read (the real communicator is ready)
  int rank = -1, nRanks = 0, device = -1;
  SetupState state = SetupState::kPending;
  std::string whyNot;  ///< why tpcomm is not used (kDisabled)
  int setupAttempts = 0;

  std::shared_ptr<Clique> clique;         ///< set for the one-process-all-GPUs shape
  ncclComm_t bootComm = nullptr;          ///< one-rank-per-process shape: split for set-up
  std::unique_ptr<Bootstrap> bootstrap;   ///< over bootComm
  std::unique_ptr<Communicator> ownComm;  ///< one-rank-per-process shape
  Communicator* tp = nullptr;             ///< the tpcomm communicator when kReady

  /// Decisions already made, by (dtype, op, count, capturing).
  std::map<std::tuple<int, int, int, size_t, bool>, RouteDecision> decisions;  // (kind, dtype, op, count, graph)
};

/// Process-wide map from real handle to entry. Thread-safe.
class CommTable {
 public:
  static CommTable& instance();
  void add(const std::shared_ptr<ShimComm>& c);
  std::shared_ptr<ShimComm> find(ncclComm_t real) const;
  /// Removes and returns the entry (nullptr when unknown).
  std::shared_ptr<ShimComm> take(ncclComm_t real);
  /// Entries with this key made in this creation (the candidates for one local clique).
  std::vector<std::shared_ptr<ShimComm>> sameCreation(const std::string& key, uint64_t creation) const;
  size_t size() const;

 private:
  mutable std::mutex mu_;
  std::map<ncclComm_t, std::shared_ptr<ShimComm>> comms_;
};

/// A fresh creation number (one per init call outside a group, one per outermost group).
uint64_t nextCreation();

/// Key of a communicator made from a unique id / by ncclCommInitAll / by a split.
std::string keyOfUniqueId(const ncclUniqueId& id);
std::string keyOfInitAll(uint64_t creation);
std::string keyOfSplit(const std::string& parentKey, int color);

}  // namespace shim
}  // namespace tpcomm
