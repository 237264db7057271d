// Gradient clipping by global norm, torch.nn.utils.clip_grad_norm_ (norm_type 2, foreach
// semantics): the norm is computed with ein ops where the gradients live, and only the one
// total comes back to the host. Other norm types and clip_grad_value_ are not here.
//
//   loss.backward();
//   const double norm = ein::optim::clip_grad_norm_(params, /*max_norm=*/1.0);
//   opt.step();
#pragma once

#include <vector>

#include <ein/tensor.h>

namespace ein::optim {

/// The 2-norm of all the gradients of `params` together, sqrt(Σ_p Σ_i g²), accumulated in
/// float64 across parameters (each gradient's sum of squares in its compute type: f64 for f64,
/// else f32). Parameters without a gradient are skipped; 0 when none has one.
double grad_norm(const std::vector<Tensor>& params);

/// torch.nn.utils.clip_grad_norm_(params, max_norm): returns the total norm before clipping
/// and multiplies every gradient in place by min(1, max_norm / (total + 1e-6)), the factor
/// rounded to each gradient's compute type. A non-finite total is returned as is; it throws
/// RuntimeError when `error_if_nonfinite`, else (like torch) the gradients are scaled by the
/// non-finite factor (0 for an infinite total, NaN for a NaN one), so the caller must check the
/// result and skip the step.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm,
                       bool error_if_nonfinite = false);

/// torch.nn.utils.clip_grads_with_norm_: the scaling of clip_grad_norm_() with a total norm
/// computed elsewhere (a distributed run's global norm over every rank's shard).
void clip_grads_with_norm_(const std::vector<Tensor>& params, double max_norm, double total_norm);

}  // namespace ein::optim
