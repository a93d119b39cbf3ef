// comm_access: the shim's read-only view of a tpcomm Communicator's selection inputs (topology,
// algorithm list, override), so its routing asks the communicator's own selector.
#pragma once

#include "collectives/communicator_impl.h"

namespace tpcomm {

/// The internals of `comm` (declared a friend in tpcomm/communicator.h).
Communicator::Impl* communicatorInternals(Communicator& comm);

}  // namespace tpcomm
