#include "api/train_eval.h"

#include <algorithm>

#include <ein/autograd.h>
#include <ein/diagnostic.h>
#include <ein/flop_counter.h>
#include <fmt/format.h>

#include "runtime/dist/communicator.h"
#include "runtime/dist/gradient_sync.h"
#include "runtime/random.h"

namespace ein::detail {
namespace {

/// Random-order evaluation batches are drawn from their own stream of the run's seed, so that
/// held-out windows of the training file are not the training batches' own.
constexpr uint64_t kEvalStream = 0x6576616c;  // "eval"
/// Batches an evaluation scores unless TrainOptions::eval_batches says: in random order, and
/// at most in sequential order (nanoGPT's eval_iters), so that a big held-out file does not
/// make every evaluation a pass over it.
constexpr int64_t kRandomEvalBatches = 20;
constexpr int64_t kMaxSequentialEvalBatches = 200;

/// The batches an evaluation of o.eval_data scores, given one pass's (-1: random order).
/// UserError for a pass without one whole batch.
int64_t count_batches(int64_t pass, const TrainOptions& o, int ranks) {
  if (o.eval_every < 0) throw UserError(fmt::format("eval_every {} is negative", o.eval_every));
  if (o.eval_batches < 0)
    throw UserError(fmt::format("eval_batches {} is negative (0: the default)", o.eval_batches));
  const TokenDataOptions& d = *o.eval_data;
  if (pass == 0) {
    const std::string message = fmt::format(
        "eval_data '{}': one pass holds fewer windows of {} tokens than a batch of {}{}; give a "
        "smaller batch or more held-out text",
        o.eval_data_path.empty() ? d.path : o.eval_data_path, d.context, d.batch * ranks,
        ranks > 1 ? fmt::format(" ({} rows on each of {} ranks)", d.batch, ranks) : "");
    // From the script's setting: file:line:col and a caret under it.
    if (o.eval_data_path.empty() && d.source) throw UserError(message, d.source, d.range);
    throw UserError(message);
  }
  const int64_t wanted = o.eval_batches > 0 ? o.eval_batches
                         : pass > 0         ? kMaxSequentialEvalBatches
                                            : kRandomEvalBatches;
  return pass > 0 ? std::min(wanted, pass) : wanted;
}

}  // namespace

HeldOutLoss::HeldOutLoss(Trainable& model, const TrainOptions& o, int rank, int ranks)
    : model_(model), every_(o.eval_every), ranks_(ranks) {
  data_ = std::make_unique<TrainBatches>(model, o.eval_data, o.eval_data_path,
                                         mix_seeds(o.seed, kEvalStream), o.device, rank, ranks,
                                         "eval_data");
  const TokenDataOptions& d = *o.eval_data;
  batches_ = count_batches(data_->pass_batches(), o, ranks);
  tokens_ = batches_ * d.batch * ranks * d.context;
  // The first batch scored now: a held-out batch the loss does not take (its declared batch
  // or context) fails before the first step, not after eval_every of them.
  NoGrad no_grad;
  data_->seek(0);
  try {
    model_.eval_loss(data_->next(0));
  } catch (UserError& e) {
    const std::string what = fmt::format("the tensor is a batch of eval_data ({} x {} tokens)",
                                         d.batch, d.context);
    if (o.eval_data_path.empty() && d.source)
      e.note_at(what + ", set here", d.source, d.range);
    else
      e.note(what + ", from --eval-data");
    throw;
  }
}

double HeldOutLoss::score(dist::Communicator& comm, bool fetch) {
  NoGrad no_grad;
  FlopCounter counter;
  std::optional<dist::FetchScope> fetching;
  if (fetch) fetching.emplace();
  data_->seek(0);  // the same batches every time
  double sum = 0;
  for (int64_t k = 0; k < batches_; ++k)
    sum += model_.eval_loss(data_->next(k)).item();
  const double mean = sum / static_cast<double>(batches_);
  flops_ = static_cast<double>(counter.totals().flops - counter.phase(CostPhase::recompute).flops);
  if (ranks_ > 1) flops_ = comm.sum(flops_, "the held-out loss's FLOPs");
  return ranks_ > 1 ? comm.sum(mean, "the held-out loss") / ranks_ : mean;
}

}  // namespace ein::detail

namespace ein {

int64_t held_out_batches(const TrainOptions& o, int ranks) {
  if (!o.eval_data) return 0;
  const auto loader = detail::open_tokens(*o.eval_data, o.eval_data_path, 0, 0, ranks, "eval_data");
  return detail::count_batches(loader->num_batches(), o, ranks);
}

}  // namespace ein
