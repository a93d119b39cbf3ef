// bench_data: verifiable integer-valued inputs and the bitwise result check (see bench_data.h).
#include "bench_data.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <system_error>
#include <thread>
#include <vector>

namespace tpcomm_bench {
namespace {

// Amplitude of the inputs: |sum over ranks| <= nRanks * a <= 256 keeps every partial sum exact
// in bfloat16 (8 significant bits); at least 1 so max/min still see distinct values.
int amplitude(int nRanks) { return std::max(1, std::min(5, 256 / std::max(1, nRanks))); }

uint64_t mix(uint64_t x) {  // splitmix64 finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

inline int valueWithAmp(size_t i, int rank, int amp) {
  uint64_t h = mix(static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(rank + 1) * 0xd1b54a32d192ed03ull);
  // Multiply-shift onto [0, 2a]: a 64-bit division per element made a 1 GB fill + check cost
  // ~30 s per algorithm.
  return static_cast<int>(((h >> 32) * static_cast<uint64_t>(2 * amp + 1)) >> 32) - amp;
}

constexpr size_t kMaxThreads = 16;

// Runs f(part, begin, end) over [0, count) in up to kMaxThreads parts on their own threads (1 GB
// of bf16 is 512M elements to fill and check per algorithm); small counts stay on this thread.
template <typename F>
void forParts(size_t count, F f) {
  const size_t kMinPerThread = size_t{1} << 20;
  size_t threads = std::min<size_t>({kMaxThreads, std::max(1u, std::thread::hardware_concurrency()), count / kMinPerThread});
  if (threads <= 1) return f(size_t{0}, size_t{0}, count);
  std::vector<std::thread> pool;
  const size_t per = (count + threads - 1) / threads;
  for (size_t t = 0; t < threads; ++t) {
    size_t b = t * per, e = std::min(count, b + per);
    if (b >= e) continue;
    try {
      pool.emplace_back(f, t, b, e);
    } catch (const std::system_error&) {  // no thread to be had (a container's limit): do it here
      f(t, b, e);
    }
  }
  for (auto& th : pool) th.join();
}

inline uint32_t floatBits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof(u));
  return u;
}

}  // namespace

uint16_t floatToBf16Bits(float v) {
  uint32_t u = floatBits(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);                     // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

uint16_t floatToHalfBits(float v) {
  uint32_t u = floatBits(v);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return sign | 0x7e00;            // NaN
  if (absu >= 0x477ff000u) return sign | 0x7c00;           // rounds to >= 65520: inf
  if (absu < 0x38800000u) {                                // below 2^-14: subnormal or zero
    if (absu < 0x33000000u) return sign;                   // below half of the smallest subnormal
    // value = mant24 * 2^(e - 150) = q * 2^-24  =>  q = mant24 >> (126 - e), rounded.
    uint32_t mant = (absu & 0x7fffffu) | 0x800000u;
    int shift = 126 - static_cast<int>(absu >> 23);  // 14 .. 24
    uint32_t rest = mant & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1);
    uint32_t q = mant >> shift;
    if (rest > half || (rest == half && (q & 1u))) ++q;
    return sign | static_cast<uint16_t>(q);
  }
  uint32_t exp = (absu >> 23) - 112;  // rebias 127 -> 15
  uint32_t mant = absu & 0x7fffffu;
  uint32_t q = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (q & 1u))) ++q;  // carry into the exponent is right
  return sign | static_cast<uint16_t>(q);
}

int inputValue(size_t i, int rank, int nRanks) { return valueWithAmp(i, rank, amplitude(nRanks)); }

