// The NCCL group for CUDA tensors: the Communicator interface (communicator.h) over NCCL,
// loaded at run time with dlopen as the CUDA driver is (libnccl.so.2 from the CUDA toolkit, or
// the file EIN_NCCL_LIBRARY names: tests load a fake). The ranks are those of a bootstrap group
// (MPI's world under mpirun, or a group of one), which carries NCCL's unique id from rank 0 to
// the others.
//
// Buffers handed to its collectives are device addresses on cuda:`device`. Each collective is
// queued on the calling thread's current stream of that device (runtime/cuda/stream.h), so
// kernels queued after it on that stream see its result, and the call then waits for the
// stream under the watchdog (watchdog.h): a collective that outlives the timeout aborts the
// NCCL communicator and ends the process. A rank's own part of an exchange is a send to
// itself within the same group.
#pragma once

#include <memory>
#include <string>

#include "runtime/dist/communicator.h"

namespace ein::dist {

/// Whether NCCL loads here (the library and the entry points ein calls); `why` says what is
/// missing when it does not.
bool nccl_available(std::string* why = nullptr);

/// An NCCL communicator over the ranks of `bootstrap` (which must outlive it) on cuda:`device`.
/// RuntimeError when NCCL does not load or the communicator cannot be made.
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, int device);

}  // namespace ein::dist
