// Host (CPU) reductions and 16-bit conversions. Sums accumulate in fp32 in rank order 0..n-1, the
// same order the GPU kernels use, so host and device paths give bitwise-identical results and
// every rank gets the same bits. f32->f16/bf16 rounding is round-to-nearest-even, like
// __float2half_rn / __float2bfloat16_rn.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tpcomm/types.h"

namespace tpcomm {

float bf16ToFloat(uint16_t h);
uint16_t floatToBf16(float f);
float f16ToFloat(uint16_t h);
uint16_t floatToF16(float f);

/// dst[i] = op over r in 0..n-1 of srcs[r][i], i < count. dst may alias any src.
void hostReduce(void* dst, const void* const* srcs, int n, size_t count, DataType dtype, ReduceOp op);

/// The same reduction, result stored to every dsts[d], d < nDst (each may alias any src: a
/// block of 256 elements is read from every src before it is stored anywhere). Bit d of
/// `streamMask` (d < 64) makes the stores to dsts[d] bypass the cache (x86 non-temporal stores
/// where dsts[d] is 16-byte aligned; plain stores elsewhere): for large results nobody reads
/// soon, as it saves the read-for-ownership of every destination line. Call hostStreamFence()
/// before another thread may read them.
void hostReduceTo(void* const* dsts, int nDst, const void* const* srcs, int n, size_t count, DataType dtype,
                  ReduceOp op, uint64_t streamMask);
/// memcpy, or with `streaming` non-temporal stores as above (dst and src must not overlap).
void hostCopy(void* dst, const void* src, size_t bytes, bool streaming);
/// Orders earlier streaming stores before later stores (sfence on x86; nothing elsewhere, where
/// streaming stores are plain stores and the barrier's release orders them).
void hostStreamFence();

/// Element i of a buffer as float (reference code and tests).
float loadAsFloat(const void* buf, size_t i, DataType dtype);
/// Stores `v` (rounded) as element i.
void storeFromFloat(void* buf, size_t i, DataType dtype, float v);

/// Splits `count` elements into `parts` contiguous slices whose starts are multiples of
/// `align` elements (16-byte vectors): slice p is [begin, end). Earlier slices take the
/// remainder; slices may be empty when count is small.
void partition(size_t count, int parts, int p, size_t align, size_t* begin, size_t* end);

}  // namespace tpcomm
