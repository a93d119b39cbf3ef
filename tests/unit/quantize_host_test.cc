// The fast host quantizers (src/algos/compressed/quantize_host.h) against quantize.h's scalar functions, the
// definition: every code, scale and read-back value bitwise equal. Inputs: every bf16 and every
// f16 value (in order, shuffled, and beside anchors that set the block's scale), every code under
// a table of scales (NaN, zeros, float denormals, huge), floats around every E4M3 rounding tie,
// random f32 bit patterns, zero / NaN / Inf / denormal blocks, saturation, short tail blocks and
// the n-rank sum of the compressed all-reduce.
#include "algos/compressed/quantize_host.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "algos/host/host_reduce.h"
#include "algos/compressed/quantize.h"
#include "unit/compressed_check.h"

namespace tpcomm {
namespace {

constexpr int kB = kQuantBlockElems;
constexpr QuantFormat kFormats[] = {QuantFormat::kFp8E4m3, QuantFormat::kInt8};
constexpr DataType kDtypes[] = {DataType::kF32, DataType::kF16, DataType::kBF16};

const char* formatName(QuantFormat f) { return f == QuantFormat::kFp8E4m3 ? "fp8" : "int8"; }

float bitsFloat(uint32_t u) {
  float v;
  std::memcpy(&v, &u, 4);
  return v;
}

using test::scalarDequantize;
using test::scalarQuantize;

// Index of the first differing element of two buffers of `elemBytes`-byte elements, or -1.
long firstDifference(const void* a, const void* b, size_t count, size_t elemBytes) {
  for (size_t i = 0; i < count; ++i)
    if (std::memcmp(static_cast<const char*>(a) + i * elemBytes, static_cast<const char*>(b) + i * elemBytes,
                    elemBytes) != 0)
      return static_cast<long>(i);
  return -1;
}

// Quantizes `in` (count elements of dt) both ways, compares codes and scales, then reads the codes
// back both ways into every dtype and compares those. Returns the number of elements checked.
size_t checkBothWays(QuantFormat f, const void* in, DataType dt, size_t count, const char* what) {
  const size_t blocks = (count + kB - 1) / kB;
  std::vector<uint8_t> codes(count, 0xaa), refCodes(count, 0x55);
  std::vector<float> scales(blocks, 1.0f), refScales(blocks, 2.0f);
  hostQuantize(f, in, dt, count, codes.data(), scales.data());
  scalarQuantize(f, in, dt, count, refCodes.data(), refScales.data());
  long d = firstDifference(codes.data(), refCodes.data(), count, 1);
  EXPECT_EQ(d, -1) << what << " " << formatName(f) << ": code " << d << " is " << int(codes[d < 0 ? 0 : d])
                   << ", scalar " << int(refCodes[d < 0 ? 0 : d]) << " (input element as float "
                   << loadAsFloat(in, d < 0 ? 0 : d, dt) << ")";
  d = firstDifference(scales.data(), refScales.data(), blocks, 4);
  EXPECT_EQ(d, -1) << what << " " << formatName(f) << ": scale of block " << d;
  for (DataType out : kDtypes) {
    const size_t es = dataTypeSize(out);
    std::vector<char> got(count * es, 0x11), want(count * es, 0x22);
    hostDequantize(f, refCodes.data(), refScales.data(), count, got.data(), out);
    scalarDequantize(f, refCodes.data(), refScales.data(), count, want.data(), out);
    d = firstDifference(got.data(), want.data(), count, es);
    EXPECT_EQ(d, -1) << what << " " << formatName(f) << ": read back into dtype " << static_cast<int>(out)
                     << ", element " << d;
  }
  return count;
}

std::vector<uint16_t> all16BitPatterns() {
  std::vector<uint16_t> v(1 << 16);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint16_t>(i);
  return v;
}

// Every 16-bit pattern as bf16 and as f16 (NaNs, infinities, denormals and both zeros included):
// in order (blocks of neighbouring values, many of them all-NaN or all-denormal), shuffled
// (blocks mixing binades, most holding a NaN or an infinity), and in blocks headed by an anchor
// no smaller than any of them (so each value is encoded under scales from denormal to huge, the
// anchor itself at the saturation edge, small values underflowing to code 0).
TEST(QuantizeHost, Every16BitValueMatchesScalar) {
  std::mt19937 rng(18);
  for (DataType dt : {DataType::kBF16, DataType::kF16}) {
    const std::vector<uint16_t> ordered = all16BitPatterns();
    std::vector<uint16_t> shuffled = ordered;
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    // Anchors: 1.0, 0.5, a large value, a tiny normal, a denormal, the largest finite value.
    const uint16_t anchors[] = {static_cast<uint16_t>(dt == DataType::kBF16 ? 0x3f80 : 0x3c00),
                                static_cast<uint16_t>(dt == DataType::kBF16 ? 0x3f00 : 0x3800),
                                static_cast<uint16_t>(dt == DataType::kBF16 ? 0x4b00 : 0x6000),
                                static_cast<uint16_t>(dt == DataType::kBF16 ? 0x0080 : 0x0400),
                                0x0001,
                                static_cast<uint16_t>(dt == DataType::kBF16 ? 0x7f7f : 0x7bff)};
    std::vector<uint16_t> anchored;  // blocks of [anchor, 63 values of at most its magnitude]
    for (uint16_t a : anchors) {
      const float top = loadAsFloat(&a, 0, dt);
      for (size_t i = 0; i < shuffled.size(); ++i) {
        if (!(std::fabs(loadAsFloat(shuffled.data(), i, dt)) <= top)) continue;
        if (anchored.size() % kB == 0) anchored.push_back(a);
        anchored.push_back(shuffled[i]);
      }
      while (anchored.size() % kB != 0) anchored.push_back(0);
    }
    for (QuantFormat f : kFormats) {
      checkBothWays(f, ordered.data(), dt, ordered.size(), "ordered");
      checkBothWays(f, shuffled.data(), dt, shuffled.size(), "shuffled");
      checkBothWays(f, anchored.data(), dt, anchored.size(), "anchored");
      checkBothWays(f, shuffled.data(), dt, 1000 * kB + 37, "short tail block");  // a 37-element last block
    }
  }
}

// Elements encoded under scale 1 (a block whose amax is exactly 448, or 127 for int8): every
// E4M3 value and every rounding tie between neighbours, with the 8 floats either side of each,
// plus random floats of every binade up to the format's maximum.
TEST(QuantizeHost, RoundingTiesUnderScaleOneMatchScalar) {
  for (QuantFormat f : kFormats) {
    const float top = f == QuantFormat::kFp8E4m3 ? kFp8E4m3Max : kInt8Max;
    std::vector<float> points;
    for (int c = 0; c < 0x7e; ++c) {
      const float lo = fp8E4m3Decode(static_cast<uint8_t>(c)), hi = fp8E4m3Decode(static_cast<uint8_t>(c + 1));
      points.push_back(lo);
      points.push_back((lo + hi) / 2);  // exact: a float midpoint of two E4M3 values
    }
    for (int k = -127; k <= 127; ++k) points.push_back(k + 0.5f);  // int8's ties
    std::vector<float> values;
    for (float p : points) {
      uint32_t u;
      std::memcpy(&u, &p, 4);
      for (int d = -8; d <= 8; ++d)
        if (static_cast<int64_t>(u) + d >= 0)
          values.push_back(bitsFloat(static_cast<uint32_t>(static_cast<int64_t>(u) + d)));
    }
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> mant(1.0f, 2.0f);
    for (int e = -40; e <= 8; ++e)
      for (int i = 0; i < 2000; ++i) values.push_back(std::ldexp(mant(rng), e));
    std::vector<float> in;
    for (size_t i = 0; i < values.size(); ++i) {
      if (in.size() % kB == 0) in.push_back(top);
      const float v = std::min(std::fabs(values[i]), top);
      in.push_back(i % 2 ? -v : v);
    }
    checkBothWays(f, in.data(), DataType::kF32, in.size(), "ties under scale 1");
  }
}

// Random f32 bit patterns (every exponent, NaN payloads, denormals) and the special blocks.
TEST(QuantizeHost, F32PatternsAndSpecialBlocksMatchScalar) {
  std::mt19937 rng(5);
  std::vector<float> in(1 << 20);
  for (float& v : in) v = bitsFloat(static_cast<uint32_t>(rng()));
  // Blocks 0..: all +0, mixed +-0, all denormal, one NaN, one +Inf, one -Inf, huge (sum-overflow
  // sized), one element = FLT_MAX, saturation (equal magnitudes of an arbitrary amax).
  const float inf = std::numeric_limits<float>::infinity(), dmin = std::numeric_limits<float>::denorm_min();
  auto block = [&](int b) { return in.data() + static_cast<size_t>(b) * kB; };
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int b = 0; b < 64; ++b)
    for (int i = 0; i < kB; ++i) block(b)[i] = normal(rng);
  std::fill(block(0), block(0) + kB, 0.0f);
  for (int i = 0; i < kB; ++i) block(1)[i] = i % 2 ? -0.0f : 0.0f;
  for (int i = 0; i < kB; ++i) block(2)[i] = (i % 2 ? -1.0f : 1.0f) * dmin * static_cast<float>(i + 1);
  block(3)[17] = std::numeric_limits<float>::quiet_NaN();
  block(4)[0] = inf;
  block(5)[63] = -inf;
  for (int i = 0; i < kB; ++i) block(6)[i] *= 3e38f;
  block(7)[5] = std::numeric_limits<float>::max();
  for (int i = 0; i < kB; ++i) block(8)[i] = (i % 3 ? 1.0f : -1.0f) * 0.7071f;
  for (int b = 9; b < 64; ++b)
    for (int i = 0; i < kB; ++i) block(b)[i] *= std::ldexp(1.0f, 4 * (b - 36));  // scales across binades
  for (QuantFormat f : kFormats) {
    checkBothWays(f, in.data(), DataType::kF32, in.size(), "f32 patterns");
    for (size_t count : {size_t{1}, size_t{63}, size_t{65}, size_t{4097}})
      checkBothWays(f, in.data(), DataType::kF32, count, "f32 short");
  }
}

// Every code read back under scales of every kind, into floats, bitwise as quantDecode.
TEST(QuantizeHost, EveryCodeUnderEveryKindOfScale) {
  const float scales[] = {std::numeric_limits<float>::quiet_NaN(),
                          0.0f,
                          -0.0f,
                          std::numeric_limits<float>::denorm_min(),
                          1e-42f,
                          std::numeric_limits<float>::min(),
                          1e-30f,
                          std::ldexp(1.0f, -9),
                          1.0f / 448.0f,
                          1.0f,
                          3.14159f,
                          1e30f,
                          std::numeric_limits<float>::max() / 448.0f,
                          std::numeric_limits<float>::max(),
                          -2.5f};
  uint8_t codes[256];
  for (int c = 0; c < 256; ++c) codes[c] = static_cast<uint8_t>(c);
  for (QuantFormat f : kFormats)
    for (float s : scales)
      for (int c0 = 0; c0 < 256; c0 += kB) {
        float got[kB];
        hostDequantizeFloats(f, codes + c0, s, kB, got);
        for (int i = 0; i < kB; ++i) {
          const float want = quantDecode(f, codes[c0 + i], s);
          EXPECT_EQ(std::memcmp(&got[i], &want, 4), 0)
              << formatName(f) << " code " << c0 + i << " scale " << s << ": " << got[i] << " vs " << want;
        }
      }
}

// The reduce step: the rank-order fp32 sum of n ranks' codes read back, quantized once.
TEST(QuantizeHost, QuantizedSumMatchesScalar) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t count = 100 * kB + 19;
  const size_t blocks = (count + kB - 1) / kB;
  for (QuantFormat f : kFormats)
    for (int n = 1; n <= 4; ++n) {
      std::vector<std::vector<uint8_t>> codes(n, std::vector<uint8_t>(count));
      std::vector<std::vector<float>> scales(n, std::vector<float>(blocks));
      std::vector<const uint8_t*> cp(n);
      std::vector<const float*> sp(n);
      for (int r = 0; r < n; ++r) {
        std::vector<float> x(count);
        for (size_t i = 0; i < count; ++i) x[i] = normal(rng) * (i % 97 == 0 ? 100.0f : 1.0f);
        x[3 * kB + r] = r == 1 ? std::numeric_limits<float>::infinity() : x[3 * kB + r];      // a NaN block
        for (int i = 0; i < kB; ++i) x[5 * kB + i] = r % 2 ? -x[5 * kB + i] : x[5 * kB + i];  // cancellation
        for (int i = 0; i < kB; ++i) x[7 * kB + i] = 3e38f;                                   // sum overflows
        scalarQuantize(f, x.data(), DataType::kF32, count, codes[r].data(), scales[r].data());
        cp[r] = codes[r].data();
        sp[r] = scales[r].data();
      }
      std::vector<uint8_t> got(count), want(count);
      std::vector<float> gotScales(blocks), wantScales(blocks);
      hostQuantizedSum(f, cp.data(), sp.data(), n, count, got.data(), gotScales.data());
      float sum[kB];
      for (size_t k = 0; k < count; k += kB) {
        const int m = static_cast<int>(std::min<size_t>(count - k, kB));
        for (int i = 0; i < m; ++i) {
          sum[i] = quantDecode(f, cp[0][k + i], sp[0][k / kB]);
          for (int r = 1; r < n; ++r) sum[i] = quantAdd(sum[i], quantDecode(f, cp[r][k + i], sp[r][k / kB]));
        }
        quantizeBlock(f, sum, m, want.data() + k, &wantScales[k / kB]);
      }
      EXPECT_EQ(firstDifference(got.data(), want.data(), count, 1), -1) << formatName(f) << " n=" << n;
      EXPECT_EQ(firstDifference(gotScales.data(), wantScales.data(), blocks, 4), -1) << formatName(f) << " n=" << n;
      if (n >= 2) EXPECT_TRUE(std::isnan(gotScales[3]) && std::isnan(gotScales[7])) << "NaN / overflow blocks";
    }
}

}  // namespace
}  // namespace tpcomm
