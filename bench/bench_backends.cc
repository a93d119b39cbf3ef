// bench_backends: the implementations allreduce_perf can time. TpcommBackend runs
// Communicator::allReduce (one communicator per local rank: create() over the run's bootstrap,
// or createGroup() when one thread drives several GPUs); NcclBackend runs ncclAllReduce on
// communicators made from the same bootstrap (rank 0's unique id spread through it) or by
// ncclCommInitAll in -g mode, the way nccl-tests makes them.
#include <cstdio>
#include <cstring>

#include "bench_args.h"
#include "bench_runner.h"
#include "tpcomm/communicator.h"
#include "tpcomm/status.h"

#ifdef TPCOMM_BENCH_CUDA
#include <cuda_runtime_api.h>
#endif
#ifdef TPCOMM_BENCH_NCCL
#include <nccl.h>
#endif

namespace tpcomm_bench {
namespace {

std::string tpcommError(const char* what, tpcomm::Status s) {
  return std::string(what) + ": " + tpcomm::statusName(s) + ": " + tpcomm::lastErrorMessage();
}

class TpcommBackend : public Backend {
 public:
  TpcommBackend(std::vector<std::unique_ptr<tpcomm::Communicator>> comms, Coll coll, int nRanks)
      : Backend(coll, nRanks), comms_(std::move(comms)) {}
  ~TpcommBackend() override { destroy(); }

  bool run(std::vector<LocalRank>& ranks, bool inPlace, size_t count, tpcomm::DataType dtype, tpcomm::ReduceOp op,
           std::string* error) override {
    const bool group = comms_.size() > 1;
    if (group) tpcomm::Communicator::groupStart();
    bool ok = true;
    for (size_t i = 0; i < comms_.size() && ok; ++i) {
      LocalRank& r = ranks[i];
      const CollBuffers b = collBuffers(coll_, r, inPlace, count, tpcomm::dataTypeSize(dtype), nRanks_);
      tpcomm::Status s;
      const char* what;
      if (coll_ == Coll::kReduceScatter) {
        what = "reduceScatter";
        s = comms_[i]->reduceScatter(b.send, b.recv, b.perRank, dtype, op, r.stream);
      } else if (coll_ == Coll::kAllGather) {
        what = "allGather";
        s = comms_[i]->allGather(b.send, b.recv, b.perRank, dtype, r.stream);
      } else {
        what = "allReduce";
        s = comms_[i]->allReduce(b.send, b.recv, b.perRank, dtype, op, r.stream);
      }
      if (s != tpcomm::Status::kOk) {
        *error = "rank " + std::to_string(r.rank) + ": " + tpcommError(what, s);
        ok = false;
      }
    }
    if (group) {
      tpcomm::Status s = tpcomm::Communicator::groupEnd();
      if (ok && s != tpcomm::Status::kOk) {
        *error = tpcommError("groupEnd", s);
        ok = false;
      }
    }
    return ok;
  }

  std::string lastAlgorithm() const override { return comms_.empty() ? "none" : comms_[0]->lastAlgorithm(); }

  void destroy() override {
    for (auto& c : comms_) {
      if (!c) continue;
      tpcomm::Status s = c->destroy();
      if (s != tpcomm::Status::kOk) std::fprintf(stderr, "%s: %s\n", gBenchName, tpcommError("destroy", s).c_str());
    }
    comms_.clear();
  }

 private:
  std::vector<std::unique_ptr<tpcomm::Communicator>> comms_;
};

#ifdef TPCOMM_BENCH_NCCL
ncclDataType_t ncclType(tpcomm::DataType t) {
  switch (t) {
    case tpcomm::DataType::kF32: return ncclFloat32;
    case tpcomm::DataType::kF16: return ncclFloat16;
    case tpcomm::DataType::kBF16: return ncclBfloat16;
  }
  return ncclFloat32;
}

ncclRedOp_t ncclOp(tpcomm::ReduceOp op) {
  switch (op) {
    case tpcomm::ReduceOp::kSum: return ncclSum;
    case tpcomm::ReduceOp::kMax: return ncclMax;
    case tpcomm::ReduceOp::kMin: return ncclMin;
  }
  return ncclSum;
}

class NcclBackend : public Backend {
 public:
  NcclBackend(std::vector<ncclComm_t> comms, Coll coll, int nRanks) : Backend(coll, nRanks), comms_(std::move(comms)) {}
  ~NcclBackend() override { destroy(); }

