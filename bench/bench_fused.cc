// bench_fused: allreduce_perf --fused-rmsnorm. Times the epilogue of a tensor-parallel decoder
// layer (all-reduce, residual add, RMSNorm) three ways, side by side in one run, on the same
// buffers and with the same timing code as the all-reduce tables (bench_runner's
// timeCollective: -w warm-up, -K batches of -n steps or -G replays of a graph of -n steps,
// slowest rank, median):
//   fused        Communicator::allReduceResidualRmsNorm (one fused kernel on the P2P paths)
//   tpcomm+norm  Communicator::allReduce, then tpcomm's residual + norm kernel
//   nccl+norm    ncclAllReduce, then the same kernel
// for rows 1, 2, 4, ... 512 at hidden --hidden (default 5120) and -d's dtype. Before timing, the fused and
// tpcomm+norm results of one step from the same residual are compared bitwise (#diff, which must
// be 0: every tpcomm path computes the same bits). GPU ranks only.
#include "bench_fused.h"

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench_data.h"
#include "bench_runner.h"
#include "bench_world.h"
#include "tpcomm/communicator.h"
#include "tpcomm/rmsnorm.h"
#include "tpcomm/status.h"

#ifdef TPCOMM_BENCH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace tpcomm_bench {

#ifdef TPCOMM_BENCH_CUDA
namespace {

constexpr size_t kMaxRows = 512;

// Residual and weight of one local rank (in = send, out = recv of its LocalRank).
struct NormBuffers {
  void* residual = nullptr;
  void* weight = nullptr;
};

bool cudaOk(cudaError_t e, const char* what, std::string* error) {
  if (e == cudaSuccess) return true;
  *error = std::string(what) + ": " + cudaGetErrorString(e);
  cudaGetLastError();
  return false;
}

// Element i of a host buffer of dtype.
void storeValue(char* buf, size_t i, tpcomm::DataType dt, float v) {
  if (dt == tpcomm::DataType::kF32) {
    std::memcpy(buf + i * 4, &v, 4);
    return;
  }
  const uint16_t h = dt == tpcomm::DataType::kF16 ? floatToHalfBits(v) : floatToBf16Bits(v);
  std::memcpy(buf + i * 2, &h, 2);
}

// Fills every rank's in with tiny values and residual / weight with 1 (no overflow however
// many steps run: residual grows by ~1e-3 x ranks per step and bf16 1.0 absorbs it).
bool fillBuffers(std::vector<LocalRank>& ranks, std::vector<NormBuffers>& nb, size_t count, size_t hidden,
                 tpcomm::DataType dt, std::string* error) {
  const size_t es = tpcomm::dataTypeSize(dt);
  std::vector<char> small(count * es), ones(count * es);
  for (size_t i = 0; i < count; ++i) {
    storeValue(small.data(), i, dt, 1e-3f * static_cast<float>(i % 7));
    storeValue(ones.data(), i, dt, 1.0f);
  }
  for (size_t k = 0; k < ranks.size(); ++k) {
    if (!cudaOk(cudaSetDevice(ranks[k].device), "cudaSetDevice", error)) return false;
    if (!cudaOk(cudaMemcpy(ranks[k].send, small.data(), count * es, cudaMemcpyHostToDevice), "cudaMemcpy", error)) return false;
    if (!cudaOk(cudaMemcpy(nb[k].residual, ones.data(), count * es, cudaMemcpyHostToDevice), "cudaMemcpy", error)) return false;
    if (!cudaOk(cudaMemcpy(nb[k].weight, ones.data(), hidden * es, cudaMemcpyHostToDevice), "cudaMemcpy", error)) return false;
    if (!cudaOk(cudaDeviceSynchronize(), "cudaDeviceSynchronize", error)) return false;
  }
  return true;
}

// The fused call as a Backend (count = rows * hidden).
class FusedBackend : public Backend {
 public:
  FusedBackend(std::vector<std::unique_ptr<tpcomm::Communicator>>* comms, std::vector<NormBuffers>* nb, size_t hidden)
      : Backend(Coll::kAllReduce, static_cast<int>(comms->size())), comms_(comms), nb_(nb), hidden_(hidden) {}
  bool run(std::vector<LocalRank>& ranks, bool, size_t count, tpcomm::DataType dt, tpcomm::ReduceOp,
           std::string* error) override {
    const bool group = comms_->size() > 1;
    if (group) tpcomm::Communicator::groupStart();
    bool ok = true;
    for (size_t i = 0; i < comms_->size() && ok; ++i) {
      tpcomm::Status s = (*comms_)[i]->allReduceResidualRmsNorm(ranks[i].send, (*nb_)[i].residual, (*nb_)[i].weight,
                                                                1e-6f, ranks[i].recv, count / hidden_, hidden_, dt,
                                                                ranks[i].stream);
      if (s != tpcomm::Status::kOk) {
        *error = std::string("allReduceResidualRmsNorm: ") + tpcomm::lastErrorMessage();
        ok = false;
      }
    }
    if (group && tpcomm::Communicator::groupEnd() != tpcomm::Status::kOk && ok) {
      *error = std::string("groupEnd: ") + tpcomm::lastErrorMessage();
      ok = false;
    }
    return ok;
  }
  std::string lastAlgorithm() const override { return (*comms_)[0]->lastAlgorithm(); }
  void destroy() override {}

