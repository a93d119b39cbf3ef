// nccl: a real NCCL communicator under tpcomm, created from tpcomm's bootstrap (rank 0 makes
// the unique id, the bootstrap spreads it) or adopted from an engine. The ring_nccl algorithm
// runs over it. Pure C++ interface; the implementation is built with TPCOMM_WITH_NCCL.
#pragma once

#include <memory>

#include "tpcomm/status.h"
#include "tpcomm/types.h"
#include "transports/transport_env.h"

namespace tpcomm {

class NcclTransport {
 public:
  virtual ~NcclTransport() = default;
  /// NCCL's collectives on `stream` (counts as NCCL takes them: per-rank piece for the last two).
  virtual Status allReduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                           cudaStream_t stream) = 0;
  virtual Status reduceScatter(const void* send, void* recv, size_t recvCount, DataType dtype, ReduceOp op,
                               cudaStream_t stream) = 0;
  virtual Status allGather(const void* send, void* recv, size_t sendCount, DataType dtype, cudaStream_t stream) = 0;
  /// The underlying ncclComm_t (as void*).
  virtual void* handle() const = 0;
  /// ncclCommAbort on a communicator tpcomm created (local: returns without its peers); an
  /// engine's adopted one is only let go. The transport must be dropped after it.
  virtual void abort() = 0;

  /// Collective: creates an NCCL communicator for env's ranks. kNotSupported when tpcomm was
  /// built without NCCL or the communicator is a host one.
  static Status create(const TransportEnv& env, std::unique_ptr<NcclTransport>* out);
  /// Wraps an engine's ncclComm_t without owning it, after checking that its size, rank and
  /// device match env (kInvalidArgument naming the mismatch otherwise).
  static Status adopt(const TransportEnv& env, void* ncclComm, std::unique_ptr<NcclTransport>* out);
};

/// ncclGroupStart / ncclGroupEnd where NCCL is built in; kOk no-ops otherwise.
Status ncclGroupStartIfAny();
Status ncclGroupEndIfAny();

}  // namespace tpcomm
