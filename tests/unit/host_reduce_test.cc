// Host reductions and 16-bit conversions (algos/host/host_reduce.h). Conversions are checked against
// known bit patterns (round-to-nearest-even, subnormals, inf, NaN, signed zero); reductions are
// bit-exact on integer-valued inputs for f32/f16/bf16 x sum/max/min, out of place and in place.
// The vectorizable branch-free conversions are compared bitwise with the earlier branchy ones
// (namespace reference below): every 16-bit input, rounding boundaries, random and (by hand) all
// 2^32 f32 inputs, and whole 16-bit reductions.
#include "algos/host/host_reduce.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "unit/test_util.h"

namespace tpcomm {
namespace {

float fromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t toBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

struct ConvRow {
  uint32_t floatBits;  // input (f32 bits)
  uint16_t halfBits;   // expected 16-bit result
  const char* what;
};

const ConvRow kToF16[] = {
    {0x00000000, 0x0000, "+0"},
    {0x80000000, 0x8000, "-0"},
    {0x3f800000, 0x3c00, "1"},
    {0xc0000000, 0xc000, "-2"},
    {0x3dcccccd, 0x2e66, "0.1 rounds down"},
    {0x477fe000, 0x7bff, "65504, the largest finite"},
    {0x477fefff, 0x7bff, "just below the 65520 tie"},
    {0x477ff000, 0x7c00, "65520 ties to even: inf"},
    {0x7f7fffff, 0x7c00, "FLT_MAX overflows to inf"},
    {0x7f800000, 0x7c00, "+inf"},
    {0xff800000, 0xfc00, "-inf"},
    {0x7fc00000, 0x7e00, "quiet NaN"},
    {0x7f800001, 0x7e00, "signalling NaN becomes quiet"},
    {0xffc00000, 0xfe00, "negative NaN keeps its sign"},
    {0x3f801000, 0x3c00, "1 + 2^-11: tie to even (down)"},
    {0x3f803000, 0x3c02, "1 + 3*2^-11: tie to even (up)"},
    {0x3f801001, 0x3c01, "just above a tie"},
    {0x38800000, 0x0400, "2^-14, the smallest normal"},
    {0x33800000, 0x0001, "2^-24, the smallest subnormal"},
    {0x33000000, 0x0000, "2^-25: tie to even gives 0"},
    {0x33000001, 0x0001, "just above 2^-25 rounds up"},
    {0x33c00000, 0x0002, "3*2^-25: tie to even (up)"},
    {0xb3800000, 0x8001, "-2^-24"},
    {0x387fc000, 0x03ff, "1023*2^-24, the largest subnormal"},
    {0x387fe000, 0x0400, "1023.5*2^-24 ties up into the normals"},
    {0x00000001, 0x0000, "f32 subnormal underflows to 0"},
    {0x42f60000, 0x57b0, "123"},
    {0xc3000000, 0xd800, "-128"},
};

const ConvRow kToBf16[] = {
    {0x00000000, 0x0000, "+0"},
    {0x80000000, 0x8000, "-0"},
    {0x3f800000, 0x3f80, "1"},
    {0xc0000000, 0xc000, "-2"},
    {0x3f808000, 0x3f80, "1 + 2^-8: tie to even (down)"},
    {0x3f818000, 0x3f82, "1 + 3*2^-8: tie to even (up)"},
    {0x3f808001, 0x3f81, "just above a tie"},
    {0x3f807fff, 0x3f80, "just below a tie"},
    {0x7f7fffff, 0x7f80, "FLT_MAX rounds to inf"},
    {0x7f800000, 0x7f80, "+inf"},
    {0xff800000, 0xff80, "-inf"},
    {0x7fc00000, 0x7fc0, "quiet NaN"},
    {0x7f800001, 0x7fc0, "signalling NaN with low payload stays NaN"},
    {0xffc00000, 0xffc0, "negative NaN"},
    {0x00010000, 0x0001, "subnormal, exact"},
    {0x00008000, 0x0000, "subnormal tie to even (down)"},
    {0x00018000, 0x0002, "subnormal tie to even (up)"},
    {0x007fffff, 0x0080, "largest f32 subnormal rounds into the normals"},
    {0x42f60000, 0x42f6, "123"},
    {0xc3000000, 0xc300, "-128"},
};

TEST(Conversion, FloatToF16RoundsToNearestEven) {
  for (const ConvRow& row : kToF16) {
    SCOPED_TRACE(row.what);
    EXPECT_EQ(floatToF16(fromBits(row.floatBits)), row.halfBits) << std::hex << "f32 0x" << row.floatBits;
  }
}

TEST(Conversion, FloatToBf16RoundsToNearestEven) {
  for (const ConvRow& row : kToBf16) {
    SCOPED_TRACE(row.what);
    EXPECT_EQ(floatToBf16(fromBits(row.floatBits)), row.halfBits) << std::hex << "f32 0x" << row.floatBits;
  }
}

struct WidenRow {
  uint16_t halfBits;
  uint32_t floatBits;
  const char* what;
};

TEST(Conversion, F16ToFloatIsExact) {
  const WidenRow rows[] = {
      {0x0000, 0x00000000, "+0"},     {0x8000, 0x80000000, "-0"},
      {0x3c00, 0x3f800000, "1"},      {0x7bff, 0x477fe000, "65504"},
      {0xfbff, 0xc77fe000, "-65504"}, {0x0001, 0x33800000, "2^-24"},
      {0x8001, 0xb3800000, "-2^-24"}, {0x03ff, 0x387fc000, "largest subnormal"},
      {0x0400, 0x38800000, "2^-14"},  {0x7c00, 0x7f800000, "+inf"},
      {0xfc00, 0xff800000, "-inf"},   {0x0200, 0x38000000, "2^-15 (subnormal)"},
  };
  for (const WidenRow& row : rows) {
    SCOPED_TRACE(row.what);
    EXPECT_EQ(toBits(f16ToFloat(row.halfBits)), row.floatBits) << std::hex << "f16 0x" << row.halfBits;
  }
  EXPECT_TRUE(std::isnan(f16ToFloat(0x7e00)));
  EXPECT_TRUE(std::isnan(f16ToFloat(0x7c01)));
  EXPECT_TRUE(std::isnan(f16ToFloat(0xfe00)));
}

TEST(Conversion, Bf16ToFloatIsExact) {
  const WidenRow rows[] = {
      {0x0000, 0x00000000, "+0"},        {0x8000, 0x80000000, "-0"},   {0x3f80, 0x3f800000, "1"},
      {0x0001, 0x00010000, "subnormal"}, {0x7f80, 0x7f800000, "+inf"}, {0xff80, 0xff800000, "-inf"},
      {0x7fc0, 0x7fc00000, "NaN"},
  };
  for (const WidenRow& row : rows) {
    SCOPED_TRACE(row.what);
    EXPECT_EQ(toBits(bf16ToFloat(row.halfBits)), row.floatBits) << std::hex << "bf16 0x" << row.halfBits;
  }
}

TEST(Conversion, EveryF16RoundTripsThroughFloat) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = f16ToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      uint16_t back = floatToF16(f);
      EXPECT_EQ(back & 0x7c00, 0x7c00) << std::hex << h;
      EXPECT_NE(back & 0x03ff, 0) << std::hex << h;
      continue;
    }
    ASSERT_EQ(floatToF16(f), h) << std::hex << "f16 0x" << h;
  }
}

