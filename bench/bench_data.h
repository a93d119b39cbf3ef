// bench_data: the verifiable inputs of allreduce_perf -c 1 (nccl-tests' idea). Element i of
// rank r is a small integer in [-a, a] drawn from a hash of (i, r), with a chosen so that every
// partial sum stays an integer of magnitude <= 256: exact in float, half and bfloat16 whatever
// the reduction order. The expected output is therefore exact and is compared bitwise; outputs
// are poisoned (all bits set: NaN in every type) before the checked run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tpcomm/types.h"

namespace tpcomm_bench {

/// Value of element i on rank r for an n-rank run.
int inputValue(size_t i, int rank, int nRanks);

/// Fills host buffer `dst` (count elements of dtype) with rank r's inputs first .. first+count-1.
void fillInput(void* dst, size_t count, tpcomm::DataType dtype, int rank, int nRanks, size_t first = 0);

/// Number of elements of `got` (count elements of dtype) that differ bitwise from the exact
/// all-reduce of every rank's inputs under `op`, for elements first .. first+count-1 (a
/// reduce-scatter's shard r starts at first = r * its count).
int64_t countWrong(const void* got, size_t count, tpcomm::DataType dtype, tpcomm::ReduceOp op, int nRanks,
                   size_t first = 0);

/// All-gather: `got` holds nRanks blocks of `count` elements; block q must be rank q's inputs
/// 0 .. count-1, bitwise. Returns the number of wrong elements.
int64_t countWrongGathered(const void* got, size_t count, tpcomm::DataType dtype, int nRanks);

/// Byte pattern used to poison outputs before a checked run.
constexpr int kPoisonByte = 0xff;

/// Bits of `v` in dtype (round to nearest even; exact for the small integers used here).
uint16_t floatToHalfBits(float v);
uint16_t floatToBf16Bits(float v);

}  // namespace tpcomm_bench
