// The cost model: every alpha-beta constant the selector uses, in one table (cost_model.cc),
// keyed by algorithm name, link class and message size band, as NCCL keeps its in
// src/graph/tuning.cc. Pure functions; the history of each figure is in docs/selection.md.
#pragma once

#include <string>
#include <vector>

#include "algos/common/coll_args.h"
#include "topology/topology.h"

namespace tpcomm {

/// Predicted time of `algo` for `q` on `topo`, in microseconds. A name with no row in the table
/// costs kUnmodelledUs, so an algorithm someone forgot to model is never picked by cost.
double modelCostUs(const std::string& algo, const Topology& topo, const AlgoQuery& q);

constexpr double kUnmodelledUs = 1e12;

/// The slowest measured one-way SM-store rate over every ordered GPU pair (PeerLink::smGBs, from
/// tpcomm-doctor --measure); 0 when any pair was not measured.
double slowestMeasuredSmGBs(const Topology& topo);

/// Where the GB/s figures for `topo` come from, for the doctor and the INFO log.
std::string costModelSource(const Topology& topo);

/// Names that have at least one row (a unit test checks every registry algorithm is among them).
std::vector<std::string> modelledAlgorithms();

}  // namespace tpcomm