TEST(Conversion, EveryBf16RoundTripsThroughFloat) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = bf16ToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBf16(f)))) << std::hex << h;
      continue;
    }
    ASSERT_EQ(floatToBf16(f), h) << std::hex << "bf16 0x" << h;
  }
}

TEST(Conversion, LoadAndStoreAsFloat) {
  for (DataType dt : {DataType::kF32, DataType::kF16, DataType::kBF16}) {
    SCOPED_TRACE(dataTypeName(dt));
    std::vector<char> buf(8 * dataTypeSize(dt));
    for (int i = 0; i < 8; ++i) storeFromFloat(buf.data(), i, dt, static_cast<float>(i * 3 - 10));
    for (int i = 0; i < 8; ++i) EXPECT_EQ(loadAsFloat(buf.data(), i, dt), static_cast<float>(i * 3 - 10));
  }
}

// --- reductions ---

TEST(HostReduce, BitExactOnIntegerInputs) {
  const size_t counts[] = {1, 2, 3, 7, 255, 256, 257, 1000, 4099};
  for (DataType dt : {DataType::kF32, DataType::kF16, DataType::kBF16})
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin})
      for (int n = 1; n <= 8; ++n)
        for (size_t count : counts)
          for (bool inPlace : {false, true}) {
            SCOPED_TRACE(std::string(dataTypeName(dt)) + " " + reduceOpName(op) + " ranks " + std::to_string(n) +
                         " count " + std::to_string(count) + (inPlace ? " in place" : " out of place"));
            std::vector<std::vector<char>> in(n);
            std::vector<const void*> srcs(n);
            for (int r = 0; r < n; ++r) {
              in[r] = test::makeBuffer(count, dt);
              test::fillInput(in[r].data(), count, dt, r);
              srcs[r] = in[r].data();
            }
            std::vector<char> out = test::makeBuffer(count, dt);
            // In place: dst aliases rank 0's input (the first one read).
            void* dst = inPlace ? in[0].data() : out.data();
            hostReduce(dst, srcs.data(), n, count, dt, op);
            std::string first;
            size_t wrong = test::countWrong(
                dst, count, dt, [&](size_t i) { return test::expectedValue(n, i, op); }, &first);
            EXPECT_EQ(wrong, 0u) << first;
            // Inputs other than the aliased one are untouched.
            for (int r = inPlace ? 1 : 0; r < n; ++r)
              EXPECT_EQ(test::countWrong(
                            in[r].data(), count, dt, [&](size_t i) { return test::inputValue(r, i); }, nullptr),
                        0u)
                  << "input of rank " << r << " was modified";
          }
}

