// A second group of ranks with a thread of its own (lane.h).
#include "runtime/dist/lane.h"

#include <utility>

namespace ein::dist {

Lane::Lane(std::unique_ptr<Communicator> comm) : comm_(std::move(comm)) {
  thread_ = std::thread([this] { run(); });
}

Lane::~Lane() {
  {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return finished_ == submitted_; });
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

uint64_t Lane::submit(Task task) {
  uint64_t ticket;
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(task));
    ticket = ++submitted_;
  }
  wake_.notify_one();
  return ticket;
}

void Lane::wait(uint64_t ticket) {
  std::unique_lock lock(mutex_);
  done_.wait(lock, [&] { return finished_ >= ticket || failure_; });
  if (failure_) std::rethrow_exception(failure_);
}

void Lane::wait_all() {
  uint64_t last;
  {
    std::lock_guard lock(mutex_);
    last = submitted_;
  }
  wait(last);
}

void Lane::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_, and nothing left
    Task task = std::move(queue_.front());
    queue_.pop_front();
    const bool failed = failure_ != nullptr;
    lock.unlock();
    std::exception_ptr error;
    if (!failed) {  // after a failure the group is out of step: run nothing more on it
      try {
        task(*comm_);
      } catch (...) {
        error = std::current_exception();
      }
      sent_.store(comm_->stats.sent_bytes, std::memory_order_relaxed);
    }
    lock.lock();
    if (error && !failure_) failure_ = error;
    ++finished_;
    done_.notify_all();
  }
}

}  // namespace ein::dist
