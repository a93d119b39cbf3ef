// host_reduce_bench: ns per element of tpcomm's host reduction (algos/host/host_reduce.h) for f32,
// f16 and bf16, single thread, out of place: dst = op over n sources (default 4 ranks, 16M
// elements, sum). It measures the conversion + fp32 accumulate + rounding cost that host ranks
// (staged_host) pay per element; memory traffic is (n + 1) x count x element size per call.
// Inputs are finite random values of moderate magnitude (no NaN/inf) with a few subnormal
// f16 values, so the conversions see realistic data. Prints the median of --reps timed calls.
//
// Usage: host_reduce_bench [--count N] [--ranks N] [--reps N] [--op sum|max|min] [--dtype f32|f16|bf16]...
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "algos/host/host_reduce.h"
#include "tpcomm/types.h"

namespace {

using tpcomm::DataType;
using tpcomm::ReduceOp;


void fill(void* buf, size_t count, DataType t, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-8.0f, 8.0f);
  for (size_t i = 0; i < count; ++i) {
    float v = dist(rng);
    if (t == DataType::kF16 && (i % 97) == 0) v = 3.0e-6f;  // an f16 subnormal now and then
    tpcomm::storeFromFloat(buf, i, t, v);
  }
}

double medianNsPerElement(DataType t, ReduceOp op, int ranks, size_t count, int reps) {
  size_t bytes = count * tpcomm::dataTypeSize(t);
  std::vector<std::vector<char>> srcStore(ranks);
  std::vector<const void*> srcs(ranks);
  for (int r = 0; r < ranks; ++r) {
    srcStore[r].resize(bytes);
    fill(srcStore[r].data(), count, t, 1234u + r);
    srcs[r] = srcStore[r].data();
  }
  std::vector<char> dst(bytes, 0);                                   // touched once so page faults are not timed
  tpcomm::hostReduce(dst.data(), srcs.data(), ranks, count, t, op);  // warm-up
  std::vector<double> ns;
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    tpcomm::hostReduce(dst.data(), srcs.data(), ranks, count, t, op);
    auto t1 = std::chrono::steady_clock::now();
    ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(count));
  }
  std::sort(ns.begin(), ns.end());
  return ns[ns.size() / 2];
}

bool parseDtype(const std::string& s, DataType* t) {
  if (s == "f32")
    *t = DataType::kF32;
  else if (s == "f16")
    *t = DataType::kF16;
  else if (s == "bf16")
    *t = DataType::kBF16;
  else
    return false;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  size_t count = size_t{16} << 20;
  int ranks = 4, reps = 7;
  ReduceOp op = ReduceOp::kSum;
  std::string opName = "sum";
  std::vector<DataType> dtypes;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--count" && v)
      count = std::strtoull(v, nullptr, 10), ++i;
    else if (a == "--ranks" && v)
      ranks = std::atoi(v), ++i;
    else if (a == "--reps" && v)
      reps = std::atoi(v), ++i;
    else if (a == "--op" && v) {
      opName = v, ++i;
      if (opName == "sum")
        op = ReduceOp::kSum;
      else if (opName == "max")
        op = ReduceOp::kMax;
      else if (opName == "min")
        op = ReduceOp::kMin;
      else
        return std::fprintf(stderr, "host_reduce_bench: bad --op '%s' (sum|max|min)\n", v), 2;
    } else if (a == "--dtype" && v) {
      DataType t;
      if (!parseDtype(v, &t)) return std::fprintf(stderr, "host_reduce_bench: bad --dtype '%s' (f32|f16|bf16)\n", v), 2;
      dtypes.push_back(t), ++i;
    } else {
      std::fprintf(stderr,
                   "usage: host_reduce_bench [--count N] [--ranks N] [--reps N] [--op sum|max|min] "
                   "[--dtype f32|f16|bf16]...\n");
      return 2;
    }
  }
  if (count == 0 || ranks < 1 || reps < 1)
    return std::fprintf(stderr, "host_reduce_bench: count, ranks, reps must be >= 1\n"), 2;
  if (dtypes.empty()) dtypes = {DataType::kF32, DataType::kF16, DataType::kBF16};
  std::printf("# host_reduce_bench: ranks %d, count %zu, op %s, median of %d\n", ranks, count, opName.c_str(), reps);
  std::printf("%-6s %12s %12s\n", "dtype", "ns/element", "GB/s(in+out)");
  for (DataType t : dtypes) {
    double ns = medianNsPerElement(t, op, ranks, count, reps);
    double gbs = static_cast<double>((ranks + 1) * tpcomm::dataTypeSize(t)) / ns;
    std::printf("%-6s %12.3f %12.2f\n", tpcomm::dataTypeName(t), ns, gbs);
  }
  return 0;
}
