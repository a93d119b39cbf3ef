// Reduce-scatter and all-gather over CUDA P2P (ll_p2p and twoshot_p2p, each forced) against
// NCCL's own ncclReduceScatter / ncclAllGather on the same GPUs and inputs, bitwise (issue 20).
// The inputs are small integers (intInput), so every partial sum is exact in any order and NCCL's
// order and tpcomm's give the same bits; counts from 1 element to 1M per rank (several twoshot
// chunks, odd counts that leave pieces unaligned), bf16, f16 and f32. NCCL is driven through
// its own API (ncclCommInitAll), not through tpcomm. NCCL needs one GPU per rank, so on a machine
// with one GPU (two ranks sharing it) these tests skip and say so. Multicast stays off
// (NCCL_NVLS_ENABLE=0 is forced before NCCL initialises).
#include <gtest/gtest.h>
#include <nccl.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "gpu_allreduce_util.h"

namespace tpcomm_test {
namespace {

using tpcomm::Communicator;
using tpcomm::Config;
using tpcomm::Status;

constexpr size_t kLlMaxBytes = 524288;  // TPCOMM_LL_MAX_BYTES's default

// NCCL communicators over every GPU, made once; empty when there are fewer than 2 GPUs or NCCL
// fails (the reason in *why).
struct NcclGroup {
  std::vector<int> devices;
  std::vector<ncclComm_t> comms;
  std::vector<cudaStream_t> streams;
  ~NcclGroup() {
    for (size_t r = 0; r < comms.size(); ++r) {
      cudaSetDevice(devices[r]);
      ncclCommDestroy(comms[r]);
      cudaStreamDestroy(streams[r]);
    }
  }
};

NcclGroup* ncclGroup(std::string* why) {
  static std::unique_ptr<NcclGroup> g;
  static std::string reason;
  if (!g && reason.empty()) {
    const int n = gpuCount();
    if (n < 2) {
      reason = "NCCL needs one GPU per rank; this machine has " + std::to_string(n);
    } else {
      setenv("NCCL_NVLS_ENABLE", "0", 1);  // multicast off, whatever the caller's environment says
      auto made = std::make_unique<NcclGroup>();
      for (int d = 0; d < n; ++d) made->devices.push_back(d);
      made->comms.resize(n);
      const ncclResult_t e = ncclCommInitAll(made->comms.data(), n, made->devices.data());
      if (e != ncclSuccess) {
        made->comms.clear();
        reason = std::string("ncclCommInitAll: ") + ncclGetErrorString(e);
      } else {
        for (int d : made->devices) {
          cudaStream_t s = nullptr;
          cudaSetDevice(d);
          cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
          made->streams.push_back(s);
        }
        g = std::move(made);
      }
    }
  }
  *why = reason;
  return g.get();
}

RankGroup* p2pGroup(const std::string& algo) {
  static std::map<std::string, std::unique_ptr<RankGroup>> groups;
  auto& g = groups[algo];
  if (!g) {
    Config cfg;
    cfg.algo = algo;
    cfg.useNccl = false;
    g = makeRankGroup(cfg, (algo + " vs NCCL").c_str());
  }
  return g.get();
}

ncclDataType_t ncclType(DataType d) {
  return d == DataType::kBF16 ? ncclBfloat16 : d == DataType::kF16 ? ncclFloat16 : ncclFloat32;
}

struct Buffers {
  std::vector<int> devices;
  std::vector<void*> ptrs;
  void* add(int device, size_t bytes) {
    void* p = nullptr;
    cudaSetDevice(device);
    if (cudaMalloc(&p, bytes) != cudaSuccess) return nullptr;
    devices.push_back(device);
    ptrs.push_back(p);
    return p;
  }
  ~Buffers() {
    for (size_t i = 0; i < ptrs.size(); ++i) {
      cudaSetDevice(devices[i]);
      cudaFree(ptrs[i]);
    }
  }
};

enum class Kind { kReduceScatter, kAllGather };

using Param = std::tuple<std::string, Kind, DataType, size_t>;  // algorithm, collective, dtype, count per rank

class HalvesVsNccl : public testing::TestWithParam<Param> {};

TEST_P(HalvesVsNccl, BitwiseEqual) {
  std::string why;
  NcclGroup* nccl = ncclGroup(&why);
  if (!nccl) GTEST_SKIP() << why;
  const auto& [algo, kind, dtype, count] = GetParam();
  RankGroup* g = p2pGroup(algo);
  ASSERT_NE(g, nullptr);
  const int n = g->n();
  ASSERT_EQ(n, static_cast<int>(nccl->devices.size()));
  const size_t es = tpcomm::dataTypeSize(dtype);
  const bool rs = kind == Kind::kReduceScatter;
  const size_t sendCount = rs ? count * n : count, recvCount = rs ? count : count * n;
  Buffers buf;
  std::vector<void*> send(n), ours(n), theirs(n);
  for (int r = 0; r < n; ++r) {
    send[r] = buf.add(g->devices[r], sendCount * es);
    ours[r] = buf.add(g->devices[r], recvCount * es);
    theirs[r] = buf.add(g->devices[r], recvCount * es);
    ASSERT_TRUE(send[r] && ours[r] && theirs[r]) << "cudaMalloc on device " << g->devices[r];
    const auto in = makeHost(dtype, sendCount, [&](size_t i) { return intInput(r, i, count); });
    CUDA_OK(cudaMemcpy(send[r], in.data(), in.size(), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(ours[r], 0xff, recvCount * es));  // NaN patterns: an element not written shows
    CUDA_OK(cudaMemset(theirs[r], 0xff, recvCount * es));
  }
  ASSERT_EQ(Communicator::groupStart(), Status::kOk);
  for (int r = 0; r < n; ++r) {
    const Status s = rs ? g->comms[r]->reduceScatter(send[r], ours[r], count, dtype, ReduceOp::kSum, g->streams[r])
                        : g->comms[r]->allGather(send[r], ours[r], count, dtype, g->streams[r]);
    ASSERT_EQ(s, Status::kOk) << tpcomm::lastErrorMessage();
  }
  ASSERT_EQ(Communicator::groupEnd(), Status::kOk);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; ++r) {
    CUDA_OK(cudaSetDevice(nccl->devices[r]));
    const ncclResult_t e = rs ? ncclReduceScatter(send[r], theirs[r], count, ncclType(dtype), ncclSum, nccl->comms[r],
                                                  nccl->streams[r])
                              : ncclAllGather(send[r], theirs[r], count, ncclType(dtype), nccl->comms[r], nccl->streams[r]);
    ASSERT_EQ(e, ncclSuccess) << ncclGetErrorString(e);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  const std::string expected = algo == "ll_p2p" && count * es * n > kLlMaxBytes ? "twoshot_p2p" : algo;
  for (int r = 0; r < n; ++r) {
    CUDA_OK(cudaSetDevice(g->devices[r]));
    CUDA_OK(cudaStreamSynchronize(g->streams[r]));
    CUDA_OK(cudaStreamSynchronize(nccl->streams[r]));
    ASSERT_EQ(g->comms[r]->checkError(), Status::kOk) << tpcomm::lastErrorMessage();
    EXPECT_EQ(g->comms[r]->lastAlgorithm(), expected) << "rank " << r;
    std::vector<uint8_t> a(recvCount * es), b(recvCount * es);
    CUDA_OK(cudaMemcpy(a.data(), ours[r], a.size(), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(b.data(), theirs[r], b.size(), cudaMemcpyDeviceToHost));
    EXPECT_EQ(firstMismatch(a, b, es), -1) << "rank " << r << ": first element where tpcomm and NCCL differ";
  }
}

INSTANTIATE_TEST_SUITE_P(
    All, HalvesVsNccl,
    testing::Combine(testing::Values(std::string("ll_p2p"), std::string("twoshot_p2p")),
                     testing::Values(Kind::kReduceScatter, Kind::kAllGather),
                     testing::Values(DataType::kBF16, DataType::kF16, DataType::kF32),
                     testing::Values(size_t{1}, size_t{7}, size_t{4099}, size_t{65541}, size_t{1} << 20)),
    [](const testing::TestParamInfo<Param>& i) {
      return std::get<0>(i.param) + (std::get<1>(i.param) == Kind::kReduceScatter ? "_rs_" : "_ag_") +
             name(std::get<2>(i.param)) + "_" + std::to_string(std::get<3>(i.param));
    });

}  // namespace
}  // namespace tpcomm_test