void fillInput(void* dst, size_t count, tpcomm::DataType dtype, int rank, int nRanks, size_t first) {
  const int amp = amplitude(nRanks);
  forParts(count, [=](size_t, size_t b, size_t e) {
    switch (dtype) {
      case tpcomm::DataType::kF32: {
        float* p = static_cast<float*>(dst);
        for (size_t i = b; i < e; ++i) p[i] = static_cast<float>(valueWithAmp(first + i, rank, amp));
        break;
      }
      case tpcomm::DataType::kF16: {
        uint16_t* p = static_cast<uint16_t*>(dst);
        for (size_t i = b; i < e; ++i) p[i] = floatToHalfBits(static_cast<float>(valueWithAmp(first + i, rank, amp)));
        break;
      }
      case tpcomm::DataType::kBF16: {
        uint16_t* p = static_cast<uint16_t*>(dst);
        for (size_t i = b; i < e; ++i) p[i] = floatToBf16Bits(static_cast<float>(valueWithAmp(first + i, rank, amp)));
        break;
      }
    }
  });
}

namespace {

// Small integers: every value is one of a few hundred, so their bit patterns are tabulated.
std::vector<uint32_t> bitsTable(tpcomm::DataType dtype, int lo, int hi) {
  std::vector<uint32_t> bits(static_cast<size_t>(hi - lo + 1));
  for (int v = lo; v <= hi; ++v) {
    float f = static_cast<float>(v);
    bits[static_cast<size_t>(v - lo)] = dtype == tpcomm::DataType::kF32   ? floatBits(f)
                                        : dtype == tpcomm::DataType::kF16 ? floatToHalfBits(f)
                                                                          : floatToBf16Bits(f);
  }
  return bits;
}

uint32_t bitsAt(const void* got, size_t i, tpcomm::DataType dtype) {
  if (dtype == tpcomm::DataType::kF32) {
    uint32_t have;
    std::memcpy(&have, static_cast<const char*>(got) + i * 4, 4);
    return have;
  }
  uint16_t h;
  std::memcpy(&h, static_cast<const char*>(got) + i * 2, 2);
  return h;
}

}  // namespace

int64_t countWrongGathered(const void* got, size_t count, tpcomm::DataType dtype, int nRanks) {
  const int amp = amplitude(nRanks);
  const std::vector<uint32_t> bits = bitsTable(dtype, -amp, amp);
  std::vector<int64_t> wrongPer(kMaxThreads, 0);
  forParts(count * static_cast<size_t>(nRanks), [&](size_t part, size_t b, size_t e) {
    int64_t wrong = 0;
    for (size_t k = b; k < e; ++k) {
      const int q = static_cast<int>(k / count);
      wrong += bitsAt(got, k, dtype) != bits[static_cast<size_t>(valueWithAmp(k % count, q, amp) + amp)];
    }
    wrongPer[part] = wrong;
  });
  int64_t wrong = 0;
  for (int64_t w : wrongPer) wrong += w;
  return wrong;
}

int64_t countWrong(const void* got, size_t count, tpcomm::DataType dtype, tpcomm::ReduceOp op, int nRanks,
                   size_t first) {
  const int amp = amplitude(nRanks);
  const int lo = -amp * nRanks, hi = amp * nRanks;
  const std::vector<uint32_t> bits = bitsTable(dtype, lo, hi);
  std::vector<int64_t> wrongPer(kMaxThreads, 0);
  forParts(count, [&](size_t part, size_t b, size_t e) {
    int64_t wrong = 0;
    for (size_t i = b; i < e; ++i) {
      int acc = valueWithAmp(first + i, 0, amp);
      for (int r = 1; r < nRanks; ++r) {
        int x = valueWithAmp(first + i, r, amp);
        if (op == tpcomm::ReduceOp::kSum) acc += x;
        else if (op == tpcomm::ReduceOp::kMax) acc = std::max(acc, x);
        else acc = std::min(acc, x);
      }
      wrong += bitsAt(got, i, dtype) != bits[static_cast<size_t>(acc - lo)];
    }
    wrongPer[part] = wrong;
  });
  int64_t wrong = 0;
  for (int64_t w : wrongPer) wrong += w;
  return wrong;
}

}  // namespace tpcomm_bench
