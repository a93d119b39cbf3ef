// fused_rmsnorm.cc: the host path of the residual add + RMSNorm (bit-for-bit the GPU kernels'
// arithmetic, see fused_rmsnorm.h) and its fp64 reference. Built with -ffp-contract=off (root CMakeLists.txt): a fused
// multiply-add the compiler chose on its own would change bits the GPU path does not change.
#include "algos/fused/fused_rmsnorm.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "algos/host/host_reduce.h"
#include "common/error.h"

namespace tpcomm {

namespace {

constexpr int kWarp = 32;

// Sum of r[0..hidden) squared, in the order of the GPU block reduction (fused_rmsnorm_common.cuh).
float gpuOrderSumSquares(const float* r, size_t hidden, int unitElems) {
  float warpSum[kRmsNormThreads / kWarp];
  float lane[kWarp];
  for (int w = 0; w < kRmsNormThreads / kWarp; ++w) {
    for (int l = 0; l < kWarp; ++l) {
      const size_t t = static_cast<size_t>(w) * kWarp + l;
      float acc = 0.0f;
      for (size_t u = t; u * unitElems < hidden; u += kRmsNormThreads)
        for (int k = 0; k < unitElems && u * unitElems + k < hidden; ++k) {
          const float v = r[u * unitElems + k];
          acc = std::fmaf(v, v, acc);
        }
      lane[l] = acc;
    }
    for (int off = kWarp / 2; off >= 1; off /= 2) {
      float next[kWarp];
      for (int l = 0; l < kWarp; ++l) next[l] = lane[l] + lane[l ^ off];
      for (int l = 0; l < kWarp; ++l) lane[l] = next[l];
    }
    warpSum[w] = lane[0];
  }
  float total = warpSum[0];
  for (int w = 1; w < kRmsNormThreads / kWarp; ++w) total = total + warpSum[w];
  return total;
}

}  // namespace

void hostResidualRmsNorm(const void* x, void* residual, const void* weight, float eps, void* out, size_t rows,
                         size_t hidden, DataType dtype) {
  const int unit = rmsNormUnitElems(dtype);
  std::vector<float> r(hidden);
  for (size_t row = 0; row < rows; ++row) {
    const size_t base = row * hidden;
    for (size_t i = 0; i < hidden; ++i) {
      const float sum = loadAsFloat(residual, base + i, dtype) + loadAsFloat(x, base + i, dtype);
      storeFromFloat(residual, base + i, dtype, sum);
      r[i] = loadAsFloat(residual, base + i, dtype);  // the rounded value, as the GPU keeps it
    }
    const float sumSquares = gpuOrderSumSquares(r.data(), hidden, unit);
    const float meanPlusEps = sumSquares / static_cast<float>(hidden) + eps;
    const float invRms = 1.0f / std::sqrt(meanPlusEps);
    for (size_t i = 0; i < hidden; ++i) {
      const float scaled = r[i] * invRms;
      storeFromFloat(out, base + i, dtype, scaled * loadAsFloat(weight, i, dtype));
    }
  }
}

void referenceResidualRmsNorm(const void* const* inputs, int nRanks, const void* residual, const void* weight,
                              double eps, size_t rows, size_t hidden, DataType dtype, double* residualOut,
                              double* out) {
  for (size_t row = 0; row < rows; ++row) {
    const size_t base = row * hidden;
    double sumSquares = 0;
    for (size_t i = 0; i < hidden; ++i) {
      double x = 0;
      for (int r = 0; r < nRanks; ++r) x += loadAsFloat(inputs[r], base + i, dtype);
      const double res = loadAsFloat(residual, base + i, dtype) + x;
      residualOut[base + i] = res;
      sumSquares += res * res;
    }
    const double invRms = 1.0 / std::sqrt(sumSquares / static_cast<double>(hidden) + eps);
    for (size_t i = 0; i < hidden; ++i)
      out[base + i] = residualOut[base + i] * invRms * loadAsFloat(weight, i, dtype);
  }
}

}  // namespace tpcomm