TEST(HostReduce, AliasingTheLastSourceWorks) {
  const int n = 4;
  const size_t count = 1030;
  std::vector<std::vector<char>> in(n);
  std::vector<const void*> srcs(n);
  for (int r = 0; r < n; ++r) {
    in[r] = test::makeBuffer(count, DataType::kF32);
    test::fillInput(in[r].data(), count, DataType::kF32, r);
    srcs[r] = in[r].data();
  }
  hostReduce(in[n - 1].data(), srcs.data(), n, count, DataType::kF32, ReduceOp::kSum);
  std::string first;
  EXPECT_EQ(test::countWrong(
                in[n - 1].data(), count, DataType::kF32,
                [&](size_t i) { return test::expectedValue(n, i, ReduceOp::kSum); }, &first),
            0u)
      << first;
}

TEST(HostReduce, ReduceToEveryDestinationStreamingOrNot) {
  // hostReduceTo stores one result into several destinations; streaming (non-temporal) stores
  // are used where a destination is 16-byte aligned and plain stores otherwise (offset 4), and
  // destination 0 aliases source 0 (the in-place case of the threads schedule).
  const int n = 3;
  const size_t count = 1000 + 3;  // a partial 64-byte tail
  for (DataType dt : {DataType::kF32, DataType::kF16, DataType::kBF16})
    for (uint64_t mask : {uint64_t{0}, ~uint64_t{0}, uint64_t{2}}) {
      SCOPED_TRACE(std::string(dataTypeName(dt)) + " streamMask " + std::to_string(mask));
      const size_t es = dt == DataType::kF32 ? 4 : 2;
      std::vector<std::vector<char>> in(n);
      std::vector<const void*> srcs(n);
      for (int r = 0; r < n; ++r) {
        in[r] = test::makeBuffer(count, dt);
        test::fillInput(in[r].data(), count, dt, r);
        srcs[r] = in[r].data();
      }
      std::vector<char> aligned = test::makeBuffer(count, dt), shifted(count * es + 64, 0x7f);
      void* dsts[3] = {in[0].data(), aligned.data(), shifted.data() + 4};
      hostReduceTo(dsts, 3, srcs.data(), n, count, dt, ReduceOp::kSum, mask);
      hostStreamFence();
      for (void* d : dsts) {
        std::string first;
        EXPECT_EQ(test::countWrong(
                      d, count, dt, [&](size_t i) { return test::expectedValue(n, i, ReduceOp::kSum); }, &first),
                  0u)
            << first;
      }
      EXPECT_EQ(static_cast<unsigned char>(shifted[3]), 0x7fu) << "wrote before the destination";
      EXPECT_EQ(static_cast<unsigned char>(shifted[4 + count * es]), 0x7fu) << "wrote past the destination";
    }
}

