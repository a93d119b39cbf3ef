// The one explicit list of algorithms. No static self-registration: adding an algorithm means
// adding its files under its family's folder in src/algos/ and one line to makeAlgorithms() in
// registry.cc (docs/architecture.md, "Adding an algorithm"), plus its row in the cost table
// (cost_model.cc) for the selector to pick it by cost.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "algos/common/algorithm.h"

namespace tpcomm {

/// An algorithm's factory: its own file defines it, the registry lists it.
using AlgorithmFactory = std::unique_ptr<Algorithm> (*)(const AlgoContext* ctx);

/// Every algorithm this build has, bound to `ctx`. With ctx == nullptr the list serves selection
/// only (tests, tpcomm-doctor): available() reports true and run() returns kInternal.
std::vector<std::unique_ptr<Algorithm>> makeAlgorithms(const AlgoContext* ctx);

/// The registry's algorithm called `name` bound to `ctx` (nullptr for an unknown name).
std::unique_ptr<Algorithm> makeAlgorithm(const std::string& name, const AlgoContext* ctx);

/// Names of every algorithm this build has, in registry order.
std::vector<std::string> algorithmNames();

/// Raw pointers to a list's algorithms (the selector's input).
std::vector<Algorithm*> rawList(const std::vector<std::unique_ptr<Algorithm>>& algos);

/// Tests: while an instance lives, `factory`'s algorithm ends every list makeAlgorithms() makes,
/// so a test adds an algorithm from its own tree (registered by the test's code, never at static
/// initialisation). Communicators created meanwhile have it, its transport needs included.
class ScopedTestAlgorithm {
 public:
  explicit ScopedTestAlgorithm(AlgorithmFactory factory);
  ~ScopedTestAlgorithm();
  ScopedTestAlgorithm(const ScopedTestAlgorithm&) = delete;
  ScopedTestAlgorithm& operator=(const ScopedTestAlgorithm&) = delete;

 private:
  AlgorithmFactory factory_;
};

}  // namespace tpcomm
