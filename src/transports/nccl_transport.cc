#include "transports/nccl_transport.h"

#include <cstring>
#include <vector>

#include "common/error.h"

#ifdef TPCOMM_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>
#endif

namespace tpcomm {

#ifdef TPCOMM_HAVE_NCCL
namespace {

// DataType and ReduceOp in their order (include/tpcomm/types.h); the last for any other value.
ncclDataType_t toNccl(DataType t) {
  static const ncclDataType_t kTypes[] = {ncclFloat32, ncclFloat16, ncclBfloat16};
  return kTypes[static_cast<int>(t) >= 0 && static_cast<int>(t) < 3 ? static_cast<int>(t) : 2];
}

Status check(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return Status::kOk;
  return TPCOMM_ERROR(kRemoteError, "NCCL %s: %s", what, ncclGetErrorString(r));
}

ncclRedOp_t toNccl(ReduceOp op) {
  static const ncclRedOp_t kOps[] = {ncclSum, ncclMax, ncclMin};
  return kOps[static_cast<int>(op) >= 0 && static_cast<int>(op) < 3 ? static_cast<int>(op) : 2];
}

class NcclTransportImpl : public NcclTransport {
 public:
  NcclTransportImpl(ncclComm_t c, bool owned) : comm_(c), owned_(owned) {}
  ~NcclTransportImpl() override {
    if (comm_ && owned_) ncclCommDestroy(comm_);
  }
  void* handle() const override { return comm_; }
  void abort() override {
    if (comm_ && owned_) ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  Status allReduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                   cudaStream_t stream) override {
    return check(ncclAllReduce(send, recv, count, toNccl(dtype), toNccl(op), comm_, stream), "ncclAllReduce");
  }
  Status reduceScatter(const void* send, void* recv, size_t recvCount, DataType dtype, ReduceOp op,
                       cudaStream_t stream) override {
    return check(ncclReduceScatter(send, recv, recvCount, toNccl(dtype), toNccl(op), comm_, stream),
                 "ncclReduceScatter");
  }
  Status allGather(const void* send, void* recv, size_t sendCount, DataType dtype, cudaStream_t stream) override {
    return check(ncclAllGather(send, recv, sendCount, toNccl(dtype), comm_, stream), "ncclAllGather");
  }

 private:
  ncclComm_t comm_;
  bool owned_;  // false for an engine's communicator (adopt)
};

}  // namespace

Status NcclTransport::create(const TransportEnv& ctx, std::unique_ptr<NcclTransport>* out) {
  if (ctx.device < 0) return TPCOMM_ERROR(kNotSupported, "nccl: host ranks");
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  int ok = 1;
  if (ctx.rank == 0 && ncclGetUniqueId(&id) != ncclSuccess) ok = 0;
  struct Offer {
    int ok;
    ncclUniqueId id;
  } mine{ok, id};
  std::vector<Offer> all(ctx.nRanks);
  TPCOMM_TRY(ctx.bootstrap->allGather(&mine, all.data(), sizeof(Offer)));
  if (!all[0].ok) return TPCOMM_ERROR(kNotSupported, "nccl: ncclGetUniqueId failed on rank 0");
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRank(&comm, ctx.nRanks, all[0].id, ctx.rank);
  if (r != ncclSuccess) return TPCOMM_ERROR(kNotSupported, "nccl: ncclCommInitRank: %s", ncclGetErrorString(r));
  out->reset(new NcclTransportImpl(comm, true));
  return Status::kOk;
}

Status NcclTransport::adopt(const TransportEnv& ctx, void* ncclComm, std::unique_ptr<NcclTransport>* out) {
  if (ctx.device < 0) return TPCOMM_INVALID("config.ncclComm: a host communicator (device -1) cannot use NCCL");
  ncclComm_t comm = static_cast<ncclComm_t>(ncclComm);
  int count = 0, rank = 0, device = 0;
  if (ncclCommCount(comm, &count) != ncclSuccess || ncclCommUserRank(comm, &rank) != ncclSuccess ||
      ncclCommCuDevice(comm, &device) != ncclSuccess)
    return TPCOMM_INVALID("config.ncclComm: not a usable ncclComm_t (ncclCommCount/UserRank/CuDevice failed)");
  // Say which field differs first (a wrong-size comm usually has a wrong rank too).
  const char* field = count != ctx.nRanks   ? "rank count"
                      : rank != ctx.rank     ? "rank"
                      : device != ctx.device ? "device"
                                             : nullptr;
  if (field)
    return TPCOMM_INVALID(
        "config.ncclComm: its %s differs: it has %d ranks, rank %d, device %d; this communicator has %d ranks, rank %d, "
        "device %d",
        field, count, rank, device, ctx.nRanks, ctx.rank, ctx.device);
  out->reset(new NcclTransportImpl(comm, false));
  return Status::kOk;
}

Status ncclGroupStartIfAny() {
  ncclResult_t r = ncclGroupStart();
  return r == ncclSuccess ? Status::kOk : TPCOMM_ERROR(kRemoteError, "ncclGroupStart: %s", ncclGetErrorString(r));
}

Status ncclGroupEndIfAny() {
  ncclResult_t r = ncclGroupEnd();
  return r == ncclSuccess ? Status::kOk : TPCOMM_ERROR(kRemoteError, "ncclGroupEnd: %s", ncclGetErrorString(r));
}

#else

Status NcclTransport::create(const TransportEnv&, std::unique_ptr<NcclTransport>*) {
  return TPCOMM_ERROR(kNotSupported, "nccl: tpcomm was built without NCCL (TPCOMM_WITH_NCCL)");
}
Status NcclTransport::adopt(const TransportEnv&, void*, std::unique_ptr<NcclTransport>*) {
  return TPCOMM_INVALID("config.ncclComm: tpcomm was built without NCCL (TPCOMM_WITH_NCCL)");
}
Status ncclGroupStartIfAny() { return Status::kOk; }
Status ncclGroupEndIfAny() { return Status::kOk; }

#endif

}  // namespace tpcomm
