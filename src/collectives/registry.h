// The one explicit list of algorithms. No static self-registration: adding an algorithm means
// adding its file under src/algos/ and one line to makeAlgorithms() in registry.cc
// (docs/architecture.md shows the diff), plus its row in the cost table (cost_model.cc).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "algos/common/algorithm.h"

namespace tpcomm {

/// Every algorithm this build has, bound to `ctx`. With ctx == nullptr the list serves selection
/// only (tests, tpcomm-doctor): available() reports true and run() returns kInternal.
std::vector<std::unique_ptr<Algorithm>> makeAlgorithms(const AlgoContext* ctx);

/// The registry's algorithm called `name` bound to `ctx` (nullptr for an unknown name).
std::unique_ptr<Algorithm> makeAlgorithm(const std::string& name, const AlgoContext* ctx);

/// Names of every algorithm this build has, in registry order.
std::vector<std::string> algorithmNames();

/// Raw pointers to a list's algorithms (the selector's input).
std::vector<Algorithm*> rawList(const std::vector<std::unique_ptr<Algorithm>>& algos);

}  // namespace tpcomm
