// The one explicit list of algorithms. No static self-registration: adding an algorithm means
// adding a line to makeAlgorithms() in registry.cc.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collectives/algorithm.h"

namespace tpcomm {

/// Every algorithm this build has, bound to `ctx`. With ctx == nullptr the list serves selection
/// only (tests, tpcomm-doctor): available() reports true and run() returns kInternal.
std::vector<std::unique_ptr<Algorithm>> makeAlgorithms(CommContext* ctx);

/// Names of every algorithm this build has, in registry order.
std::vector<std::string> algorithmNames();

/// Raw pointers to a list's algorithms (the selector's input).
std::vector<Algorithm*> rawList(const std::vector<std::unique_ptr<Algorithm>>& algos);

}  // namespace tpcomm
