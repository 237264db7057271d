// The Trainer's held-out loss (TrainOptions::eval_data): the same batches scored by
// Trainable::eval_loss() after every eval_every steps, with no gradients and nothing the
// training reads changed, so a run trains to the same bits with or without it. Internal to api/.
#pragma once

#include <cstdint>
#include <memory>

#include <ein/trainer.h>

#include "api/train_data.h"

namespace ein::dist {
class Communicator;
}

namespace ein::detail {

class HeldOutLoss {
 public:
  /// Opens options.eval_data (with options.eval_data_path in place of its path) for this rank
  /// and decides how many batches an evaluation scores (TrainOptions::eval_batches), then
  /// scores the first batch once, so that a batch the loss does not take fails before the
  /// first step (made before ZeRO 3 shards the parameters). UserError for a missing file, a
  /// sequential pass without one whole batch, or such a batch.
  HeldOutLoss(Trainable& model, const TrainOptions& options, int rank, int ranks);
  /// The mean eval_loss() over the batches, every rank's rows together (each rank scores its
  /// own rows of every batch; the ranks' means are averaged). A loss that is not finite is
  /// returned as it is: a validation loss of NaN is reported, not fatal. `fetch`: ZeRO 3, the
  /// forward fetches the parameters other ranks hold.
  double score(dist::Communicator& comm, bool fetch);
  /// The FLOPs the last score() counted (all ranks'): the loss's forward over its batches.
  double flops() const { return flops_; }
  /// Batches an evaluation scores (this rank's rows of each), and their tokens, all ranks'.
  int64_t batches() const { return batches_; }
  int64_t tokens() const { return tokens_; }
  /// Whether the evaluation runs after `step` of a run to `steps`.
  bool due(int64_t step, int64_t steps) const {
    return step == steps || (every_ > 0 && step % every_ == 0);
  }

 private:
  Trainable& model_;
  std::unique_ptr<TrainBatches> data_;
  int64_t batches_ = 0, tokens_ = 0, every_ = 0;
  double flops_ = 0;
  int ranks_ = 1;
};

}  // namespace ein::detail
