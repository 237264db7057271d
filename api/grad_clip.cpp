// Gradient clipping by global norm (include/ein/grad_clip.h). Per gradient: one kernel reads
// it once and sums its squares per row of 4,096 elements (in the compute type, so bf16
// gradients are squared in f32; no temporary of the gradient's size), the row sums are added in
// float64, and only the total of all parameters is read on the host.
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

/// Elements per row of a gradient's sum of squares: rows are what the kernel's threads split,
/// and each row's f32 sum is short enough to stay accurate.
constexpr int64_t kRow = 4096;

/// Appends Σ g² of one gradient to `sums` as float64 0-dim tensors where g lives (one per
/// part: the rows of kRow, and the remainder).
void add_sum_of_squares(const Tensor& g, std::vector<Tensor>& sums) {
  const Tensor flat = g.reshape({-1});  // a view of a contiguous gradient
  const int64_t n = flat.numel(), rows = n / kRow, body = rows * kRow;
  if (rows > 0)
    sums.push_back(reduce(row_sum_of_squares(flat.slice(0, 0, body).view({rows, kRow})), "r ->", "sum"));
  if (body < n)
    sums.push_back(row_sum_of_squares(flat.slice(0, body, n).view({1, n - body})).reshape({}));
}

}  // namespace

double grad_norm(const std::vector<Tensor>& params) {
  NoGrad no_grad;
  std::vector<Tensor> sums;  // float64 0-dim sums of squares, one or two per gradient
  for (const Tensor& p : params) {
    const Tensor g = p.defined() ? p.grad() : Tensor();
    if (!g.defined() || g.numel() == 0) continue;
    add_sum_of_squares(g.detach(), sums);
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
