// SIGINT and SIGTERM for a training run, received by one watcher thread with sigwait()
// instead of interrupting whichever compute thread the kernel picks. A handler that runs on
// a compute thread pushes a signal frame onto that thread's stack in the middle of a GEMM or a
// JIT kernel; with signals blocked in every thread but the watcher, no compute thread is ever
// interrupted (docs/training.md, "Signals"). A second signal ends the process at once: the
// last checkpoint is safe because checkpoints are written to a temporary file and renamed.
#pragma once

#include <csignal>
#include <thread>

namespace ein::detail {

/// The watcher, alive for one Trainer::fit(): blocks SIGINT/SIGTERM in the calling thread (so
/// every thread started from now on inherits the block), starts the watcher, and installs a
/// handler that only sets the same flag, for threads started earlier that did not block them.
class StopSignals {
 public:
  StopSignals();
  /// Stops the watcher, restores the handlers and the calling thread's signal mask.
  ~StopSignals();
  /// The first SIGINT or SIGTERM received (0: none yet).
  static int received();

  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  sigset_t previous_mask_;
  struct sigaction previous_int_ {}, previous_term_ {};
  std::thread watcher_;
};

}  // namespace ein::detail
