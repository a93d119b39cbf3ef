// Communicator::create's steps, each collective over the bootstrap and agreed on every rank so
// that every rank ends with the same algorithms and transports (or the same error):
//   checkCreateArgs -> agreeOnSettings -> initContext (identity, topology, error word, launch
//   settings) -> preloadAlgorithms -> checkResidency -> bringUpTransports (one function per transport kind,
//   recording why one did not come up) -> setUpAlgorithms.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "algos/common/algorithm.h"
#include "collectives/algo_override.h"
#include "tpcomm/communicator.h"

namespace tpcomm {

/// Why each transport is not usable ("" when it is), for the INFO table and tpcomm-doctor.
struct TransportReport {
  std::string hostStaged, p2p, nccl, multicast;
  /// By the name an algorithm gives its transport (Algorithm::transport()); "" for any other.
  const std::string& whyNot(const std::string& transport) const {
    static const std::string kNone;
    return transport == "host_staged" ? hostStaged
           : transport == "cuda_p2p"  ? p2p
           : transport == "nccl"      ? nccl
           : transport == "multicast" ? multicast
                                      : kNone;
  }
};

/// Argument checks that need no peer: device index, bootstrap rank/size, config values.
Status checkCreateArgs(Bootstrap& bs, int device, const Config& config);
/// Parses the selection override and checks that every parameter shaping what ranks exchange
/// is the same on every rank (a mismatch fails create on every rank, naming the parameter).
Status agreeOnSettings(Bootstrap& bs, const Config& config, AlgoOverride* ovr);
/// Identity, timeout, probed topology, the asynchronous error word and the launch settings.
Status initContext(Bootstrap& bs, int device, const Config& config, AlgoContext* ctx);
/// Frees the error word initContext allocated (pinned memory on GPU ranks).
void freeErrorWord(AlgoContext* ctx);
/// Every algorithm's kernels loaded now (GPU ranks), agreed: a GPU without a kernel image for
/// this build fails create on every rank.
Status preloadAlgorithms(Bootstrap& bs, const AlgoContext& ctx, const std::vector<std::unique_ptr<Algorithm>>& algos);
/// Every block of a call must be resident at once (the kernels spin on peers, and staged_host's
/// two roles on each other): the largest grid times the ranks sharing this GPU must fit the GPU
/// (SMs x blocks per SM of the most demanding kernel, recorded at preload). Agreed: a rank whose
/// GPU is too small fails create on every rank, naming the parameter to lower.
Status checkResidency(Bootstrap& bs, const AlgoContext& ctx);
/// Brings up every transport kind this rank can have, sized by what `algos` ask of them
/// (Algorithm::needs()); one rank's failure drops that transport everywhere (its reason recorded
/// in `report`). Only a caller's error (an engine's ncclComm that does not fit) fails create.
Status bringUpTransports(Bootstrap& bs, const Config& config, const std::vector<std::unique_ptr<Algorithm>>& algos,
                         AlgoContext* ctx, TransportReport* report);
/// What `algos` ask of the transports for nRanks ranks, together (tests: the cuda_p2p layout of
/// a registry).
TransportNeeds allNeeds(const std::vector<std::unique_ptr<Algorithm>>& algos, int nRanks);
/// Warns (once, at create) about TPCOMM_ALGO / Config::algo names that this communicator cannot
/// run (their transport is down, e.g. ring_nccl on host ranks): the call then falls back to the
/// next candidate by cost, and the user must be told, not find out from lastAlgorithm().
void warnUnrunnableOverrides(const AlgoOverride& ovr, const std::vector<std::unique_ptr<Algorithm>>& algos,
                             const TransportReport& report, int rank);
/// Algorithm::setUp() of every algorithm, then one agreed exchange, so no rank returns from
/// create (and no peer launches into this rank's memory) before every rank's set-up is done.
Status setUpAlgorithms(Bootstrap& bs, const std::vector<std::unique_ptr<Algorithm>>& algos);

}  // namespace tpcomm
