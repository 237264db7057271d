// The collectives' watchdog (watchdog.h).
#include "runtime/dist/watchdog.h"

#include <cstdio>
#include <cstdlib>

namespace ein::dist {

Watchdog::Watchdog(int rank, const double& timeout, std::function<void()> before_exit)
    : rank_(rank), timeout_(timeout), before_exit_(std::move(before_exit)) {
  thread_ = std::thread([this] { watch(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

Watchdog::Scope::Scope(Watchdog& w, std::string_view what) : w_(w) {
  std::lock_guard lock(w_.mutex_);
  w_.what_ = std::string(what);
  w_.since_ = std::chrono::steady_clock::now();
  w_.active_ = true;
}

Watchdog::Scope::~Scope() {
  std::lock_guard lock(w_.mutex_);
  w_.active_ = false;
}

void Watchdog::watch() {
  std::unique_lock lock(mutex_);
  while (!stop_) {
    wake_.wait_for(lock, std::chrono::milliseconds(100));
    if (!active_) continue;
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - since_).count();
    if (waited <= timeout_) continue;
    std::fprintf(stderr,
                 "ein: rank %d: '%s' waited %.0f s for the other ranks (the limit is %.0f s, "
                 "EIN_DIST_TIMEOUT): a rank died, hangs, or is running a different step; "
                 "stopping the job (the last checkpoint written is kept)\n",
                 rank_, what_.c_str(), waited, timeout_);
    std::fflush(stderr);
    if (before_exit_) before_exit_();
    std::_Exit(1);  // no MPI call from this thread; mpirun ends the other ranks
  }
}

}  // namespace ein::dist