// Buffers need not be aligned to their element size (a user's f32 tensor may start at any byte):
// sources and destinations at odd byte offsets give the same bits as aligned ones. Before the
// fix the loads were float / uint16_t dereferences of misaligned addresses (UBSan:
// "load of misaligned address"; the sanitizer stage of scripts/test.sh runs this test).
TEST(HostReduce, MisalignedBuffersGiveTheAlignedResult) {
  const size_t count = 1000;
  for (DataType dt : {DataType::kF32, DataType::kF16, DataType::kBF16})
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax})
      for (size_t shift : {1, 2, 3}) {
        SCOPED_TRACE(std::string(dataTypeName(dt)) + " shift " + std::to_string(shift));
        const size_t es = dataTypeSize(dt), bytes = count * es;
        const int n = 3;
        std::vector<std::vector<char>> aligned(n), odd(n);
        std::vector<const void*> a(n), o(n);
        for (int r = 0; r < n; ++r) {
          aligned[r].resize(bytes);
          for (size_t i = 0; i < count; ++i) storeFromFloat(aligned[r].data(), i, dt, static_cast<float>((i * 7 + r) % 19) - 9);
          odd[r].assign(bytes + 8, 0);
          std::memcpy(odd[r].data() + shift + r, aligned[r].data(), bytes);
          a[r] = aligned[r].data();
          o[r] = odd[r].data() + shift + r;
        }
        std::vector<char> want(bytes), gotBuf(bytes + 8, 0);
        hostReduce(want.data(), a.data(), n, count, dt, op);
        hostReduce(gotBuf.data() + shift, o.data(), n, count, dt, op);
        EXPECT_EQ(std::memcmp(want.data(), gotBuf.data() + shift, bytes), 0);
        EXPECT_EQ(loadAsFloat(gotBuf.data() + shift, 5, dt), loadAsFloat(want.data(), 5, dt));
      }
}

TEST(HostReduce, CopyStreamingOrNot) {
  std::vector<char> src(4099), dst(4099 + 32);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<char>(i * 7 + 1);
  for (bool streaming : {false, true})
    for (size_t shift : {size_t{0}, size_t{16}, size_t{3}}) {
      std::fill(dst.begin(), dst.end(), 0);
      hostCopy(dst.data() + shift, src.data(), src.size(), streaming);
      hostStreamFence();
      EXPECT_EQ(std::memcmp(dst.data() + shift, src.data(), src.size()), 0) << "streaming " << streaming << " shift " << shift;
    }
}

TEST(HostReduce, SixteenBitSumsAccumulateInFp32) {
  // big + 1 + 1 where big + 1 is a tie that rounds back to big in 16 bits: accumulating in 16
  // bits would give big, accumulating in fp32 and rounding once gives big + 2 (representable).
  struct Row {
    DataType dt;
    float big;
  };
  for (const Row& row : {Row{DataType::kF16, 2048.0f}, Row{DataType::kBF16, 256.0f}}) {
    SCOPED_TRACE(dataTypeName(row.dt));
    const float vals[3] = {row.big, 1.0f, 1.0f};
    uint16_t in[3];
    const void* srcs[3];
    for (int r = 0; r < 3; ++r) {
      storeFromFloat(&in[r], 0, row.dt, vals[r]);
      srcs[r] = &in[r];
    }
    uint16_t out = 0;
    hostReduce(&out, srcs, 3, 1, row.dt, ReduceOp::kSum);
    EXPECT_EQ(loadAsFloat(&out, 0, row.dt), row.big + 2.0f);
  }
}

TEST(HostReduce, MaxMinWithSignedZeroAndInfinity) {
  const float a[3] = {-0.0f, -std::numeric_limits<float>::infinity(), 5.0f};
  const float b[3] = {0.0f, 3.0f, std::numeric_limits<float>::infinity()};
  const void* srcs[2] = {a, b};
  float mx[3], mn[3];
  hostReduce(mx, srcs, 2, 3, DataType::kF32, ReduceOp::kMax);
  hostReduce(mn, srcs, 2, 3, DataType::kF32, ReduceOp::kMin);
  EXPECT_EQ(mx[1], 3.0f);
  EXPECT_EQ(mn[1], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(mx[2], std::numeric_limits<float>::infinity());
  EXPECT_EQ(mn[2], 5.0f);
  EXPECT_EQ(mx[0], 0.0f);  // value-equal; the sign of zero is not specified
}


// ---- The branch-free conversions against the earlier branchy ones, kept here as the reference
// (they were checked against CUDA's __half2float / __float2half_rn / __bfloat162float /
// __float2bfloat16_rn semantics by the tables above): every 16-bit input, and 32-bit inputs
// around every rounding boundary of every exponent plus 10^7 random bit patterns.
namespace reference {

float bf16ToFloat(uint16_t h) { return fromBits(static_cast<uint32_t>(h) << 16); }

uint16_t floatToBf16(float f) {
  uint32_t u = toBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float f16ToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);
  } else if (exp == 0) {
    u = man == 0 ? sign : (toBits(std::ldexp(static_cast<float>(man), -24)) | sign);
  } else {
    u = sign | ((exp + 112) << 23) | (man << 13);
  }
  return fromBits(u);
}

