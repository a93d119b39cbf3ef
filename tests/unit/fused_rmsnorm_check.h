// Shared by the fused all-reduce + residual + RMSNorm tests (tests/unit and tests/gpu): inputs,
// the fp64 reference and the stated tolerance (documented in tests/unit/fused_rmsnorm_test.cc and
// docs/fused_rmsnorm.md).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "algos/fused/fused_rmsnorm.h"
#include "algos/host/host_reduce.h"

namespace tpcomm {
namespace fused_test {

/// A byte buffer of `count` elements of `dt` filled with `poison` bytes.
inline std::vector<char> poisoned(size_t count, DataType dt, unsigned char poison = 0xA5) {
  return std::vector<char>(count * dataTypeSize(dt), static_cast<char>(poison));
}

inline double unitRoundoff(DataType dt) {
  return dt == DataType::kF32 ? std::ldexp(1.0, -24) : dt == DataType::kF16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
}

// Deterministic values in [-1, 1) (rank -1: residual, -2: weight, which is in [0.5, 1.5)).
inline std::vector<char> randomBuffer(size_t count, DataType dt, int who, size_t salt) {
  std::vector<char> b = poisoned(count, dt);
  std::mt19937 gen(static_cast<unsigned>(1000 * (who + 3) + salt));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (size_t i = 0; i < count; ++i) storeFromFloat(b.data(), i, dt, who == -2 ? 1.0f + 0.5f * dist(gen) : dist(gen));
  return b;
}

struct Problem {
  int nRanks;
  size_t rows, hidden;
  DataType dt;
  float eps;
  std::vector<std::vector<char>> inputs;  // per rank
  std::vector<char> residual, weight;     // residual as every rank starts with it
  std::vector<double> refResidual, refOut;

  Problem(int n, size_t r, size_t h, DataType d, float e) : nRanks(n), rows(r), hidden(h), dt(d), eps(e) {
    const size_t salt = r * 131 + h;
    for (int k = 0; k < n; ++k) inputs.push_back(randomBuffer(r * h, d, k, salt));
    residual = randomBuffer(r * h, d, -1, salt);
    weight = randomBuffer(h, d, -2, salt);
    std::vector<const void*> srcs;
    for (const auto& in : inputs) srcs.push_back(in.data());
    refResidual.resize(r * h);
    refOut.resize(r * h);
    referenceResidualRmsNorm(srcs.data(), n, residual.data(), weight.data(), e, r, h, d, refResidual.data(),
                             refOut.data());
  }

  // Elements outside the stated tolerance in (gotResidual, gotOut); the first in *first.
  size_t countOutOfTolerance(const void* gotResidual, const void* gotOut, std::string* first) const {
    const double u = unitRoundoff(dt), u32 = std::ldexp(1.0, -24);
    size_t bad = 0;
    for (size_t row = 0; row < rows; ++row) {
      const size_t base = row * hidden;
      double sumSquares = 0, drMax = 0;
      std::vector<double> dr(hidden);
      for (size_t i = 0; i < hidden; ++i) {
        double x = 0, sumAbs = 0;
        for (const auto& in : inputs) {
          x += loadAsFloat(in.data(), base + i, dt);
          sumAbs += std::fabs(loadAsFloat(in.data(), base + i, dt));
        }
        dr[i] = (nRanks - 1) * u32 * sumAbs + u * std::fabs(x) +
                u * (std::fabs(x) + std::fabs(loadAsFloat(residual.data(), base + i, dt)));
        drMax = std::max(drMax, dr[i]);
        sumSquares += refResidual[base + i] * refResidual[base + i];
      }
      const double inv = 1.0 / std::sqrt(sumSquares / hidden + eps);
      for (size_t i = 0; i < hidden; ++i) {
        const double w = loadAsFloat(weight.data(), i, dt);
        const double gotR = loadAsFloat(gotResidual, base + i, dt), gotY = loadAsFloat(gotOut, base + i, dt);
        const double tolR = 2 * dr[i] + 1e-30;
        const double tolY =
            2 * (std::fabs(w) * inv * dr[i] + std::fabs(refOut[base + i]) * (inv * drMax + 52 * u32 + u)) + 1e-30;
        const bool okR = std::fabs(gotR - refResidual[base + i]) <= tolR;
        const bool okY = std::fabs(gotY - refOut[base + i]) <= tolY;
        if (!okR || !okY) {
          if (bad++ == 0 && first) {
            char msg[256];
            std::snprintf(msg, sizeof(msg), "row %zu col %zu: residual %.9g (ref %.9g, tol %.3g), out %.9g (ref %.9g, tol %.3g)",
                          row, i, gotR, refResidual[base + i], tolR, gotY, refOut[base + i], tolY);
            *first = msg;
          }
        }
      }
    }
    return bad;
  }
};

}  // namespace fused_test
}  // namespace tpcomm