 private:
  std::vector<std::unique_ptr<tpcomm::Communicator>>* comms_;
  std::vector<NormBuffers>* nb_;
  size_t hidden_;
};

// Another backend's all-reduce into recv, then tpcomm's residual + norm kernel on each rank.
class UnfusedBackend : public Backend {
 public:
  UnfusedBackend(Backend* allReduce, std::vector<NormBuffers>* nb, size_t hidden)
      : Backend(Coll::kAllReduce, allReduce->nRanks()), allReduce_(allReduce), nb_(nb), hidden_(hidden) {}
  bool run(std::vector<LocalRank>& ranks, bool, size_t count, tpcomm::DataType dt, tpcomm::ReduceOp op,
           std::string* error) override {
    if (!allReduce_->run(ranks, false, count, dt, op, error)) return false;
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (!cudaOk(cudaSetDevice(ranks[i].device), "cudaSetDevice", error)) return false;
      if (tpcomm::residualRmsNorm(ranks[i].recv, (*nb_)[i].residual, (*nb_)[i].weight, 1e-6f, ranks[i].recv,
                                  count / hidden_, hidden_, dt, ranks[i].stream) != tpcomm::Status::kOk) {
        *error = std::string("residual + norm kernel: ") + tpcomm::lastErrorMessage();
        return false;
      }
    }
    return true;
  }
  std::string lastAlgorithm() const override { return allReduce_->lastAlgorithm(); }
  void destroy() override {}

 private:
  Backend* allReduce_;
  std::vector<NormBuffers>* nb_;
  size_t hidden_;
};

// One step of `backend` from residual = 1, then out of rank 0 (local rank 0) to the host.
bool oneStep(World& world, Backend& backend, std::vector<LocalRank>& ranks, std::vector<NormBuffers>& nb, size_t count,
             size_t hidden, tpcomm::DataType dt, std::vector<char>* out, std::string* error) {
  if (!fillBuffers(ranks, nb, count, hidden, dt, error)) return false;
  if (!world.barrier()) return false;
  if (!backend.run(ranks, false, count, dt, tpcomm::ReduceOp::kSum, error)) return false;
  out->resize(count * tpcomm::dataTypeSize(dt));
  for (LocalRank& r : ranks) {
    if (!cudaOk(cudaSetDevice(r.device), "cudaSetDevice", error)) return false;
    if (!cudaOk(cudaStreamSynchronize(r.stream), "cudaStreamSynchronize", error)) return false;
  }
  if (!cudaOk(cudaSetDevice(ranks[0].device), "cudaSetDevice", error)) return false;
  return cudaOk(cudaMemcpy(out->data(), ranks[0].recv, out->size(), cudaMemcpyDeviceToHost), "cudaMemcpy", error);
}

}  // namespace

