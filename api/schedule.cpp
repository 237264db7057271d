// The learning-rate schedules of include/ein/schedule.h: arithmetic on the step, no state.
#include <ein/schedule.h>

#include <cmath>
#include <numbers>

#include <ein/errors.h>
#include <fmt/format.h>

namespace ein::optim {

double constant_lr(int64_t step, double lr) {
  if (step < 0) throw RuntimeError(fmt::format("constant_lr: step must be >= 0, got {}", step));
  return lr;
}

double cosine_lr(int64_t step, const CosineSchedule& s) {
  if (step < 0 || s.warmup_iters < 0 || s.lr_decay_iters < s.warmup_iters)
    throw RuntimeError(fmt::format(
        "cosine_lr: needs step >= 0 and 0 <= warmup_iters <= lr_decay_iters, got step {}, "
        "warmup_iters {}, lr_decay_iters {}",
        step, s.warmup_iters, s.lr_decay_iters));
  if (step < s.warmup_iters)
    return s.lr * static_cast<double>(step + 1) / static_cast<double>(s.warmup_iters + 1);
  if (step > s.lr_decay_iters) return s.min_lr;
  const int64_t span = s.lr_decay_iters - s.warmup_iters;
  const double ratio =
      span == 0 ? 0.0 : static_cast<double>(step - s.warmup_iters) / static_cast<double>(span);
  const double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * ratio));
  return s.min_lr + coeff * (s.lr - s.min_lr);
}

}  // namespace ein::optim
