// Learning-rate schedules as plain functions of the step: the training loop asks for the
// rate of step t and writes it into the optimizer's options (optimizers pass hyper-parameters
// to their kernels at run time, so a changing rate compiles nothing). No scheduler objects
// that hold an optimizer, unlike torch.optim.lr_scheduler.
//
//   const ein::optim::CosineSchedule s{.lr = 6e-4, .min_lr = 6e-5, .warmup_iters = 2000,
//                                      .lr_decay_iters = 600000};
//   for (int64_t it = 0; it < steps; ++it) { opt.options().lr = ein::optim::cosine_lr(it, s); ... }
#pragma once

#include <cstdint>

namespace ein::optim {

/// The same rate at every step (nanoGPT with decay_lr = False).
double constant_lr(int64_t step, double lr);

/// Linear warmup then cosine decay to a floor: nanoGPT's train.py get_lr settings.
struct CosineSchedule {
  double lr = 6e-4;                 ///< the peak rate, reached at the end of warmup
  double min_lr = 6e-5;             ///< the floor after lr_decay_iters
  int64_t warmup_iters = 2000;      ///< steps of linear warmup (0: none)
  int64_t lr_decay_iters = 600000;  ///< the step where the cosine reaches min_lr (>= warmup)
};

/// nanoGPT's get_lr(it) (karpathy/nanoGPT train.py, the version with (it + 1)):
///   it < warmup:          lr · (it + 1) / (warmup + 1)
///   it > lr_decay_iters:  min_lr
///   otherwise:            min_lr + ½ (1 + cos(π r)) (lr − min_lr),
///                         r = (it − warmup) / (lr_decay_iters − warmup)  (0 when they are equal)
/// Throws RuntimeError for a negative step, negative warmup or lr_decay_iters < warmup_iters.
double cosine_lr(int64_t step, const CosineSchedule& schedule);

}  // namespace ein::optim
