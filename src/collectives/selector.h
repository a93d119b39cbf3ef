// The selector: a pure function from (topology, call, override) to candidate algorithms, best
// first. The communicator runs the first and moves to the next on kNotSupported.
#pragma once

#include <string>
#include <vector>

#include "collectives/algo_override.h"
#include "algos/algorithm.h"

namespace tpcomm {

struct Candidate {
  Algorithm* algo = nullptr;
  double costUs = 0;
  bool forced = false;  ///< chosen by an override rule rather than by cost
};

/// Candidates for `q` among `algos` (those that are available() and support the call, minus
/// excluded ones), cheapest first; when an override rule covers q.bytes, the rule's names come
/// first in the rule's order and the rest follow by cost as fallbacks. With `availableOnly`
/// false, algorithms whose transport is down are ranked too (Communicator::explainAllReduce).
std::vector<Candidate> selectAlgorithms(const std::vector<Algorithm*>& algos, const Topology& topo, const AlgoQuery& q,
                                        const AlgoOverride& ovr, bool availableOnly = true);

/// One call shape's selection in both stream modes (the communicator's cache entry).
struct ShapeSelection {
  std::vector<Candidate> eager;    ///< the stream is not capturing a CUDA graph
  std::vector<Candidate> capture;  ///< the stream is capturing
  /// Both lists are non-empty and start with the same algorithm: the first algorithm to run
  /// does not depend on the stream's capture status.
  bool sameFirst = false;
  const std::vector<Candidate>& forMode(bool capturing) const { return capturing ? capture : eager; }
};

/// selectAlgorithms() for `q` eager and capturing (q.capturing is ignored).
ShapeSelection selectForShape(const std::vector<Algorithm*>& algos, const Topology& topo, AlgoQuery q,
                              const AlgoOverride& ovr);

/// One line per size bucket (powers of 4 from 1 KB to 1 GB): the algorithm picked and the
/// runner-up, for the INFO init table and tpcomm-doctor.
std::string describeSelection(const std::vector<Algorithm*>& algos, const Topology& topo, const AlgoOverride& ovr,
                              DataType dtype, bool capturing);

}  // namespace tpcomm