uint16_t floatToF16(float f) {
  uint32_t u = toBits(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return sign | 0x7e00u;
  if (absu >= 0x477ff000u) return sign | 0x7c00u;
  if (absu < 0x38800000u) return sign | static_cast<uint16_t>(std::nearbyint(fromBits(absu) * 16777216.0f));
  uint32_t h = (((absu >> 23) - 112) << 10) | ((absu & 0x7fffffu) >> 13);
  uint32_t rest = absu & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return sign | static_cast<uint16_t>(h);
}

}  // namespace reference

TEST(ConversionMatchesReference, EverySixteenBitInputWidensToTheSameBits) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    uint16_t b = static_cast<uint16_t>(h);
    ASSERT_EQ(toBits(f16ToFloat(b)), toBits(reference::f16ToFloat(b))) << "f16 0x" << std::hex << h;
    ASSERT_EQ(toBits(bf16ToFloat(b)), toBits(reference::bf16ToFloat(b))) << "bf16 0x" << std::hex << h;
  }
}

void expectSameNarrowing(uint32_t u, size_t* checked) {
  float f = fromBits(u);
  ASSERT_EQ(floatToF16(f), reference::floatToF16(f)) << "f32 0x" << std::hex << u << " to f16";
  ASSERT_EQ(floatToBf16(f), reference::floatToBf16(f)) << "f32 0x" << std::hex << u << " to bf16";
  ++*checked;
}

// Every sign and exponent (0..255, so subnormals, inf and NaN too) with mantissas that put the
// dropped bits of f16 (13) and bf16 (16) at 0, 1, half - 1, half, half + 1 and all ones, each
// with the kept part even and odd, small and large; plus a few full-width mantissa patterns.
TEST(ConversionMatchesReference, NarrowingAroundEveryRoundingBoundary) {
  std::vector<uint32_t> mantissas = {0, 1, 2, 0x7fffff, 0x7ffffe, 0x400000, 0x3fffff, 0x555555, 0x2aaaaa};
  for (int dropped : {13, 16}) {
    uint32_t half = 1u << (dropped - 1), full = (1u << dropped) - 1;
    uint32_t keptMax = 0x7fffffu >> dropped;
    for (uint32_t kept : {0u, 1u, 2u, 3u, 0x55u, 0xaau, keptMax - 2, keptMax - 1, keptMax})
      for (uint32_t low : {0u, 1u, 2u, half - 2, half - 1, half, half + 1, half + 2, full - 1, full})
        mantissas.push_back((kept << dropped) | low);
  }
  // The f16 subnormal range: the rounding point moves with the exponent (bits 13..23 dropped).
  for (int dropped = 14; dropped <= 23; ++dropped)
    for (uint32_t low : {0u, 1u, (1u << (dropped - 1)) - 1, 1u << (dropped - 1), (1u << (dropped - 1)) + 1})
      for (uint32_t kept : {0u, 1u, 2u, 3u, (0x7fffffu >> dropped)})
        mantissas.push_back(((kept << dropped) | low) & 0x7fffffu);
  size_t checked = 0;
  for (uint32_t sign = 0; sign < 2; ++sign)
    for (uint32_t exp = 0; exp < 256; ++exp)
      for (uint32_t m : mantissas) {
        expectSameNarrowing((sign << 31) | (exp << 23) | m, &checked);
        if (HasFatalFailure()) return;
      }
  // Every f32 whose magnitude lies in the f16 rounding band's edges: all mantissas of the
  // exponents where f16 goes subnormal (2^-15..2^-14) and overflows (2^15).
  for (uint32_t exp : {112u, 113u, 142u})
    for (uint32_t m = 0; m <= 0x7fffff; ++m) {
      expectSameNarrowing((exp << 23) | m, &checked);
      if (HasFatalFailure()) return;
    }
  EXPECT_GT(checked, size_t{25000000});
}

TEST(ConversionMatchesReference, NarrowingTenMillionRandomFloats) {
  uint64_t state = 0x9e3779b97f4a7c15ull;
  size_t checked = 0;
  for (int i = 0; i < 10000000; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;  // PCG-style LCG, top bits
    expectSameNarrowing(static_cast<uint32_t>(state >> 32), &checked);
    if (HasFatalFailure()) return;
  }
}

