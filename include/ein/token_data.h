// Training and evaluation batches from a token file (token_file.h), like the lecture's
// get_batch: x (B, T) holds B windows of T tokens and y (B, T) the same windows shifted by
// one token. Random batches are a pure function of (seed, batch index), so a run resumed at
// batch k continues exactly; a background thread prepares the next batches while a training
// step runs. Batches are CPU int64 tensors; copying them to a GPU is the caller's business.
//
//   ein::TokenLoader data("corpus.u16", {.batch_size = 8, .context = 64, .seed = 1,
//                                        .vocab_size = ein::kByteVocabSize});
//   for (int step = 0; step < steps; ++step) {
//     ein::Batch b = data.next_batch();     // b.x, b.y: (B T) int64
//     ...
//   }
//   int64_t resume_at = data.position();    // store in the checkpoint; set_position() later
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <ein/tensor.h>
#include <ein/token_file.h>

namespace ein {

/// Which windows batch k holds.
enum class BatchOrder {
  random,     ///< B uniformly random windows per batch, forever (training)
  sequential  ///< consecutive non-overlapping windows, one pass over the file (evaluation)
};

/// What a TokenLoader produces and how.
struct LoaderOptions {
  int64_t batch_size = 1;  ///< B: windows per batch (>= 1)
  int64_t context = 1;     ///< T: tokens per window (>= 1); the file needs at least T + 1
  uint64_t seed = 0;       ///< random order: batch k depends only on (seed, k)
  /// Tokens must lie in [0, vocab_size); 0 checks only that none is negative. Checked
  /// lazily, on the windows each batch reads, unless check_all_tokens.
  int64_t vocab_size = 0;
  bool check_all_tokens = false;  ///< also scan all tokens of the range once, at open
  BatchOrder order = BatchOrder::random;
  /// Sequential order: leave out a last batch with fewer than B windows (so every batch is
  /// (B, T)); otherwise it is kept with fewer rows.
  bool drop_last = false;
  /// Batches prepared ahead on a background thread (0: none; next_batch() builds its batch).
  /// The batches are the same either way.
  int prefetch = 2;
  /// The tokens used: [token_begin, token_end) of the file (token_end -1: to the end), so
  /// one file can hold a training and a validation split (nanoGPT's 90/10). Windows and
  /// their starts below are relative to this range.
  int64_t token_begin = 0;
  int64_t token_end = -1;  ///< exclusive; -1: the file's size
  /// Data parallel: this loader is shard `shard` of `shards` (a rank of a distributed run).
  /// Batch k holds rows [shard·B, (shard + 1)·B) of the global batch k of shards·B rows, so
  /// the shards' streams are disjoint and together equal one loader with batch shards·B.
  int64_t shard = 0;
  int64_t shards = 1;
};

/// One batch: inputs and next-token targets. x[r][t] = file[s_r + t], y[r][t] = file[s_r + t
/// + 1] for the window start s_r of row r.
struct Batch {
  Tensor x;           ///< x: (b t) int64, contiguous, on the CPU
  Tensor y;           ///< y: (b t) int64, x shifted left by one token
  int64_t index = 0;  ///< the batch's number k
};

/// Start of row `row` of random batch `batch`: uniform in [0, num_starts), a pure function
/// of (seed, batch, row). Philox4x32-10 (random.h) on the counter (batch, "data", row) gives
/// 64 random bits x; the start is floor(x * num_starts / 2^64) (Lemire 2019 without the
/// rejection step: the bias is below num_starts / 2^64).
int64_t random_window_start(uint64_t seed, int64_t batch, int64_t row, int64_t num_starts);

/// Batches of windows from a memory-mapped token file, with a read/write position (the
/// number of the batch next_batch() returns next) and optional prefetching. Not copyable or
/// movable (the prefetch thread refers to it); one consumer thread at a time.
class TokenLoader {
 public:
  /// A loader over an open file, shared so several loaders (train, eval) can use one map.
  /// A RuntimeError for bad options, a file with fewer than context + 1 tokens, or (with
  /// check_all_tokens) a token outside the vocabulary.
  TokenLoader(std::shared_ptr<const TokenFile> file, LoaderOptions options);
  /// Opens `path` (TokenFile's rules for the dtype and the errors), then as above.
  TokenLoader(const std::string& path, LoaderOptions options,
              std::optional<TokenDType> dtype = std::nullopt);
  /// Stops and joins the prefetch thread; batches not yet taken are dropped.
  ~TokenLoader();
  TokenLoader(const TokenLoader&) = delete;
  TokenLoader& operator=(const TokenLoader&) = delete;

  /// Batch position(), then advances the position by one. An error building it (a token
  /// outside the vocabulary) is thrown here, also when it happened on the prefetch thread;
  /// the position then stays, and calling again throws again. Past the end of a sequential
  /// pass: a RuntimeError (see has_next()).
  Batch next_batch();
  /// Whether next_batch() has a batch to return (always in random order).
  bool has_next() const;
  /// Batch k, computed directly, whatever the position; pure and thread-safe.
  Batch batch_at(int64_t k) const;
  /// The number of the batch next_batch() returns next (batches taken so far).
  int64_t position() const { return position_; }
  /// Moves to batch k (k >= 0; sequential order: k <= num_batches()); prefetched batches
  /// are dropped and prefetching restarts at k.
  void set_position(int64_t k);
  /// Batches in one sequential pass; -1 in random order (endless).
  int64_t num_batches() const;
  /// Windows in one sequential pass: (n - 1) / T for the n tokens of the range; the last
  /// (n - 1) % T tokens are never an x token of any window.
  int64_t num_windows() const;
  /// n: the number of tokens in [token_begin, token_end).
  int64_t num_tokens() const { return end_ - options_.token_begin; }
  /// The token file.
  const TokenFile& file() const { return *file_; }
  /// The options it was made with.
  const LoaderOptions& options() const { return options_; }

 private:
  struct Prefetcher;  // token_data.cpp: the background thread and its queue

  std::shared_ptr<const TokenFile> file_;
  LoaderOptions options_;
  int64_t end_ = 0;  ///< options_.token_end resolved: an exclusive token index of the file
  int64_t position_ = 0;
  std::unique_ptr<Prefetcher> prefetcher_;  ///< null when options_.prefetch == 0
};

}  // namespace ein
