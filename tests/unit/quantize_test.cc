// The block quantizers of compressed all-reduce (src/algos/compressed/quantize.h) against scalar
// references written differently: fp8 by exhaustive search for the nearest of E4M3's 254 finite
// values (ties to the even code), int8 in double with an explicit tie rule. Then the block rules
// (zero, NaN and Inf blocks, -0, float denormals, saturation) and the per-element error bounds
// docs/compression.md states, on normal data and on data with outliers.
#include "algos/compressed/quantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace tpcomm {
namespace {

// Exact E4M3 values, computed from the definition rather than from fp8E4m3Decode.
double e4m3Value(int code) {
  const int e = (code >> 3) & 15, m = code & 7;
  const double mag = e == 0 ? m * std::ldexp(1.0, -9) : (1.0 + m / 8.0) * std::ldexp(1.0, e - 7);
  return (code & 0x80) ? -mag : mag;
}

uint8_t fp8Reference(float v) {
  if (std::isnan(v)) return 0x7f;
  const double x = v;
  if (x >= 448.0) return 0x7e;
  if (x <= -448.0) return 0xfe;
  int best = -1;
  double bestErr = 0;
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;  // NaN codes
    const double err = std::fabs(e4m3Value(c) - x);
    if (best < 0 || err < bestErr || (err == bestErr && (c & 1) == 0 && (best & 1) == 1)) {
      best = c;
      bestErr = err;
    }
  }
  return e4m3Value(best) == 0.0 ? 0 : static_cast<uint8_t>(best);  // +0 only
}

int8_t int8Reference(float v) {
  if (std::isnan(v)) return 0;
  const double x = v;
  if (x >= 127.0) return 127;
  if (x <= -127.0) return -127;
  double f = std::floor(x), d = x - f;
  double r = d > 0.5 ? f + 1 : d < 0.5 ? f : (std::fmod(f, 2.0) == 0 ? f : f + 1);
  return static_cast<int8_t>(r);
}

std::vector<float> edgeValues() {
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, 448.0f, -448.0f, 447.99f, 448.01f, 464.0f, 480.0f, 1e30f,
                          -1e30f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min(),
                          -std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(),
                          std::ldexp(1.0f, -6), std::ldexp(1.0f, -9), std::ldexp(1.0f, -10), std::ldexp(1.0f, -11),
                          std::ldexp(3.0f, -11), std::ldexp(1.5f, -10), 126.5f, -126.5f, 127.5f, 0.5f, 1.5f,
                          2.5f, -2.5f};
  // Every E4M3 value and every midpoint between neighbours (the ties).
  for (int c = 0; c < 0x7f; ++c) {
    v.push_back(static_cast<float>(e4m3Value(c)));
    v.push_back(static_cast<float>(-e4m3Value(c)));
    if (c + 1 < 0x7f) v.push_back(static_cast<float>((e4m3Value(c) + e4m3Value(c + 1)) / 2));
  }
  return v;
}

TEST(Quantize, Fp8EncodeMatchesExhaustiveNearest) {
  for (float x : edgeValues()) EXPECT_EQ(fp8E4m3Encode(x), fp8Reference(x)) << x;
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {  // random bit patterns: every exponent, NaNs and denormals too
    uint32_t u = bits(rng);
    float x;
    std::memcpy(&x, &u, 4);
    if (std::fabs(x) > 1e3f && !std::isinf(x) && !std::isnan(x)) x = std::ldexp(std::fmod(x, 1.0f), 9);  // keep most in range
    ASSERT_EQ(fp8E4m3Encode(x), fp8Reference(x)) << x << " bits " << u;
  }
}

TEST(Quantize, Fp8DecodeIsExactAndRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    const float v = fp8E4m3Decode(static_cast<uint8_t>(c));
    if ((c & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(v)) << c;
      continue;
    }
    EXPECT_EQ(static_cast<double>(v), e4m3Value(c)) << c;
    EXPECT_EQ(fp8E4m3Encode(v), c == 0x80 ? 0 : c) << c;  // -0 encodes as +0
  }
}

TEST(Quantize, Int8EncodeMatchesReference) {
  for (float x : edgeValues()) EXPECT_EQ(int8Encode(x), int8Reference(x)) << x;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-140.0f, 140.0f);
  for (int i = 0; i < 200000; ++i) {
    float x = u(rng);
    if (i % 4 == 0) x = std::round(x * 2) / 2;  // exact halves: the ties
    ASSERT_EQ(int8Encode(x), int8Reference(x)) << x;
  }
}