  bool run(std::vector<LocalRank>& ranks, bool inPlace, size_t count, tpcomm::DataType dtype, tpcomm::ReduceOp op,
           std::string* error) override {
    const bool group = comms_.size() > 1;
    if (group) ncclGroupStart();
    ncclResult_t first = ncclSuccess;
    for (size_t i = 0; i < comms_.size(); ++i) {
      LocalRank& r = ranks[i];
      const CollBuffers b = collBuffers(coll_, r, inPlace, count, tpcomm::dataTypeSize(dtype), nRanks_);
      ncclResult_t e =
          coll_ == Coll::kReduceScatter ? ncclReduceScatter(b.send, b.recv, b.perRank, ncclType(dtype), ncclOp(op), comms_[i], r.stream)
          : coll_ == Coll::kAllGather   ? ncclAllGather(b.send, b.recv, b.perRank, ncclType(dtype), comms_[i], r.stream)
                                        : ncclAllReduce(b.send, b.recv, b.perRank, ncclType(dtype), ncclOp(op), comms_[i], r.stream);
      if (e != ncclSuccess && first == ncclSuccess) first = e;
    }
    if (group) {
      ncclResult_t e = ncclGroupEnd();
      if (e != ncclSuccess && first == ncclSuccess) first = e;
    }
    if (first != ncclSuccess) {
      *error = std::string(coll_ == Coll::kReduceScatter ? "ncclReduceScatter: " : coll_ == Coll::kAllGather ? "ncclAllGather: " : "ncclAllReduce: ") +
               ncclGetErrorString(first) + " (" + ncclGetLastError(nullptr) + ")";
      return false;
    }
    return true;
  }

  std::string lastAlgorithm() const override { return "nccl"; }

  void destroy() override {
    for (ncclComm_t c : comms_)
      if (c) ncclCommDestroy(c);
    comms_.clear();
  }

 private:
  std::vector<ncclComm_t> comms_;
};
#endif

}  // namespace

CollBuffers collBuffers(Coll coll, const LocalRank& r, bool inPlace, size_t count, size_t elemSize, int nRanks) {
  if (coll == Coll::kAllReduce) return {inPlace ? r.recv : r.send, r.recv, count};
  const size_t part = count / static_cast<size_t>(nRanks);
  char* own = static_cast<char*>(r.recv) + static_cast<size_t>(r.rank) * part * elemSize;
  if (coll == Coll::kReduceScatter) return {inPlace ? r.recv : r.send, inPlace ? own : r.recv, part};
  return {inPlace ? own : r.send, r.recv, part};
}

std::unique_ptr<Backend> makeTpcommBackend(World& world, const std::vector<LocalRank>& ranks, const std::string& algo,
                                           std::string* error, Coll coll, tpcomm::Compression compression) {
  tpcomm::Config config;
  config.compression = compression;
  if (algo != "auto") {
    config.algo = algo;
    // A forced selection that does not name NCCL must not fall back to it silently.
    config.useNccl = algo.find("ring_nccl") != std::string::npos;
  }
  std::vector<std::unique_ptr<tpcomm::Communicator>> comms;
  tpcomm::Status s;
  if (ranks.size() > 1) {
    std::vector<int> devices;
    for (const LocalRank& r : ranks) devices.push_back(r.device);
    s = tpcomm::Communicator::createGroup(devices, config, &comms);
    if (s != tpcomm::Status::kOk) *error = tpcommError("Communicator::createGroup", s);
  } else {
    std::unique_ptr<tpcomm::Communicator> c;
    s = tpcomm::Communicator::create(*world.bootstrap(), ranks[0].device, config, &c);
    if (s != tpcomm::Status::kOk) *error = "rank " + std::to_string(ranks[0].rank) + ": " + tpcommError("Communicator::create", s);
    comms.push_back(std::move(c));
  }
  if (s != tpcomm::Status::kOk) return nullptr;
  return std::unique_ptr<Backend>(new TpcommBackend(std::move(comms), coll, world.nRanks()));
}

std::unique_ptr<Backend> makeNcclBackend(World& world, const std::vector<LocalRank>& ranks, std::string* error,
                                         Coll coll) {
#ifdef TPCOMM_BENCH_NCCL
  for (const LocalRank& r : ranks)
    if (r.device < 0) {
      *error = "NCCL needs GPU ranks (these are host ranks)";
      return nullptr;
    }
  std::vector<ncclComm_t> comms(ranks.size(), nullptr);
  ncclResult_t e;
  if (ranks.size() > 1) {
    std::vector<int> devs;
    for (const LocalRank& r : ranks) devs.push_back(r.device);
    e = ncclCommInitAll(comms.data(), static_cast<int>(devs.size()), devs.data());
  } else {
    ncclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    if (world.firstRank() == 0 && (e = ncclGetUniqueId(&id)) != ncclSuccess) {
      *error = std::string("ncclGetUniqueId: ") + ncclGetErrorString(e);
      // Still take part in the exchange so the other ranks do not wait for the timeout.
    }
    if (!world.broadcastFromFirst(&id, sizeof(id))) {
      *error = "bootstrap exchange of the NCCL unique id failed";
      return nullptr;
    }
    cudaSetDevice(ranks[0].device);
    e = ncclCommInitRank(&comms[0], world.nRanks(), id, ranks[0].rank);
  }
  if (e != ncclSuccess) {
    *error = std::string("NCCL communicator init: ") + ncclGetErrorString(e) + " (" + ncclGetLastError(nullptr) + ")";
    return nullptr;
  }
  return std::unique_ptr<Backend>(new NcclBackend(std::move(comms), coll, world.nRanks()));
#else
  (void)world;
  (void)ranks;
  (void)coll;
  *error = "-A nccl: this allreduce_perf was built without NCCL (or without CUDA)";
  return nullptr;
#endif
}

}  // namespace tpcomm_bench
