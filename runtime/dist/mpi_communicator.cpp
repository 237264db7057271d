// Communicator over MPI (communicator.h). MPI is initialised with MPI_THREAD_MULTIPLE where the
// library provides it, so a duplicate() (its own MPI communicator) can run collectives on a
// second thread beside the main thread's; each group has its own watchdog thread, which ends
// the process when a collective outlives the timeout, and the launcher (mpirun) then ends the
// other ranks: Open MPI aborts a job one of whose processes exits without MPI_Finalize.
#include "runtime/dist/mpi_communicator.h"

#ifdef EIN_HAVE_MPI

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <limits>
#include <string>

#include <ein/errors.h>
#include <fmt/format.h>

#include "runtime/dist/watchdog.h"

namespace ein::dist {
namespace {

/// MPI counts are int: a larger message is refused rather than truncated.
int count_of(int64_t bytes, std::string_view what) {
  if (bytes < 0 || bytes > std::numeric_limits<int>::max())
    throw RuntimeError(fmt::format("{}: {} bytes in one MPI message is more than MPI's int count "
                                   "allows; use smaller buckets",
                                   what, bytes));
  return static_cast<int>(bytes);
}

std::vector<int> counts_of(const std::vector<int64_t>& v, std::string_view what) {
  std::vector<int> out;
  out.reserve(v.size());
  for (int64_t x : v)
    out.push_back(count_of(x, what));
  return out;
}

void check(int rc, std::string_view call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw RuntimeError(fmt::format("{}: {}", call, std::string(text, static_cast<size_t>(length))));
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &threads_), "MPI_Init_thread");
      owns_ = true;
    } else {
      MPI_Query_thread(&threads_);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    MPI_Comm local;
    check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local),
          "MPI_Comm_split_type");
    MPI_Comm_rank(local, &local_rank_);
    MPI_Comm_free(&local);
    watchdog_ = std::make_unique<Watchdog>(rank_, timeout_seconds);
  }
  /// A duplicate of `of`'s group (duplicate()).
  MpiCommunicator(const MpiCommunicator& of, MPI_Comm comm)
      : comm_(comm), rank_(of.rank_), size_(of.size_), local_rank_(of.local_rank_),
        threads_(of.threads_), yields_(true) {
    timeout_seconds = of.timeout_seconds;
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    watchdog_ = std::make_unique<Watchdog>(rank_, timeout_seconds);
  }
  ~MpiCommunicator() override {
    watchdog_.reset();
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (comm_ != MPI_COMM_WORLD && !finalized) MPI_Comm_free(&comm_);
    if (owns_ && !finalized) MPI_Finalize();
  }

  std::unique_ptr<Communicator> duplicate() override {
    if (threads_ < MPI_THREAD_MULTIPLE) return nullptr;
    MPI_Comm dup;
    check(MPI_Comm_dup(comm_, &dup), "MPI_Comm_dup");
    return std::make_unique<MpiCommunicator>(*this, dup);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  std::string_view backend() const override { return "mpi"; }

  void all_to_all_v(const void* send, const std::vector<int64_t>& send_counts,
                    const std::vector<int64_t>& send_offsets, void* recv,
                    const std::vector<int64_t>& recv_counts,
                    const std::vector<int64_t>& recv_offsets, std::string_view what) override {
    Watchdog::Scope scope(*watchdog_, what);
    ++stats.collectives;
    for (int j = 0; j < size_; ++j)
      if (j != rank_) stats.sent_bytes += send_counts.at(static_cast<size_t>(j));
    const auto sc = counts_of(send_counts, what), so = counts_of(send_offsets, what);
    const auto rc = counts_of(recv_counts, what), ro = counts_of(recv_offsets, what);
    MPI_Request request;
    check(MPI_Ialltoallv(send, sc.data(), so.data(), MPI_BYTE, recv, rc.data(), ro.data(),
                         MPI_BYTE, comm_, &request),
          what);
    complete(request, what);
  }

  void all_gather_v(const void* send, void* recv, const std::vector<int64_t>& counts,
                    const std::vector<int64_t>& offsets, std::string_view what) override {
    Watchdog::Scope scope(*watchdog_, what);
    ++stats.collectives;
    stats.sent_bytes += counts.at(static_cast<size_t>(rank_)) * (size_ - 1);
    const auto c = counts_of(counts, what), o = counts_of(offsets, what);
    // A rank's part already in place in `recv` is MPI_IN_PLACE (MPI forbids aliasing buffers).
    const bool in_place = send == static_cast<const char*>(recv) + o[static_cast<size_t>(rank_)];
    MPI_Request request;
    check(MPI_Iallgatherv(in_place ? MPI_IN_PLACE : send, c[static_cast<size_t>(rank_)], MPI_BYTE,
                          recv, c.data(), o.data(), MPI_BYTE, comm_, &request),
          what);
    complete(request, what);
  }

  void broadcast(void* data, int64_t bytes, int root, std::string_view what) override {
    Watchdog::Scope scope(*watchdog_, what);
    ++stats.collectives;
    if (rank_ == root) stats.sent_bytes += bytes * (size_ - 1);
    MPI_Request request;
    check(MPI_Ibcast(data, count_of(bytes, what), MPI_BYTE, root, comm_, &request), what);
    complete(request, what);
  }

  void barrier(std::string_view what) override {
    Watchdog::Scope scope(*watchdog_, what);
    MPI_Request request;
    check(MPI_Ibarrier(comm_, &request), what);
    complete(request, what);
  }

  /// Waits for `request`. The main group waits as MPI does (it polls: the fastest answer).
  /// A duplicate, whose thread runs beside the compute threads (a lane), polls a few times
  /// and then sleeps between polls, so waiting for a slower rank leaves the core to the
  /// computation it overlaps.
  void complete(MPI_Request& request, std::string_view what) {
    if (!yields_) {
      check(MPI_Wait(&request, MPI_STATUS_IGNORE), what);
      return;
    }
    for (int polls = 0;; ++polls) {
      int done = 0;
      check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), what);
      if (done) return;
      if (polls >= 64) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  [[noreturn]] void abort(const std::string& why) override {
    std::fprintf(stderr, "ein: rank %d: %s\n", rank_, why.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::_Exit(1);
  }

 private:
  MPI_Comm comm_ = MPI_COMM_WORLD;
  int rank_ = 0, size_ = 1, local_rank_ = 0;
  int threads_ = MPI_THREAD_SINGLE;  ///< the thread support MPI provides
  bool yields_ = false;              ///< a lane's group: sleep between polls (complete())
  bool owns_ = false;
  std::unique_ptr<Watchdog> watchdog_;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator() {
  return std::make_unique<MpiCommunicator>();
}

}  // namespace ein::dist

#else  // built without MPI

namespace ein::dist {

std::unique_ptr<Communicator> make_mpi_communicator() {
  return nullptr;
}

}  // namespace ein::dist

#endif
