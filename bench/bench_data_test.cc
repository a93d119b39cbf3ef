// bench_data_test: proves allreduce_perf's check can fail. The exact answer built from
// fillInput() passes; one changed element, a poisoned output and an answer for the wrong rank
// count are each caught; the half/bfloat16 encoders give the IEEE bit patterns. Exit 0 on pass.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "bench_data.h"

using tpcomm::DataType;
using tpcomm::ReduceOp;
using namespace tpcomm_bench;

static int failures = 0;
#define EXPECT(cond)                                                 \
  do {                                                               \
    if (!(cond)) {                                                   \
      std::fprintf(stderr, "%s:%d: FAILED: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                    \
    }                                                                \
  } while (0)

// Reduces every rank's fillInput() output in float, as a correct all-reduce would.
static std::vector<float> reference(size_t count, ReduceOp op, int n) {
  std::vector<float> acc(count), x(count);
  for (int r = 0; r < n; ++r) {
    fillInput(x.data(), count, DataType::kF32, r, n);
    for (size_t i = 0; i < count; ++i) {
      if (r == 0) acc[i] = x[i];
      else if (op == ReduceOp::kSum) acc[i] += x[i];
      else if (op == ReduceOp::kMax) acc[i] = acc[i] > x[i] ? acc[i] : x[i];
      else acc[i] = acc[i] < x[i] ? acc[i] : x[i];
    }
  }
  return acc;
}

static std::vector<char> encode(const std::vector<float>& v, DataType t) {
  std::vector<char> out(v.size() * tpcomm::dataTypeSize(t));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == DataType::kF32) {
      std::memcpy(&out[i * 4], &v[i], 4);
    } else {
      uint16_t b = t == DataType::kF16 ? floatToHalfBits(v[i]) : floatToBf16Bits(v[i]);
      std::memcpy(&out[i * 2], &b, 2);
    }
  }
  return out;
}

int main() {
  EXPECT(floatToHalfBits(1.0f) == 0x3c00);
  EXPECT(floatToHalfBits(-2.0f) == 0xc000);
  EXPECT(floatToHalfBits(0.0f) == 0x0000);
  EXPECT(floatToHalfBits(65504.0f) == 0x7bff);
  EXPECT(floatToHalfBits(1e6f) == 0x7c00);
  EXPECT(floatToHalfBits(5.960464477539063e-08f) == 0x0001);  // smallest subnormal
  EXPECT(floatToBf16Bits(1.0f) == 0x3f80);
  EXPECT(floatToBf16Bits(-3.0f) == 0xc040);
  EXPECT(floatToBf16Bits(257.0f) == 0x4380);  // 257 rounds to even (256) in bfloat16

  const size_t count = 1037;  // odd, not a multiple of any vector width
  for (DataType t : {DataType::kF32, DataType::kF16, DataType::kBF16}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
      for (int n : {1, 2, 3, 8, 64}) {
        std::vector<char> good = encode(reference(count, op, n), t);
        EXPECT(countWrong(good.data(), count, t, op, n) == 0);
        std::vector<char> bad = good;
        bad[5 * tpcomm::dataTypeSize(t)] ^= 0x01;  // one bit of element 5
        EXPECT(countWrong(bad.data(), count, t, op, n) == 1);
        std::vector<char> poisoned(good.size(), static_cast<char>(kPoisonByte));
        EXPECT(countWrong(poisoned.data(), count, t, op, n) == static_cast<int64_t>(count));
      }
      // The answer for 2 ranks is not the answer for 3.
      std::vector<char> two = encode(reference(count, op, 2), t);
      EXPECT(countWrong(two.data(), count, t, op, 3) > 0);
    }
  }
  // Ranks get different inputs (a rank-independent fill would hide swapped buffers).
  std::vector<float> a(count), b(count);
  fillInput(a.data(), count, DataType::kF32, 0, 4);
  fillInput(b.data(), count, DataType::kF32, 1, 4);
  EXPECT(std::memcmp(a.data(), b.data(), count * 4) != 0);

  // Large counts split over threads (fillInput and countWrong): the same answer as one pass.
  // Wrong elements every 100003 (and the last) land in every part of any split up to 16
  // threads (parts of >= 327K elements), and each is counted once.
  {
    const size_t big = (size_t{5} << 20) + 3;
    std::vector<char> good = encode(reference(big, ReduceOp::kSum, 2), DataType::kBF16);
    EXPECT(countWrong(good.data(), big, DataType::kBF16, ReduceOp::kSum, 2) == 0);
    std::vector<char> bad = good;
    int64_t flipped = 0;
    for (size_t i = 0; i < big; i += 100003, ++flipped) bad[i * 2] ^= 0x01;
    bad[(big - 1) * 2] ^= 0x01;
    ++flipped;
    EXPECT(countWrong(bad.data(), big, DataType::kBF16, ReduceOp::kSum, 2) == flipped);
    std::vector<float> whole(big), firstPart(1037);
    fillInput(whole.data(), big, DataType::kF32, 1, 2);
    fillInput(firstPart.data(), 1037, DataType::kF32, 1, 2);
    EXPECT(std::memcmp(whole.data(), firstPart.data(), 1037 * 4) == 0);
    bool allInRange = true, sawBothEnds[2] = {false, false};
    for (float v : whole) {
      allInRange = allInRange && v >= -5 && v <= 5;
      sawBothEnds[0] = sawBothEnds[0] || v == -5;
      sawBothEnds[1] = sawBothEnds[1] || v == 5;
    }
    EXPECT(allInRange && sawBothEnds[0] && sawBothEnds[1]);  // the whole range [-a, a], a = 5 for 2 ranks
  }

  // Reduce-scatter: shard r of the exact all-reduce passes with first = r * count and fails at
  // another offset; one changed element is counted.
  {
    const int n = 3;
    const size_t per = 517;
    std::vector<float> full = reference(per * n, ReduceOp::kSum, n);
    for (int r = 0; r < n; ++r) {
      std::vector<float> shard(full.begin() + r * per, full.begin() + (r + 1) * per);
      std::vector<char> enc = encode(shard, DataType::kBF16);
      EXPECT(countWrong(enc.data(), per, DataType::kBF16, ReduceOp::kSum, n, r * per) == 0);
      EXPECT(countWrong(enc.data(), per, DataType::kBF16, ReduceOp::kSum, n, ((r + 1) % n) * per) > 0);
      shard[per / 2] += 1;
      enc = encode(shard, DataType::kBF16);
      EXPECT(countWrong(enc.data(), per, DataType::kBF16, ReduceOp::kSum, n, r * per) == 1);
    }
    // fillInput's offset gives the same values as the whole fill.
    std::vector<float> whole(per * n), tail(per);
    fillInput(whole.data(), per * n, DataType::kF32, 2, n);
    fillInput(tail.data(), per, DataType::kF32, 2, n, per * 2);
    EXPECT(std::memcmp(whole.data() + per * 2, tail.data(), per * 4) == 0);
  }
  // All-gather: block q = rank q's inputs passes; swapped blocks, a poisoned block and one changed
  // element fail.
  {
    const int n = 4;
    const size_t per = 301;
    std::vector<float> gathered(per * n);
    for (int q = 0; q < n; ++q) fillInput(gathered.data() + q * per, per, DataType::kF32, q, n);
    for (DataType t : {DataType::kF32, DataType::kF16, DataType::kBF16}) {
      std::vector<char> enc = encode(gathered, t);
      EXPECT(countWrongGathered(enc.data(), per, t, n) == 0);
    }
    std::vector<float> swapped = gathered;
    std::memcpy(swapped.data(), gathered.data() + per, per * 4);
    std::memcpy(swapped.data() + per, gathered.data(), per * 4);
    EXPECT(countWrongGathered(swapped.data(), per, DataType::kF32, n) > 0);
    std::vector<float> poisoned = gathered;
    std::memset(poisoned.data() + 3 * per, kPoisonByte, per * 4);
    EXPECT(countWrongGathered(poisoned.data(), per, DataType::kF32, n) == static_cast<int64_t>(per));
    std::vector<float> one = gathered;
    one[2 * per + 7] += 1;
    EXPECT(countWrongGathered(one.data(), per, DataType::kF32, n) == 1);
  }

  if (failures) std::fprintf(stderr, "bench_data_test: %d failures\n", failures);
  else std::printf("bench_data_test: all checks passed\n");
  return failures ? 1 : 0;
}
