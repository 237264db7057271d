// A lane: a second group of a job's ranks (Communicator::duplicate()) with a thread of its
// own, so collectives run beside the caller's work: the gradient exchange while the backward
// computes (gradient_sync.h), as DDP's buckets run beside PyTorch's autograd. Tasks run one at
// a time in the order they were submitted; every rank must submit the same collectives in the
// same order, as for any group, and does: they are submitted from the main thread at points of
// the program every rank passes alike (a gradient became final, a parameter is about to be
// read), so the lane adds no ordering of its own and results stay bitwise reproducible.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "runtime/dist/communicator.h"

namespace ein::dist {

class Lane {
 public:
  using Task = std::function<void(Communicator&)>;

  explicit Lane(std::unique_ptr<Communicator> comm);
  /// Waits for every submitted task (a failure then is dropped: there is no caller left).
  ~Lane();
  Lane(const Lane&) = delete;
  Lane& operator=(const Lane&) = delete;

  /// Runs `task` on the lane's thread after every task submitted before it; its ticket.
  uint64_t submit(Task task);
  /// Blocks until task `ticket` and every earlier one have run; rethrows the first failure
  /// (the lane is unusable after one: a group whose collectives failed cannot line up again).
  void wait(uint64_t ticket);
  /// wait() for everything submitted so far.
  void wait_all();
  /// Payload bytes the lane's collectives sent so far (Communicator::stats of its group).
  int64_t sent_bytes() const { return sent_.load(std::memory_order_relaxed); }

 private:
  void run();

  std::unique_ptr<Communicator> comm_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::deque<Task> queue_;
  uint64_t submitted_ = 0, finished_ = 0;
  bool stop_ = false;
  std::exception_ptr failure_;
  std::atomic<int64_t> sent_{0};
  std::thread thread_;
};

}  // namespace ein::dist