// Not run by default (about 30 s): every one of the 2^32 f32 inputs. Run with
// --gtest_also_run_disabled_tests --gtest_filter='*EveryFloat*'.
TEST(ConversionMatchesReference, DISABLED_NarrowingEveryFloat) {
  size_t checked = 0;
  for (uint64_t u = 0; u <= 0xffffffffull; ++u) {
    float f = fromBits(static_cast<uint32_t>(u));
    if (floatToF16(f) != reference::floatToF16(f) || floatToBf16(f) != reference::floatToBf16(f))
      return expectSameNarrowing(static_cast<uint32_t>(u), &checked);
  }
}

// Whole reductions (sum, max, min; 1..5 ranks; block-straddling counts) on random bit patterns,
// NaN, inf and subnormals included, against the reference conversions in rank order. Bitwise,
// except where two NaNs meet: which one's sign and payload survive x + y or fmax(x, y) depends on
// the operand order the compiler picks (GCC treats both as commutative; the old scalar code and
// the new vectorized code pick differently), so there only NaN-ness is checked.
TEST(ConversionMatchesReference, SixteenBitReductionsMatchTheReference) {
  uint64_t state = 12345;
  auto next = [&state] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint16_t>(state >> 48);
  };
  const size_t count = 1000;  // not a multiple of the 256-element block
  for (DataType dt : {DataType::kF16, DataType::kBF16})
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin})
      for (int n = 1; n <= 5; ++n) {
        std::vector<std::vector<uint16_t>> in(n, std::vector<uint16_t>(count));
        std::vector<const void*> srcs(n);
        for (int r = 0; r < n; ++r) {
          for (auto& v : in[r]) v = next();
          srcs[r] = in[r].data();
        }
        std::vector<uint16_t> out(count, 0xdead);
        hostReduce(out.data(), srcs.data(), n, count, dt, op);
        auto widen = dt == DataType::kF16 ? reference::f16ToFloat : reference::bf16ToFloat;
        auto narrow = dt == DataType::kF16 ? reference::floatToF16 : reference::floatToBf16;
        for (size_t i = 0; i < count; ++i) {
          // The zero rule (host_reduce.cc): every operand + 0.0f (which also quiets a signalling NaN).
          float acc = widen(in[0][i]) + 0.0f;
          int nans = std::isnan(acc) ? 1 : 0;
          for (int r = 1; r < n; ++r) {
            float v = widen(in[r][i]) + 0.0f;
            nans += std::isnan(v) ? 1 : 0;
            acc = op == ReduceOp::kSum ? acc + v : op == ReduceOp::kMax ? std::fmax(acc, v) : std::fmin(acc, v);
          }
          if (nans >= 2 && std::isnan(acc)) {  // which NaN (sign, payload) wins is the compiler's operand order, then
            ASSERT_TRUE(std::isnan(widen(out[i])));  // and now; CUDA gives a canonical NaN anyway
            continue;
          }
          ASSERT_EQ(out[i], narrow(acc)) << "dtype " << static_cast<int>(dt) << " op " << static_cast<int>(op)
                                         << " n " << n << " element " << i;
        }
      }
}

// The zero rule: -0.0 inputs read as +0.0, so a zero result is +0.0 whatever the op, dtype and
// rank order (every GPU algorithm applies it too: tests/gpu/fault_gpu_test.cu, SignedZeros).
TEST(ZeroRule, NegativeZerosReduceToPositiveZero) {
  for (DataType dt : {DataType::kF32, DataType::kF16, DataType::kBF16})
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin})
      for (int n = 1; n <= 4; ++n) {
        const size_t count = 1 << n;  // element i: rank r holds -0.0 where bit r of i is set
        std::vector<std::vector<char>> in(n, std::vector<char>(count * dataTypeSize(dt)));
        std::vector<const void*> srcs;
        for (int r = 0; r < n; ++r) {
          for (size_t i = 0; i < count; ++i) storeFromFloat(in[r].data(), i, dt, ((i >> r) & 1) ? -0.0f : 0.0f);
          srcs.push_back(in[r].data());
        }
        std::vector<char> out(count * dataTypeSize(dt), 0x55);
        hostReduce(out.data(), srcs.data(), n, count, dt, op);
        for (size_t i = 0; i < count; ++i)
          for (size_t b = 0; b < dataTypeSize(dt); ++b)
            ASSERT_EQ(out[i * dataTypeSize(dt) + b], 0) << "dtype " << static_cast<int>(dt) << " op "
                                                        << static_cast<int>(op) << " n " << n << " element " << i;
      }
}

}  // namespace
}  // namespace tpcomm
