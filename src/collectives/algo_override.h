// TPCOMM_ALGO override strings (UCC-style selection strings, NCCL_ALGO-style exclusion):
//   "oneshot_p2p"                          force one algorithm at every size
//   "0-64K:oneshot_p2p,64K-inf:ring_nccl"  per size range [lo, hi) in bytes (K/M/G binary, inf)
//   "0-64K:lamport_p2p|oneshot_p2p"        several names in a range: tried in that order
//   "^ring_nccl,staged_host"               exclude these everywhere
// Parsed once per communicator; malformed strings are rejected with a message that quotes the
// offending piece.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tpcomm/status.h"
#include "tpcomm/types.h"

namespace tpcomm {

struct AlgoRule {
  uint64_t lo = 0;
  uint64_t hi = UINT64_MAX;  ///< exclusive; UINT64_MAX is "inf"
  std::vector<std::string> names;
};

struct AlgoOverride {
  bool exclude = false;               ///< "^..." form
  bool deterministicOnly = false;     ///< TPCOMM_DETERMINISTIC / Config::deterministic
  /// Config::compression / TPCOMM_COMPRESSION: algorithms that compress (Algorithm::compression)
  /// are offered only when it names their format.
  Compression compression = Compression::kNone;
  std::vector<std::string> excluded;  ///< names to drop (exclude form)
  std::vector<AlgoRule> rules;        ///< include form
  bool empty() const { return !exclude && rules.empty(); }
  /// Names forced for a message of `bytes` (empty: no rule covers it).
  std::vector<std::string> forcedFor(uint64_t bytes) const;
  bool excludes(const std::string& name) const;
};

/// Parses `text`. `known` lists valid algorithm names. kInvalidArgument on malformed input.
Status parseAlgoOverride(const std::string& text, const std::vector<std::string>& known, AlgoOverride* out);

}  // namespace tpcomm
