// TokenLoader: window starts from Philox, batch assembly from the mapped file, and the
// prefetch thread. Prefetching changes when a batch is built, never what it holds: every
// batch is batch_at(k), a pure function of (file, options, k).
#include <ein/token_data.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>

#include <ein/errors.h>

#include "runtime/random.h"

namespace ein {
namespace {

// Philox counter word 2 tags the stream: uniform_at uses 0 and normal_at 1 (random.cpp);
// "data" in ASCII keeps window starts independent of initialisers drawn with the same seed.
constexpr uint32_t kDataStream = 0x64617461u;

// Checks the options; returns the end of the token range (token_end, -1 resolved).
int64_t check_options(const TokenFile& file, const LoaderOptions& o) {
  auto fail = [&](const std::string& what) {
    throw RuntimeError("token loader for '" + file.path() + "': " + what);
  };
  if (o.batch_size < 1) fail("batch_size must be >= 1, got " + std::to_string(o.batch_size));
  if (o.context < 1) fail("context must be >= 1, got " + std::to_string(o.context));
  if (o.vocab_size < 0) fail("vocab_size must be >= 0, got " + std::to_string(o.vocab_size));
  if (o.prefetch < 0) fail("prefetch must be >= 0, got " + std::to_string(o.prefetch));
  if (o.shards < 1 || o.shard < 0 || o.shard >= o.shards)
    fail("shard " + std::to_string(o.shard) + " of " + std::to_string(o.shards) +
         " is not one of [0, shards)");
  const int64_t end = o.token_end < 0 ? file.size() : o.token_end;
  if (o.token_begin < 0 || o.token_begin > end || end > file.size()) {
    fail("the token range [" + std::to_string(o.token_begin) + ", " + std::to_string(o.token_end) +
         ") is not inside the file's " + std::to_string(file.size()) + " tokens");
  }
  const bool whole = o.token_begin == 0 && end == file.size();
  if (end - o.token_begin < o.context + 1) {
    throw RuntimeError(
        "token file '" + file.path() + "' has " + std::to_string(end - o.token_begin) + " tokens" +
        (whole ? std::string()
               : " in [" + std::to_string(o.token_begin) + ", " + std::to_string(end) + ")") +
        ", fewer than one window of context + 1 = " + std::to_string(o.context + 1) + " tokens");
  }
  return end;
}

}  // namespace

int64_t random_window_start(uint64_t seed, int64_t batch, int64_t row, int64_t num_starts) {
  const auto k = static_cast<uint64_t>(batch);
  const PhiloxBlock out =
      philox4x32({static_cast<uint32_t>(k), static_cast<uint32_t>(k >> 32), kDataStream,
                  static_cast<uint32_t>(row)},
                 {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  const uint64_t x = (static_cast<uint64_t>(out[0]) << 32) | out[1];
  return static_cast<int64_t>(mul_high(x, static_cast<uint64_t>(num_starts)));
}

// The prefetch thread and its queue. The worker builds batches next_index, next_index + 1,
// ... while fewer than `depth` are ready, and stops after an error until set_position.
// set_position bumps `generation`, so a batch the worker was building for the old position
// is thrown away instead of queued.
struct TokenLoader::Prefetcher {
  struct Item {
    int64_t index;
    Batch batch;
    std::exception_ptr error;
  };

  Prefetcher(const TokenLoader& owner, int64_t start)
      : loader(owner), next_index(start), worker([this] { run(); }) {}

  ~Prefetcher() {
    {
      std::lock_guard lock(mu);
      stop = true;
    }
    cv.notify_all();
    worker.join();  // the worker finishes at most the one batch it is building
  }

  // Steps:
  //   1. wait until asked to stop, or there is room and a batch left to build;
  //   2. claim batch next_index under the lock, build it outside (the consumer keeps going);
  //   3. queue it, or its exception, unless set_position moved on meanwhile.
  void run() {
    const int64_t end = loader.num_batches();
    const auto depth = static_cast<size_t>(loader.options().prefetch);
    std::unique_lock lock(mu);
    for (;;) {
      cv.wait(lock, [&] {
        return stop || (!failed && ready.size() < depth && (end < 0 || next_index < end));
      });
      if (stop) return;
      Item item{next_index++, {}, nullptr};
      const uint64_t claimed_generation = generation;
      lock.unlock();
      try {
        item.batch = loader.batch_at(item.index);
      } catch (...) {
        item.error = std::current_exception();
      }
      lock.lock();
      if (claimed_generation != generation) continue;
      failed = item.error != nullptr;
      ready.push_back(std::move(item));
      cv.notify_all();
    }
  }

  // The batch `index`, waiting for the worker; rethrows the worker's error for it.
  Batch take(int64_t index) {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return !ready.empty(); });
    // The worker queues consecutive batches from the position set last, so the front is ours.
    if (ready.front().index != index)
      throw RuntimeError("TokenLoader: prefetch queue out of order");
    if (ready.front().error) std::rethrow_exception(ready.front().error);  // stays queued
    Batch b = std::move(ready.front().batch);
    ready.pop_front();
    cv.notify_all();
    return b;
  }

  void restart(int64_t index) {
    {
      std::lock_guard lock(mu);
      ready.clear();
      next_index = index;
      failed = false;
      ++generation;
    }
    cv.notify_all();
  }

  const TokenLoader& loader;
  std::mutex mu;
  std::condition_variable cv;  // both ways: a batch is ready / there is room or a restart
  std::deque<Item> ready;      // consecutive batches, the front one being the position's
  int64_t next_index;          // the next batch the worker claims
  uint64_t generation = 0;
  bool failed = false;
  bool stop = false;
  std::thread worker;  // last: it starts after every other member is constructed
};

TokenLoader::TokenLoader(std::shared_ptr<const TokenFile> file, LoaderOptions options)
    : file_(std::move(file)), options_(options) {
  if (!file_) throw RuntimeError("TokenLoader: no token file");
  end_ = check_options(*file_, options_);
  if (options_.check_all_tokens)
    file_->check_tokens(options_.vocab_size, options_.token_begin, end_);
  if (options_.prefetch > 0) prefetcher_ = std::make_unique<Prefetcher>(*this, 0);
}

TokenLoader::TokenLoader(const std::string& path, LoaderOptions options,
                         std::optional<TokenDType> dtype)
    : TokenLoader(std::make_shared<const TokenFile>(path, dtype), options) {}

TokenLoader::~TokenLoader() {
  prefetcher_.reset();
}

int64_t TokenLoader::num_windows() const {
  return (num_tokens() - 1) / options_.context;
}

int64_t TokenLoader::num_batches() const {
  if (options_.order == BatchOrder::random) return -1;
  const int64_t b = options_.batch_size * options_.shards;  // global batches
  return options_.drop_last ? num_windows() / b : (num_windows() + b - 1) / b;
}

bool TokenLoader::has_next() const {
  return options_.order == BatchOrder::random || position_ < num_batches();
}

Batch TokenLoader::batch_at(int64_t k) const {
  const int64_t B = options_.batch_size, T = options_.context;
  if (k < 0 || (options_.order == BatchOrder::sequential && k >= num_batches())) {
    throw RuntimeError("TokenLoader: batch " + std::to_string(k) + " is outside [0, " +
                       (options_.order == BatchOrder::random ? std::string("inf")
                                                             : std::to_string(num_batches())) +
                       ") for token file '" + file_->path() + "'");
  }
  // Sequential: window w = k * G + s * B + r starts at w * T (G = shards * B rows in a global
  // batch, s the shard); the last batch may hold fewer rows.
  const int64_t G = B * options_.shards, first = options_.shard * B;
  const int64_t rows = options_.order == BatchOrder::random
                           ? B
                           : std::clamp<int64_t>(num_windows() - k * G - first, 0, B);
  // Random: starts in [0, n - T - 1], as torch.randint(len(data) - T) in the lecture.
  const int64_t num_starts = num_tokens() - T;
  Batch batch{empty({rows, T}, DType::i64), empty({rows, T}, DType::i64), k};
  auto* x = batch.x.data<int64_t>();  // x: (b t)
  auto* y = batch.y.data<int64_t>();  // y: (b t)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t start =
        options_.token_begin + (options_.order == BatchOrder::random
                                    ? random_window_start(options_.seed, k, first + r, num_starts)
                                    : (k * G + first + r) * T);
    file_->read(start, T, x + r * T, options_.vocab_size);
    file_->read(start + 1, T, y + r * T, options_.vocab_size);
  }
  return batch;
}

Batch TokenLoader::next_batch() {
  if (!has_next()) {
    throw RuntimeError("TokenLoader: the sequential pass over '" + file_->path() + "' has " +
                       std::to_string(num_batches()) +
                       " batches and all were taken; set_position(0) starts it again");
  }
  Batch b = prefetcher_ ? prefetcher_->take(position_) : batch_at(position_);
  ++position_;
  return b;
}

void TokenLoader::set_position(int64_t k) {
  if (k < 0 || (options_.order == BatchOrder::sequential && k > num_batches())) {
    throw RuntimeError("TokenLoader::set_position: " + std::to_string(k) + " is outside [0, " +
                       (options_.order == BatchOrder::random ? std::string("inf")
                                                             : std::to_string(num_batches())) +
                       "] for token file '" + file_->path() + "'");
  }
  position_ = k;
  if (prefetcher_) prefetcher_->restart(k);
}

}  // namespace ein
