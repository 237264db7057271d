// A fake NCCL for tests on machines without GPUs: the entry points ein loads from libnccl.so.2
// (runtime/dist/nccl_communicator.cpp), over MPI on host memory, which is what the fake CUDA
// device's memory is (tests/support/fake_cuda.h). Built as a shared library and loaded through
// EIN_NCCL_LIBRARY, so the NCCL communicator's dlopen, bootstrap, grouping and byte counts run
// in CI. Semantics kept: point-to-point operations between ncclGroupStart and ncclGroupEnd
// complete together at the end of the group; a send to oneself is matched by a receive from
// oneself; broadcast is in place or not. Streams are ignored: every call is done when it
// returns (the fake device runs its launches when they are made). Only byte types (ncclInt8,
// ncclUint8) are taken.
// The fake device keeps its memory from the host outside its own operations
// (tests/support/fake_device_memory.h): the buffers are opened for each call through the test
// program's ein_fake_device_memory_open, when it has one.
#include <dlfcn.h>
#include <mpi.h>

#include <cstddef>
#include <cstring>
#include <vector>

namespace {

struct UniqueId {
  char internal[128];
};

struct Comm {
  MPI_Comm mpi = MPI_COMM_NULL;
  int rank = 0, size = 1;
};

struct Op {
  bool send;
  void* buffer;
  size_t bytes;
  int peer;
  Comm* comm;
};

constexpr int kSuccess = 0, kInvalidArgument = 4, kSystemError = 2;

int depth = 0;
std::vector<Op> pending;

/// The fake device's buffers open to the host while it lives (as for its own copies).
class Opened {
 public:
  Opened(const char* operation, const std::vector<const void*>& pointers) {
    using Open = void* (*)(const char*, const void*);
    static const auto open =
        reinterpret_cast<Open>(dlsym(RTLD_DEFAULT, "ein_fake_device_memory_open"));
    if (open)
      for (const void* p : pointers)
        accesses_.push_back(open(operation, p));
  }
  ~Opened() {
    using Close = void (*)(void*);
    static const auto close =
        reinterpret_cast<Close>(dlsym(RTLD_DEFAULT, "ein_fake_device_memory_close"));
    for (void* a : accesses_)
      close(a);
  }
  Opened(const Opened&) = delete;
  Opened& operator=(const Opened&) = delete;

 private:
  std::vector<void*> accesses_;
};

int run_pending() {
  std::vector<Op> ops;
  ops.swap(pending);
  std::vector<const void*> buffers;
  for (const Op& op : ops)
    buffers.push_back(op.buffer);
  const Opened opened("an NCCL send or receive", buffers);
  std::vector<MPI_Request> requests;
  // Sends to oneself meet receives from oneself in order.
  std::vector<const Op*> self_sends, self_recvs;
  for (const Op& op : ops) {
    if (op.peer == op.comm->rank) {
      (op.send ? self_sends : self_recvs).push_back(&op);
      continue;
    }
    if (op.bytes > static_cast<size_t>(1) << 30) return kInvalidArgument;
    MPI_Request r;
    const int count = static_cast<int>(op.bytes);
    const int rc = op.send ? MPI_Isend(op.buffer, count, MPI_BYTE, op.peer, 0, op.comm->mpi, &r)
                           : MPI_Irecv(op.buffer, count, MPI_BYTE, op.peer, 0, op.comm->mpi, &r);
    if (rc != MPI_SUCCESS) return kSystemError;
    requests.push_back(r);
  }
  if (self_sends.size() != self_recvs.size()) return kInvalidArgument;
  for (size_t i = 0; i < self_sends.size(); ++i) {
    if (self_sends[i]->bytes != self_recvs[i]->bytes) return kInvalidArgument;
    std::memmove(self_recvs[i]->buffer, self_sends[i]->buffer, self_sends[i]->bytes);
  }
  if (MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE) !=
      MPI_SUCCESS)
    return kSystemError;
  return kSuccess;
}

int enqueue(Op op, int datatype) {
  if (datatype != 0 && datatype != 1) return kInvalidArgument;
  if (op.peer < 0 || op.peer >= op.comm->size) return kInvalidArgument;
  pending.push_back(op);
  return depth == 0 ? run_pending() : kSuccess;
}

}  // namespace

extern "C" {

const char* ncclGetErrorString(int result) {
  switch (result) {
    case kSuccess: return "no error (fake NCCL)";
    case kInvalidArgument: return "invalid argument (fake NCCL)";
    default: return "system error (fake NCCL)";
  }
}

int ncclGetVersion(int* version) {
  *version = 0;  // a fake
  return kSuccess;
}

int ncclGetUniqueId(UniqueId* id) {
  std::memset(id, 0, sizeof *id);
  std::strcpy(id->internal, "ein fake NCCL");
  return kSuccess;
}

int ncclCommInitRank(Comm** comm, int nranks, UniqueId id, int rank) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized || std::strcmp(id.internal, "ein fake NCCL") != 0) return kInvalidArgument;
  auto* c = new Comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &c->mpi);
  MPI_Comm_rank(c->mpi, &c->rank);
  MPI_Comm_size(c->mpi, &c->size);
  if (c->rank != rank || c->size != nranks) {
    MPI_Comm_free(&c->mpi);
    delete c;
    return kInvalidArgument;
  }
  *comm = c;
  return kSuccess;
}

int ncclCommDestroy(Comm* comm) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&comm->mpi);
  delete comm;
  return kSuccess;
}

int ncclCommAbort(Comm*) { return kSuccess; }  // called from the watchdog's thread: no MPI

int ncclCommGetAsyncError(Comm*, int* state) {
  *state = kSuccess;
  return kSuccess;
}

int ncclGroupStart() {
  ++depth;
  return kSuccess;
}

int ncclGroupEnd() {
  if (depth == 0) return kInvalidArgument;
  return --depth == 0 ? run_pending() : kSuccess;
}

int ncclSend(const void* buffer, size_t count, int datatype, int peer, Comm* comm, void*) {
  return enqueue({true, const_cast<void*>(buffer), count, peer, comm}, datatype);
}

int ncclRecv(void* buffer, size_t count, int datatype, int peer, Comm* comm, void*) {
  return enqueue({false, buffer, count, peer, comm}, datatype);
}

int ncclBroadcast(const void* send, void* recv, size_t count, int datatype, int root, Comm* comm,
                  void*) {
  if (datatype != 0 && datatype != 1) return kInvalidArgument;
  if (count > static_cast<size_t>(1) << 30) return kInvalidArgument;
  const Opened opened("an NCCL broadcast", {send, recv});
  if (comm->rank == root && send != recv) std::memmove(recv, send, count);
  return MPI_Bcast(recv, static_cast<int>(count), MPI_BYTE, root, comm->mpi) == MPI_SUCCESS
             ? kSuccess
             : kSystemError;
}

}  // extern "C"
