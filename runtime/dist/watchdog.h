// The collectives' watchdog (communicator.h): a thread that ends the process when the
// collective it watches outlives the timeout, so no rank waits forever for one that died,
// hangs or took another path. The launcher (mpirun) then ends the other ranks: Open MPI aborts
// a job one of whose processes exits without MPI_Finalize. Used by the MPI and NCCL groups.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

namespace ein::dist {

class Watchdog {
 public:
  /// `timeout` is read at each check (Communicator::timeout_seconds may change after start).
  /// `before_exit` runs on the watchdog's thread just before the process ends (NCCL: abort
  /// the communicator, so the GPU stops waiting too).
  Watchdog(int rank, const double& timeout, std::function<void()> before_exit = {});
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  /// Watches the collective `what` while it lives.
  class Scope {
   public:
    Scope(Watchdog& w, std::string_view what);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Watchdog& w_;
  };

 private:
  void watch();

  int rank_;
  const double& timeout_;
  std::function<void()> before_exit_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false, active_ = false;
  std::string what_;
  std::chrono::steady_clock::time_point since_;
  std::thread thread_;
};

}  // namespace ein::dist
