#include "bench_error.h"

#include "bench_data.h"

#include <cmath>
#include <cstdint>
#include <cstring>

namespace tpcomm_bench {

namespace {

uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

void store(void* dst, size_t i, tpcomm::DataType dt, float v) {
  if (dt == tpcomm::DataType::kF32)
    static_cast<float*>(dst)[i] = v;
  else
    static_cast<uint16_t*>(dst)[i] = dt == tpcomm::DataType::kBF16 ? floatToBf16Bits(v) : floatToHalfBits(v);
}

double load(const void* src, size_t i, tpcomm::DataType dt) {
  if (dt == tpcomm::DataType::kF32) return static_cast<const float*>(src)[i];
  const uint16_t h = static_cast<const uint16_t*>(src)[i];
  if (dt == tpcomm::DataType::kBF16) {
    const uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  const int e = (h >> 10) & 31, m = h & 1023;
  const double mag = e == 31 ? (m ? NAN : INFINITY) : e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return (h & 0x8000u) ? -mag : mag;
}

}  // namespace

float errorInput(size_t i, int rank) {
  const uint64_t h = mix(i * 0x100000001b3ull + static_cast<uint64_t>(rank) * 0x9e3779b97f4a7c15ull + 12345);
  const double u1 = (static_cast<double>(h >> 11) + 0.5) / 9007199254740992.0;
  const double u2 = static_cast<double>(mix(h) >> 11) / 9007199254740992.0;
  const double normal = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);  // Box-Muller
  return static_cast<float>(i % 97 == 5 ? 100.0 * normal : normal);
}

void fillErrorInput(void* dst, size_t count, tpcomm::DataType dtype, int rank) {
  for (size_t i = 0; i < count; ++i) store(dst, i, dtype, errorInput(i, rank));
}

void compressionError(const void* got, size_t count, tpcomm::DataType dtype, int nRanks, double* maxAbs,
                      double* rmsRel) {
  double worst = 0, errSq = 0, refSq = 0;
  char one[4];
  for (size_t i = 0; i < count; ++i) {
    double exact = 0;  // of the inputs as stored
    for (int r = 0; r < nRanks; ++r) {
      store(one, 0, dtype, errorInput(i, r));
      exact += load(one, 0, dtype);
    }
    const double d = load(got, i, dtype) - exact;
    worst = std::isnan(d) || std::fabs(d) > worst ? std::fabs(d) : worst;
    errSq += d * d;
    refSq += exact * exact;
  }
  *maxAbs = worst;
  *rmsRel = refSq > 0 ? std::sqrt(errSq / refSq) : std::sqrt(errSq);
}

}  // namespace tpcomm_bench
