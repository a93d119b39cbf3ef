// quantize_host_bench: single-thread speed of the host quantizers (algos/compressed/quantize_host.h) against
// the scalar per-element path they replace (quantize.h's quantizeBlock / quantDecode through
// loadAsFloat / storeFromFloat), for fp8 and int8 over f32, f16 and bf16. Prints GB/s of message
// (count x element size / time, the median of --reps calls) for quantize (message -> codes +
// scales) and dequantize (codes + scales -> message). Inputs: normal(0,1) with an outlier x100
// every 97 elements, as allreduce_perf --compression uses.
//
// Usage: quantize_host_bench [--count N] [--reps N]    (default 4M elements, 7 reps)
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "algos/host/host_reduce.h"
#include "algos/compressed/quantize.h"
#include "algos/compressed/quantize_host.h"
#include "unit/count_reps_args.h"
#include "unit/compressed_check.h"

namespace {

using namespace tpcomm;
constexpr int kB = kQuantBlockElems;

using test::scalarDequantize;
using test::scalarQuantize;

template <typename Fn>
double medianGBps(size_t bytes, int reps, Fn fn) {
  fn();  // warm-up (page faults)
  std::vector<double> gbps;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const auto t1 = std::chrono::steady_clock::now();
    gbps.push_back(static_cast<double>(bytes) / std::chrono::duration<double, std::nano>(t1 - t0).count());
  }
  std::sort(gbps.begin(), gbps.end());
  return gbps[gbps.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  size_t count = size_t{4} << 20;
  int reps = 7;
  if (!test::parseCountReps(argc, argv, &count, &reps)) return 2;
  std::printf("# quantize_host_bench: %zu elements, median of %d, one thread; GB/s of message (dtype bytes)\n", count,
              reps);
  std::printf("# %-5s %-5s %12s %12s %12s %12s\n", "fmt", "dtype", "quant_fast", "quant_scalar", "dequant_fast",
              "dequant_scalar");
  const size_t blocks = (count + kB - 1) / kB;
  std::vector<uint8_t> codes(count), codes2(count);
  std::vector<float> scales(blocks), scales2(blocks);
  for (QuantFormat f : {QuantFormat::kFp8E4m3, QuantFormat::kInt8})
    for (DataType dt : {DataType::kF32, DataType::kF16, DataType::kBF16}) {
      const size_t bytes = count * dataTypeSize(dt);
      std::vector<char> x(bytes), out(bytes);
      std::mt19937 rng(1);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (size_t i = 0; i < count; ++i) storeFromFloat(x.data(), i, dt, normal(rng) * (i % 97 == 0 ? 100.0f : 1.0f));
      const double qf =
          medianGBps(bytes, reps, [&] { hostQuantize(f, x.data(), dt, count, codes.data(), scales.data()); });
      const double qs =
          medianGBps(bytes, reps, [&] { scalarQuantize(f, x.data(), dt, count, codes2.data(), scales2.data()); });
      const double df =
          medianGBps(bytes, reps, [&] { hostDequantize(f, codes.data(), scales.data(), count, out.data(), dt); });
      const double ds =
          medianGBps(bytes, reps, [&] { scalarDequantize(f, codes.data(), scales.data(), count, out.data(), dt); });
      const bool same = codes == codes2 && std::memcmp(scales.data(), scales2.data(), blocks * 4) == 0;
      std::printf("  %-5s %-5s %12.2f %12.2f %12.2f %12.2f%s\n", f == QuantFormat::kFp8E4m3 ? "fp8" : "int8",
                  dt == DataType::kF32   ? "f32"
                  : dt == DataType::kF16 ? "f16"
                                         : "bf16",
                  qf, qs, df, ds, same ? "" : "  MISMATCH fast vs scalar codes");
      if (!same) return 1;
    }
  return 0;
}