int runFusedController(const RunInfo& info, tpcomm::Bootstrap* bootstrap, int firstRank, const std::vector<int>& devices) {
  const Args& args = *info.args;
  World world(bootstrap, firstRank, static_cast<int>(devices.size()), info.nRanks);
  const bool main = world.isMain();
  auto fail = [&](const std::string& msg) {
    std::fprintf(stderr, "allreduce_perf --fused-rmsnorm: rank %d: %s\n", firstRank, msg.c_str());
    return 1;
  };
  if (!info.gpu) return fail("needs GPU ranks");
  const size_t hidden = static_cast<size_t>(args.fusedHidden);
  const tpcomm::DataType dt = args.dtype;
  const size_t es = tpcomm::dataTypeSize(dt);
  std::vector<LocalRank> ranks(devices.size());
  for (size_t i = 0; i < devices.size(); ++i) {
    ranks[i].rank = firstRank + static_cast<int>(i);
    ranks[i].device = devices[i];
  }
  std::string error;
  if (!setupRanks(&ranks, kMaxRows * hidden * es, &error)) return fail(error);
  std::vector<NormBuffers> nb(ranks.size());
  for (size_t i = 0; i < ranks.size(); ++i) {
    cudaSetDevice(ranks[i].device);
    if (!cudaOk(cudaMalloc(&nb[i].residual, kMaxRows * hidden * es), "cudaMalloc", &error) ||
        !cudaOk(cudaMalloc(&nb[i].weight, hidden * es), "cudaMalloc", &error))
      return fail(error);
  }
  // Communicators for the fused call, a tpcomm all-reduce backend and NCCL.
  std::vector<std::unique_ptr<tpcomm::Communicator>> comms;
  tpcomm::Status s;
  if (ranks.size() > 1) {
    s = tpcomm::Communicator::createGroup(devices, tpcomm::Config{}, &comms);
  } else {
    std::unique_ptr<tpcomm::Communicator> c;
    s = tpcomm::Communicator::create(*world.bootstrap(), ranks[0].device, tpcomm::Config{}, &c);
    comms.push_back(std::move(c));
  }
  if (s != tpcomm::Status::kOk) return fail(std::string("communicator: ") + tpcomm::lastErrorMessage());
  std::unique_ptr<Backend> tpcommAr = makeTpcommBackend(world, ranks, "auto", &error);
  if (!tpcommAr) return fail(error);
  std::string ncclWhy;
  std::unique_ptr<Backend> ncclAr = makeNcclBackend(world, ranks, &ncclWhy);
  FusedBackend fused(&comms, &nb, hidden);
  UnfusedBackend tpcommUnfused(tpcommAr.get(), &nb, hidden);
  std::unique_ptr<UnfusedBackend> ncclUnfused;
  if (ncclAr) ncclUnfused = std::make_unique<UnfusedBackend>(ncclAr.get(), &nb, hidden);

  TimingPlan plan;
  plan.warmup = args.warmup;
  plan.iters = args.iters;
  plan.repeats = args.repeats;
  plan.graphLaunches = args.graphLaunches;
  if (main) {
    std::printf("# allreduce_perf --fused-rmsnorm: all-reduce + residual add + RMSNorm, %s, hidden %zu, %d ranks (%s)\n",
                ncclTestsTypeName(dt), hidden, info.nRanks, info.mode.c_str());
    std::printf("# %s, -n %d -w %d -K %d; time per step (us), slowest rank, median of batches\n",
                plan.graphLaunches > 0 ? ("CUDA graph, -G " + std::to_string(plan.graphLaunches)).c_str() : "eager",
                plan.iters, plan.warmup, plan.repeats);
    if (!ncclAr) std::printf("# nccl+norm: not run (%s)\n", ncclWhy.c_str());
    std::printf("#%6s %10s  %10s %-18s  %12s %-12s  %10s  %10s %10s  %6s\n", "rows", "bytes", "fused", "(path)",
                "tpcomm+norm", "(path)", "nccl+norm", "f/tpcomm", "f/nccl", "#diff");
  }
  int rc = 0;
  for (size_t rows = 1; rows <= kMaxRows; rows *= 2) {
    const size_t count = rows * hidden;
    std::vector<char> a, b;
    if (!oneStep(world, fused, ranks, nb, count, hidden, dt, &a, &error) ||
        !oneStep(world, tpcommUnfused, ranks, nb, count, hidden, dt, &b, &error))
      return fail(error);
    size_t diff = 0;
    for (size_t i = 0; i < count; ++i) diff += std::memcmp(a.data() + i * es, b.data() + i * es, es) != 0;
    double tf = 0, tt = 0, tn = 0;
    if (!timeCollective(world, fused, ranks, false, count, dt, tpcomm::ReduceOp::kSum, plan, &tf, &error) ||
        !timeCollective(world, tpcommUnfused, ranks, false, count, dt, tpcomm::ReduceOp::kSum, plan, &tt, &error) ||
        (ncclUnfused &&
         !timeCollective(world, *ncclUnfused, ranks, false, count, dt, tpcomm::ReduceOp::kSum, plan, &tn, &error)))
      return fail(error);
    if (diff) rc = 1;
    if (main)
      std::printf(" %6zu %10zu  %10.2f %-18s  %12.2f %-12s  %10.2f  %10.2f %10.2f  %6zu\n", rows, count * es, tf,
                  fused.lastAlgorithm().c_str(), tt, tpcommUnfused.lastAlgorithm().c_str(), tn, tf / tt,
                  tn > 0 ? tf / tn : 0.0, diff);
  }
  if (main)
    std::printf("# f/tpcomm = fused / (tpcomm all-reduce + norm), target <= 0.70 at rows <= 16 and <= 1.00 everywhere\n");
  if (ncclAr) ncclAr->destroy();
  tpcommAr->destroy();
  for (auto& c : comms) c->destroy();
  for (size_t i = 0; i < ranks.size(); ++i) {
    cudaSetDevice(ranks[i].device);
    cudaFree(nb[i].residual);
    cudaFree(nb[i].weight);
  }
  teardownRanks(&ranks);
  return rc;
}

#else

int runFusedController(const RunInfo&, tpcomm::Bootstrap*, int firstRank, const std::vector<int>&) {
  std::fprintf(stderr, "allreduce_perf --fused-rmsnorm: rank %d: built without CUDA\n", firstRank);
  return 1;
}

#endif

}  // namespace tpcomm_bench
