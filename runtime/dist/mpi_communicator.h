// The MPI group (Open MPI from Debian's libopenmpi-dev): MPI_COMM_WORLD of a job started by
// mpirun. Only mpi_communicator.cpp includes mpi.h.
#pragma once

#include <memory>

#include "runtime/dist/communicator.h"

namespace ein::dist {

/// MPI_Init and the world communicator; nullptr where ein was built without MPI.
std::unique_ptr<Communicator> make_mpi_communicator();

}  // namespace ein::dist
