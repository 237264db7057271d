// StopSignals (stop_signals.h). Steps:
//   1. block SIGINT and SIGTERM in the calling thread; threads it starts inherit the mask;
//   2. install a flag-setting handler, for threads started before step 1 that did not block;
//   3. the watcher sigwait()s: the first signal sets the flag (fit() stops after the current
//      step), a second one _exit()s with 128 + signal, as a shell expects of an interrupted
//      program; the destructor wakes it with a thread-directed SIGTERM after setting closing.
#include "api/stop_signals.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>

namespace ein::detail {
namespace {

std::atomic<int> g_received{0};
std::atomic<bool> g_closing{false};

void on_signal(int sig) {
  int none = 0;
  if (!g_received.compare_exchange_strong(none, sig)) _exit(128 + sig);  // the second one
}

sigset_t stop_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

void watch() {
  const sigset_t set = stop_set();
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    if (g_closing.load()) return;
    on_signal(sig);
  }
}

}  // namespace

StopSignals::StopSignals() {
  g_received = 0;
  g_closing = false;
  const sigset_t set = stop_set();
  pthread_sigmask(SIG_BLOCK, &set, &previous_mask_);
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, &previous_int_);
  sigaction(SIGTERM, &action, &previous_term_);
  watcher_ = std::thread(watch);
}

StopSignals::~StopSignals() {
  g_closing = true;
  pthread_kill(watcher_.native_handle(), SIGTERM);  // thread-directed: only the watcher
  watcher_.join();
  sigaction(SIGINT, &previous_int_, nullptr);
  sigaction(SIGTERM, &previous_term_, nullptr);
  pthread_sigmask(SIG_SETMASK, &previous_mask_, nullptr);
}

int StopSignals::received() {
  return g_received.load();
}

}  // namespace ein::detail
