// The compressed all-reduce's definition and error bound (docs/compression.md), for the CPU and
// GPU tests: the expected output computed block by block straight from the quantizers, without
// any schedule, and the per-element bound against the exact sum of the inputs.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "algos/host/host_reduce.h"
#include "algos/compressed/quantize.h"

namespace tpcomm {
namespace test {

// quantize.h's scalar functions over a buffer, element by element (the definition the fast host
// quantizers of algos/compressed/quantize_host.h must equal bit for bit): codes[0..count) and one scale per
// started block of the elements of x (dtype dt); and read back into out (dtype dt).
inline void scalarQuantize(QuantFormat f, const void* x, DataType dt, size_t count, uint8_t* codes, float* scales) {
  float v[kQuantBlockElems];
  for (size_t k = 0; k < count; k += kQuantBlockElems) {
    const int m = static_cast<int>(std::min<size_t>(count - k, kQuantBlockElems));
    for (int i = 0; i < m; ++i) v[i] = loadAsFloat(x, k + i, dt);
    quantizeBlock(f, v, m, codes + k, &scales[k / kQuantBlockElems]);
  }
}
inline void scalarDequantize(QuantFormat f, const uint8_t* codes, const float* scales, size_t count, void* out,
                             DataType dt) {
  for (size_t i = 0; i < count; ++i) storeFromFloat(out, i, dt, quantDecode(f, codes[i], scales[i / kQuantBlockElems]));
}

// The definition: per block of kQuantBlockElems elements aligned at the message start.
// Buf: std::vector<char> or std::vector<uint8_t>, one per rank.
template <typename Buf>
Buf compressedReference(const std::vector<Buf>& in, size_t count, DataType dt, QuantFormat f) {
  const int n = static_cast<int>(in.size());
  Buf out(count * dataTypeSize(dt));
  float x[kQuantBlockElems], back[kQuantBlockElems], sum[kQuantBlockElems];
  uint8_t codes[kQuantBlockElems];
  float scale;
  for (size_t k = 0; k < count; k += kQuantBlockElems) {
    const int m = static_cast<int>(std::min<size_t>(count - k, kQuantBlockElems));
    for (int r = 0; r < n; ++r) {
      for (int i = 0; i < m; ++i) x[i] = loadAsFloat(in[r].data(), k + i, dt);
      quantizeBlock(f, x, m, codes, &scale);
      dequantizeBlock(f, codes, scale, m, back);
      for (int i = 0; i < m; ++i) sum[i] = r == 0 ? back[i] : sum[i] + back[i];
    }
    quantizeBlock(f, sum, m, codes, &scale);
    dequantizeBlock(f, codes, scale, m, back);
    for (int i = 0; i < m; ++i) storeFromFloat(out.data(), k + i, dt, back[i]);
  }
  return out;
}

// docs/compression.md's per-element bound for x in a block of amax a.
inline double elementBound(QuantFormat f, double x, double a) {
  const double rounding = 3.0 * std::ldexp(1.0, -24) * (std::fabs(x) + a);
  return (f == QuantFormat::kFp8E4m3 ? std::ldexp(1.0, -4) * std::fabs(x) + a * std::ldexp(1.0, -10) / 448.0
                                     : a / 254.0) +
         rounding;
}

// Bound of the compressed all-reduce's element i against the exact sum of the inputs: each
// rank's quantization error, the fp32 sum's rounding, the sum's own quantization, and the
// rounding to the output dtype (half an ulp).
template <typename Buf>
double compressedErrorBound(const std::vector<Buf>& in, size_t count, DataType dt, QuantFormat f, size_t i) {
  const size_t k0 = i / kQuantBlockElems * kQuantBlockElems, k1 = std::min(count, k0 + kQuantBlockElems);
  double total = 0, exactAmax = 0, absSum = 0;
  for (const auto& b : in) {
    double a = 0;
    for (size_t k = k0; k < k1; ++k) a = std::max(a, std::fabs(static_cast<double>(loadAsFloat(b.data(), k, dt))));
    const double x = loadAsFloat(b.data(), i, dt);
    total += elementBound(f, x, a);
    absSum += std::fabs(x) + elementBound(f, x, a);
  }
  for (size_t k = k0; k < k1; ++k) {
    double s = 0;
    for (const auto& b : in) s += loadAsFloat(b.data(), k, dt);
    exactAmax = std::max(exactAmax, std::fabs(s));
  }
  double sumI = 0;
  for (const auto& b : in) sumI += loadAsFloat(b.data(), i, dt);
  // The sum that is quantized differs from the exact one by `total` (+ rounding): bound it there.
  const double summation = static_cast<double>(in.size()) * std::ldexp(1.0, -24) * absSum;
  const double quantized = elementBound(f, std::fabs(sumI) + total + summation, exactAmax + total + summation);
  const double toDtype = (dt == DataType::kF32 ? std::ldexp(1.0, -24) : dt == DataType::kF16 ? std::ldexp(1.0, -11)
                                                                                               : std::ldexp(1.0, -8)) *
                         (std::fabs(sumI) + total + summation + quantized);
  return total + summation + quantized + toDtype;
}

}  // namespace test
}  // namespace tpcomm
