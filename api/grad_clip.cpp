// Gradient clipping by global norm (include/ein/grad_clip.h). Per gradient: one kernel reads
// it once and sums its squares per row of 4,096 elements (in the compute type, so bf16
// gradients are squared in f32; no temporary of the gradient's size) into its slots of one
// float64 tensor of every gradient's row sums; one reduction adds them in float64, and only
// that total is read on the host: a kernel per gradient and one more, a wait per device.
// Clipping scales each gradient in place in one pass (exec/fused_ops.h's scale_in_place).
#include <ein/grad_clip.h>

#include <algorithm>
#include <cmath>
#include <vector>

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

/// The row sums a gradient of `n` elements takes: its rows of kRow, and the remainder.
int64_t parts_of(int64_t n) {
  return n / kRow + (n % kRow != 0);
}

/// Σ g² over `grads` (flat views, all on one device), in float64.
double sum_of_squares(const std::vector<Tensor>& grads) {
  int64_t parts = 0;
  for (const Tensor& g : grads)
    parts += parts_of(g.numel());
  const Tensor sums = empty({parts}, DType::f64, grads.front().device());
  int64_t at = 0;
  for (const Tensor& flat : grads) {
    const int64_t n = flat.numel(), rows = n / kRow, body = rows * kRow;
    if (rows > 0)
      row_sum_of_squares(flat.slice(0, 0, body).view({rows, kRow}), sums.slice(0, at, at + rows));
    at += rows;
    if (body == n) continue;
    row_sum_of_squares(flat.slice(0, body, n).view({1, n - body}), sums.slice(0, at, at + 1));
    ++at;
  }
  return reduce(sums, "n ->", "sum").item();
}

}  // namespace

double grad_norm(const std::vector<Tensor>& params) {
  NoGrad no_grad;
  // the gradients, flat views of them, by device in the order each first comes
  std::vector<std::vector<Tensor>> by_device;
  for (const Tensor& p : params) {
    const Tensor g = p.defined() ? p.grad() : Tensor();
    if (!g.defined() || g.numel() == 0) continue;
    const Tensor flat = g.detach().reshape({-1});  // a view of a contiguous gradient
    auto same = std::find_if(by_device.begin(), by_device.end(), [&](const auto& group) {
      return group.front().device() == flat.device();
    });
    if (same == by_device.end()) same = by_device.emplace(by_device.end());
    same->push_back(flat);
  }
  double total = 0;
  for (const std::vector<Tensor>& grads : by_device)
    total += sum_of_squares(grads);
  return std::sqrt(total);
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
