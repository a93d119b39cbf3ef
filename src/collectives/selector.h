// The selector: a pure function from (topology, call, override) to candidate algorithms, best
// first. The communicator runs the first and moves to the next on kNotSupported.
#pragma once

#include <string>
#include <vector>

#include "algos/common/algorithm.h"
#include "collectives/algo_override.h"
#include "collectives/tuning_file.h"

namespace tpcomm {

struct Candidate {
  Algorithm* algo = nullptr;
  double costUs = 0;      ///< measured time where `measured`, else the cost model's
  bool forced = false;    ///< chosen by an override rule rather than by cost
  bool measured = false;  ///< costUs comes from the tuning file (tpcomm-doctor --tune)
};

/// Candidates for `q` among `algos` (those that are available() and support the call, minus
/// excluded ones and, in the deterministic mode, those outside the contract), cheapest first;
/// when an override rule covers q.bytes, the rule's names come first in the rule's order and the
/// rest follow by cost as fallbacks. With `availableOnly` false, algorithms whose transport is
/// down are ranked too (Communicator::explainAllReduce). With a `measured` table covering q,
/// the candidates it timed come first, fastest first, then the others by the model: the table
/// only orders the eligible candidates, it never adds one.
std::vector<Candidate> selectAlgorithms(const std::vector<Algorithm*>& algos, const Topology& topo, const AlgoQuery& q,
                                        const AlgoOverride& ovr, bool availableOnly = true,
                                        const TuningTable* measured = nullptr);

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
                              const AlgoOverride& ovr, const TuningTable* measured = nullptr);

/// One line per size bucket (powers of 4 from 1 KB to 1 GB): the algorithm picked, whether its
/// time was measured or modelled, and the runner-up, for the INFO init table and tpcomm-doctor.
std::string describeSelection(const std::vector<Algorithm*>& algos, const Topology& topo, const AlgoOverride& ovr,
                              DataType dtype, bool capturing, const TuningTable* measured = nullptr);

}  // namespace tpcomm
