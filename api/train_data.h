// The Trainer's batches (api/trainer.cpp): token windows from a TokenDataOptions file (text
// files become cached byte-token files first), or the Trainable's own batch(). On a GPU, token
// batches go through page-locked staging buffers and asynchronous copies. Internal to api/.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <ein/device.h>
#include <ein/tensor.h>
#include <ein/token_data.h>
#include <ein/trainer.h>

namespace ein::detail {

/// Pinned staging of host batches onto a GPU (train_data.cpp).
class PinnedFeeder;

/// The loader of `spec` (the file at `override_path` when that is not empty; a text file as
/// its cached byte tokens) for shard `rank` of `ranks`; `setting` is the train block's name
/// for it ("data", "eval_data") in errors. UserError for a missing, unreadable or too short
/// file.
std::unique_ptr<TokenLoader> open_tokens(const TokenDataOptions& spec,
                                         const std::string& override_path, uint64_t seed,
                                         int rank, int ranks, std::string_view setting);

/// Where batch k of a run comes from.
class TrainBatches {
 public:
  /// Opens `data` (with `override_path` replacing its path when not empty) for `device`;
  /// without `data`, batches come from `model.batch()`. UserError for a missing or unreadable
  /// file, or an override without data.
  /// Data parallel: this rank reads shard `rank` of `ranks` (token windows: its rows of each
  /// global batch; batch(): micro-steps k·ranks + rank). `setting` names the data in errors
  /// (the train block's "data" or "eval_data").
  TrainBatches(Trainable& model, const std::optional<TokenDataOptions>& data,
               const std::string& override_path, uint64_t seed, Device device, int rank = 0,
               int ranks = 1, std::string_view setting = "data");
  ~TrainBatches();
  /// Continues at micro-batch k (a token loader's position; batch() is a function of k).
  void seek(int64_t k);
  /// Batches in one sequential pass over the file (this rank's rows of each); -1 in random
  /// order or without a file.
  int64_t pass_batches() const;
  /// The batch of micro-step k, on the device.
  std::vector<Tensor> next(int64_t k);

  TrainBatches(const TrainBatches&) = delete;
  TrainBatches& operator=(const TrainBatches&) = delete;

 private:
  Trainable& model_;                      ///< batch() when there is no loader
  int rank_ = 0, ranks_ = 1;               ///< the data-parallel shard
  std::unique_ptr<TokenLoader> loader_;    ///< token windows (null: the model's batches)
  std::unique_ptr<PinnedFeeder> feeder_;   ///< staging onto a GPU (null on the CPU)
};

}  // namespace ein::detail
