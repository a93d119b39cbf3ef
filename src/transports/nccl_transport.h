// nccl: a real NCCL communicator under tpcomm, created from tpcomm's bootstrap (rank 0 makes
// the unique id, the bootstrap spreads it) or adopted from an engine. The ring_nccl algorithm
// runs over it. Pure C++ interface; the implementation is built with TPCOMM_WITH_NCCL.
#pragma once

#include <memory>

#include "collectives/coll_args.h"
#include "tpcomm/status.h"

namespace tpcomm {

struct CommContext;

class NcclTransport {
 public:
  virtual ~NcclTransport() = default;
  /// Runs the collective through NCCL on args.stream.
  virtual Status run(const CollArgs& args) = 0;
  /// The underlying ncclComm_t (as void*).
  virtual void* handle() const = 0;

  /// Collective: creates an NCCL communicator for ctx's ranks. kNotSupported when tpcomm was
  /// built without NCCL or the communicator is a host one.
  static Status create(CommContext& ctx, std::unique_ptr<NcclTransport>* out);
  /// Wraps an engine's ncclComm_t without owning it, after checking that its size, rank and
  /// device match ctx (kInvalidArgument naming the mismatch otherwise).
  static Status adopt(CommContext& ctx, void* ncclComm, std::unique_ptr<NcclTransport>* out);
};

/// ncclGroupStart / ncclGroupEnd where NCCL is built in; kOk no-ops otherwise.
Status ncclGroupStartIfAny();
Status ncclGroupEndIfAny();

}  // namespace tpcomm
