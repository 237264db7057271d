// Gradient clipping by global norm (include/ein/grad_clip.h). Per gradient: one map kernel for
// the squares (in the compute type, so bf16 gradients are squared in f32) and one sum; the
// per-parameter sums are stacked, summed in float64 and only that total is read on the host.
// Clipping scales each gradient in place in one pass (exec/fused_ops.h's scale_in_place).
#include <ein/grad_clip.h>

#include <cmath>

#include <ein/errors.h>
#include <ein/ops.h>
#include <fmt/format.h>

#include <ein/autograd.h>

#include "exec/fused_ops.h"

namespace ein::optim {
namespace {

// The type a gradient's squares are computed in (as map computes: f64 or f32).
DType compute_dtype(const Tensor& g) {
  return g.dtype() == DType::f64 ? DType::f64 : DType::f32;
}

}  // namespace

double grad_norm(const std::vector<Tensor>& params) {
  NoGrad no_grad;
  std::vector<Tensor> sums;  // one float64 0-dim sum of squares per gradient
  for (const Tensor& p : params) {
    const Tensor g = p.defined() ? p.grad() : Tensor();
    if (!g.defined() || g.numel() == 0) continue;
    const Tensor one = full({}, 1.0, compute_dtype(g), g.device());
    const Tensor squares = map("g[n], one[] -> square(g * one)", {g.reshape({-1}), one});
    sums.push_back(cast(reduce(squares, "n ->", "sum"), DType::f64));
  }
  if (sums.empty()) return 0.0;
  return std::sqrt(reduce(rearrange(sums, "n -> n"), "n ->", "sum").item());
}

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm,
                       bool error_if_nonfinite) {
  const double total = grad_norm(params);
  if (!std::isfinite(total) && error_if_nonfinite)
    throw RuntimeError(fmt::format(
        "clip_grad_norm_: the total norm of the gradients of {} parameters is {}, so they "
        "cannot be clipped; skip this step, or pass error_if_nonfinite = false",
        params.size(), total));
  clip_grads_with_norm_(params, max_norm, total);
  return total;
}

void clip_grads_with_norm_(const std::vector<Tensor>& params, double max_norm, double total) {
  // torch: clip_coef = max_norm / (total + 1e-6), clamped to at most 1 (NaN stays NaN).
  const double coef = max_norm / (total + 1e-6);
  if (coef >= 1.0) return;
  NoGrad no_grad;
  for (const Tensor& p : params) {
    const Tensor g = p.defined() ? p.grad() : Tensor();
    if (!g.defined() || g.numel() == 0) continue;
    scale_in_place(g.detach(), coef);
  }
}

}  // namespace ein::optim
