// Bootstrap over MPI (one rank per process, e.g. under mpirun). Available when tpcomm was built
// with TPCOMM_WITH_MPI (tpcomm::tpcomm then links MPI).
#pragma once

#include <mpi.h>

#include <memory>

#include "tpcomm/bootstrap.h"

namespace tpcomm {

/// Bootstrap over the MPI communicator `comm` (duplicated internally with MPI_Comm_idup, the wait
/// bounded by TPCOMM_TIMEOUT_MS; MPI must be initialized and stay so while the bootstrap lives).
/// Ranks and size are those of `comm`. While duplicating, each rank sends every peer one 8-byte
/// arrival note on `comm` (tag 7320), so a timeout names the ranks that never called this; every
/// note is received when all ranks arrive. Every exchange is bounded by TPCOMM_TIMEOUT_MS, or by
/// Config::timeoutMs during a communicator's create and destroy; after a timeout (kTimeout,
/// naming the ranks that did not arrive, the exchange and the bound) the bootstrap is unusable,
/// and what MPI may still use (a pending request, its buffers, the duplicated communicator) is
/// left to MPI, never freed, so MPI_Finalize still returns (docs/reliability.md).
Status makeMpiBootstrap(MPI_Comm comm, std::unique_ptr<Bootstrap>* out);

}  // namespace tpcomm
