// comm_access: see comm_access.h.
#include "shim/comm_access.h"

namespace tpcomm {

Communicator::Impl* communicatorInternals(Communicator& comm) { return comm.impl_.get(); }

}  // namespace tpcomm
