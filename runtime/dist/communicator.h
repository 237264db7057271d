// The processes a training run is spread over, and the few collectives data parallelism and
// ZeRO need. `world()` is MPI's COMM_WORLD when the process was started by `mpirun` (Open
// MPI's or another launcher's environment says so) and a group of one otherwise, so the same
// code path trains on one process or many. Collectives move bytes; the reductions that give
// gradients their values are done by the callers (gradient_sync.h) in a fixed rank order, so
// results are bitwise reproducible and independent of how MPI schedules its messages.
//
// Every collective runs under a watchdog: one that has not finished after `timeout_seconds`
// (a rank died, hangs, or took another path) prints which collective waited and aborts the
// job, so no rank waits forever.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ein::dist {

/// Bytes this process handed to collectives, by kind (what `ein report` predicts per step).
struct CommStats {
  int64_t sent_bytes = 0;      ///< payload this rank sent to other ranks
  int64_t collectives = 0;     ///< collectives started
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// The rank among the processes on this machine (picks the GPU with --device cuda).
  virtual int local_rank() const = 0;
  /// "single" (one process, no MPI), "mpi" or "nccl".
  virtual std::string_view backend() const = 0;
  /// Whether the buffers handed to the collectives are device memory (NCCL: addresses on its
  /// CUDA device) rather than host memory.
  virtual bool device_memory() const { return false; }

  /// Personalised exchange: the bytes [send_offsets[j], + send_counts[j]) of `send` go to
  /// rank j, which receives them at [recv_offsets[i], + recv_counts[i]) of its `recv` (i the
  /// sender). A rank's own part is copied locally.
  virtual void all_to_all_v(const void* send, const std::vector<int64_t>& send_counts,
                            const std::vector<int64_t>& send_offsets, void* recv,
                            const std::vector<int64_t>& recv_counts,
                            const std::vector<int64_t>& recv_offsets, std::string_view what) = 0;
  /// Every rank's `counts[rank]` bytes at `send` land at `offsets[i]` of every `recv`.
  virtual void all_gather_v(const void* send, void* recv, const std::vector<int64_t>& counts,
                            const std::vector<int64_t>& offsets, std::string_view what) = 0;
  /// `bytes` at `data` from rank `root` to all.
  virtual void broadcast(void* data, int64_t bytes, int root, std::string_view what) = 0;
  virtual void barrier(std::string_view what) = 0;
  /// A second group of the same ranks whose collectives are independent of this one's, for
  /// another thread to use while this one's go on (MPI_Comm_dup; the gradient exchange that
  /// overlaps the backward, lane.h). Collective. Null where the backend cannot run two
  /// threads' collectives at once (MPI without MPI_THREAD_MULTIPLE, NCCL today, one process).
  virtual std::unique_ptr<Communicator> duplicate() { return nullptr; }
  /// Ends every process of the job after printing `why` (a collective that cannot complete).
  [[noreturn]] virtual void abort(const std::string& why) = 0;

  /// The watchdog's limit for one collective (default 600 s; EIN_DIST_TIMEOUT overrides).
  double timeout_seconds = 600;
  CommStats stats;

  // Conveniences over the primitives.
  /// One value per rank, in rank order, on every rank.
  std::vector<double> all_gather(double value, std::string_view what);
  /// The sum over ranks of `value`, added in rank order (bitwise the same on every rank).
  double sum(double value, std::string_view what);
  /// One 64-bit value per rank, in rank order.
  std::vector<uint64_t> all_gather(uint64_t value, std::string_view what);
};

/// The processes of this job: MPI's world under mpirun, else one process. Created on first
/// use (MPI_Init then) and finalised at exit.
Communicator& world();

/// True when the environment says a launcher (mpirun, srun with PMI) started this process as
/// one of several; world() is then MPI's (or fails, with a clear message, where ein was built
/// without MPI).
bool launched_by_mpi();

}  // namespace ein::dist
