// Bootstrap over MPI (one rank per process, e.g. under mpirun). Available when tpcomm was built
// with TPCOMM_WITH_MPI (tpcomm::tpcomm then links MPI).
#pragma once

#include <mpi.h>

#include <memory>

#include "tpcomm/bootstrap.h"

namespace tpcomm {

/// Bootstrap over the MPI communicator `comm` (duplicated internally; MPI must be initialized
/// and stay so while the bootstrap lives). Ranks and size are those of `comm`.
Status makeMpiBootstrap(MPI_Comm comm, std::unique_ptr<Bootstrap>* out);

}  // namespace tpcomm
