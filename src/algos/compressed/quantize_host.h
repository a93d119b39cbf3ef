// quantize_host.h: the block quantizers of quantize.h over whole buffers on host ranks, fast
// (branch-free block loops that vectorize; ~10-60x the per-element scalar code) and bitwise
// equal to quantize.h's scalar functions, which stay the definition (the kernels use those).
// tests/unit/quantize_host_test.cc checks every bf16 and f16 value, every code and the block rules
// against them. Blocks are kQuantBlockElems elements counted from the pointers given: callers
// pass block-aligned offsets (codes + k, scales + k / kQuantBlockElems).
#pragma once

#include <cstddef>
#include <cstdint>

#include "algos/compressed/quantize.h"
#include "tpcomm/types.h"

namespace tpcomm {

/// Elements x[0..count) (dtype dt) into codes[0..count) and one scale per started block:
/// as quantizeBlock on each block of the elements read as float.
void hostQuantize(QuantFormat f, const void* x, DataType dt, size_t count, uint8_t* codes, float* scales);

/// out[i] = quantDecode(f, codes[i], scales[i / kQuantBlockElems]) rounded to dt, i < count.
void hostDequantize(QuantFormat f, const uint8_t* codes, const float* scales, size_t count, void* out, DataType dt);

/// The reduce of the compressed all-reduce: per block, the fp32 sum in rank order 0..n-1 of every
/// rank's codes read back (quantAdd, never fused), quantized once into outCodes / outScales.
void hostQuantizedSum(QuantFormat f, const uint8_t* const* codes, const float* const* scales, int n, size_t count,
                      uint8_t* outCodes, float* outScales);

/// One block of m <= kQuantBlockElems floats: quantizeBlock's result, fast.
void hostQuantizeFloats(QuantFormat f, const float* x, int m, uint8_t* codes, float* scale);
/// One block read back into floats: dequantizeBlock's result, fast.
void hostDequantizeFloats(QuantFormat f, const uint8_t* codes, float scale, int m, float* out);

}  // namespace tpcomm