TEST(Quantize, BlockRules) {
  for (QuantFormat f : {QuantFormat::kFp8E4m3, QuantFormat::kInt8}) {
    SCOPED_TRACE(f == QuantFormat::kFp8E4m3 ? "fp8" : "int8");
    uint8_t codes[8];
    float scale, out[8];
    // Zero block, with -0: reads back +0 everywhere.
    float zeros[8] = {0, -0.0f, 0, -0.0f, 0, 0, -0.0f, 0};
    quantizeBlock(f, zeros, 8, codes, &scale);
    dequantizeBlock(f, codes, scale, 8, out);
    for (float v : out) EXPECT_TRUE(v == 0.0f && !std::signbit(v));
    // A NaN or an Inf anywhere: the whole block reads back NaN.
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                      -std::numeric_limits<float>::infinity()}) {
      float x[8] = {1, 2, 3, bad, 5, 6, 7, 8};
      quantizeBlock(f, x, 8, codes, &scale);
      dequantizeBlock(f, codes, scale, 8, out);
      for (float v : out) EXPECT_TRUE(std::isnan(v)) << bad;
    }
    // Float denormals only: amax / max underflows to 0, the block reads back +0 (documented).
    float tiny[8];
    for (float& t : tiny) t = -std::numeric_limits<float>::denorm_min();
    quantizeBlock(f, tiny, 8, codes, &scale);
    dequantizeBlock(f, codes, scale, 8, out);
    for (float v : out) EXPECT_TRUE(v == 0.0f && !std::signbit(v));
    // The block's largest magnitude reads back within one rounding of itself, sign kept.
    float x[8] = {-3.0e-3f, 1e-9f, 2.5f, -1234.5f, 0.0f, -0.0f, 7.0f, 1e-30f};
    quantizeBlock(f, x, 8, codes, &scale);
    dequantizeBlock(f, codes, scale, 8, out);
    EXPECT_NEAR(out[3], -1234.5f, 1234.5f * 1e-6f);
    EXPECT_FALSE(std::signbit(out[4]));
    EXPECT_FALSE(std::signbit(out[5]));
  }
}

// docs/compression.md's bounds, per element of a block with amax A:
//   fp8:  |x' - x| <= 2^-4 |x| + A * 2^-10 / 448   (3 mantissa bits; the subnormal step below)
//   int8: |x' - x| <= A / 254                        (half a step of A / 127)
// plus 3 * 2^-24 * (|x| + A) for the float roundings of the scale, the division and the read-back
// (an int8 element measured 1.5e-5 over A / 254 alone; the test is that sharp).
TEST(Quantize, ErrorWithinTheStatedBound) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int outliers = 0; outliers < 2; ++outliers)
    for (int block : {32, 64, 128}) {
      std::vector<float> x(block);
      std::vector<uint8_t> codes(block);
      std::vector<float> out(block);
      for (int trial = 0; trial < 500; ++trial) {
        for (float& v : x) v = normal(rng) * std::ldexp(1.0f, trial % 40 - 20);
        if (outliers) x[trial % block] *= 1000.0f;  // one large value per block
        float amax = 0;
        for (float v : x) amax = std::max(amax, std::fabs(v));
        for (QuantFormat f : {QuantFormat::kFp8E4m3, QuantFormat::kInt8}) {
          float scale;
          quantizeBlock(f, x.data(), block, codes.data(), &scale);
          dequantizeBlock(f, codes.data(), scale, block, out.data());
          for (int i = 0; i < block; ++i) {
            const double err = std::fabs(static_cast<double>(out[i]) - x[i]);
            const double bound = f == QuantFormat::kFp8E4m3
                                     ? (std::ldexp(1.0, -4) * std::fabs(x[i]) + amax * std::ldexp(1.0, -10) / 448.0)
                                     : amax / 254.0;
            const double rounding = 3 * std::ldexp(1.0, -24) * (std::fabs(x[i]) + amax);
            ASSERT_LE(err, bound + rounding) << "block " << block << " x " << x[i] << " amax " << amax;
          }
        }
      }
    }
}

}  // namespace
}  // namespace tpcomm
