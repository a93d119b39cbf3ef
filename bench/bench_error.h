// bench_error: the accuracy columns of allreduce_perf --compression (docs/bench.md,
// docs/compression.md). Inputs are random normal values (a hash of element and rank, so every
// controller knows every rank's inputs without exchanging them) with an outlier (x100) every 97
// elements; the reference is the exact fp64 sum of the inputs as stored in the dtype.
#pragma once

#include <cstddef>

#include "tpcomm/types.h"

namespace tpcomm_bench {

/// Rank r's input element i (before rounding to the dtype).
float errorInput(size_t i, int rank);
/// Fills `dst` (count elements of dtype) with rank r's inputs.
void fillErrorInput(void* dst, size_t count, tpcomm::DataType dtype, int rank);
/// Accuracy of an all-reduce output `got` against the fp64 sum over nRanks ranks: the largest
/// |got - exact| and ||got - exact||_2 / ||exact||_2 (the RMS error relative to the RMS value).
void compressionError(const void* got, size_t count, tpcomm::DataType dtype, int nRanks, double* maxAbs,
                      double* rmsRel);

}  // namespace tpcomm_bench
