// The standard functions of include/ein/nn.h: forward and backward are the fused row kernels
// of exec/fused_ops.h, recorded on the tape with hand-written backward functions (one
// kernel forward; backward: one row kernel, plus one column-reduction kernel for the
// LayerNorm/RMSNorm weight and bias gradients).
#include <ein/nn.h>

#include <cmath>

#include <ein/errors.h>
#include <ein/ops.h>
#include <fmt/format.h>

#include "exec/fused_ops.h"
#include "api/tape.h"
#include <ein/autograd.h>
#include "runtime/counters.h"

namespace ein::nn {
namespace {

/// `g` in `dtype` (a weight's gradient in the weight's dtype).
Tensor as(const Tensor& g, DType dtype) {
  return g.defined() && g.dtype() != dtype ? g.to(dtype) : g;
}

void check_last_dim(const Tensor& x, const Tensor& w, const char* op, const char* what) {
  if (w.defined() && (w.dim() != 1 || w.size(0) != x.size(-1)))
    throw RuntimeError(fmt::format("{}: {} must have shape [{}] (the input's last dim), got {}", op,
                                   what, x.size(-1), shape_str(w.shape())));
}

void check_input(const Tensor& x, const char* op) {
  if (!x.defined()) throw RuntimeError(fmt::format("{}: the input is undefined", op));
  if (x.dim() == 0) throw RuntimeError(fmt::format("{}: the input needs a last dim", op));
}

}  // namespace

Tensor softmax(const Tensor& x) {
  check_input(x, "softmax");
  const Tensor y = softmax_rows(x.detach());
  return record("softmax", {x}, {y},
                [y](const std::vector<Tensor>& g) {
                  return std::vector<Tensor>{softmax_rows_backward(y, g[0])};
                })
      .front();
}

Tensor log_softmax(const Tensor& x) {
  check_input(x, "log_softmax");
  const Tensor y = log_softmax_rows(x.detach());
  // dx = g − softmax(x) · Σ g = g − exp(y) · Σ g, a row kernel through map and reduce.
  return record(
             "log_softmax", {x}, {y},
             [y](const std::vector<Tensor>& g) {
               const Tensor rows = y.contiguous().view({-1, y.size(-1)});
               const Tensor gr = g[0].contiguous().view({-1, y.size(-1)});
               const Tensor total = reduce(gr, "r c -> r", "sum");
               const Tensor dx = map("g[r c], y[r c], t[r] -> g - exp(y) * t", {gr, rows, total});
               return std::vector<Tensor>{dx.view(y.shape())};
             })
      .front();
}

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  check_input(x, "layer_norm");
  check_last_dim(x, weight, "layer_norm", "weight");
  check_last_dim(x, bias, "layer_norm", "bias");
  const Tensor xd = x.detach(), wd = weight.detach();
  const LayerNormResult r = layer_norm_rows(xd, wd, bias.detach(), eps);
  const bool want_weights =
      (weight.defined() && weight.requires_grad()) || (bias.defined() && bias.requires_grad());
  return record("layer_norm", {x, weight, bias}, {r.y},
                [xd, wd, bd = bias.detach(), r, want_weights](const std::vector<Tensor>& g) {
                  const Tensor dx = layer_norm_rows_backward(g[0], xd, wd, r.mean, r.rstd);
                  if (!want_weights) return std::vector<Tensor>{dx, Tensor(), Tensor()};
                  detail::CountingPhase phase(CostPhase::weight_grad);
                  const NormWeightGrads w = layer_norm_weight_grads(g[0], xd, r.mean, r.rstd);
                  return std::vector<Tensor>{dx,
                                             wd.defined() ? as(w.dweight, wd.dtype()) : Tensor(),
                                             bd.defined() ? as(w.dbias, bd.dtype()) : Tensor()};
                })
      .front();
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  check_input(x, "rms_norm");
  check_last_dim(x, weight, "rms_norm", "weight");
  const Tensor xd = x.detach(), wd = weight.detach();
  const RmsNormResult r = rms_norm_rows(xd, wd, eps);
  const bool want_w = weight.defined() && weight.requires_grad();
  return record("rms_norm", {x, weight}, {r.y},
                [xd, wd, r, want_w](const std::vector<Tensor>& g) {
                  const Tensor dx = rms_norm_rows_backward(g[0], xd, wd, r.rstd);
                  if (!want_w) return std::vector<Tensor>{dx, Tensor()};
                  detail::CountingPhase phase(CostPhase::weight_grad);
                  return std::vector<Tensor>{
                      dx, as(rms_norm_weight_grad(g[0], xd, r.rstd), wd.dtype())};
                })
      .front();
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index) {
  check_input(logits, "cross_entropy");
  const Tensor ld = logits.detach(), td = target.detach();
  const Tensor rows = cross_entropy_rows(ld, td, ignore_index);
  int64_t count = 0;
  for (int64_t t : td.to_vector<int64_t>())
    count += t != ignore_index;
  const double scale = count == 0 ? 0.0 : 1.0 / static_cast<double>(count);
  double total = 0;  // summed on the host in double: no second kernel, no rounding drift
  for (double l : rows.to_vector<double>())
    total += l;
  // torch: the mean over no rows is nan.
  const Tensor loss =
      full({}, count == 0 ? std::nan("") : total * scale, logits.dtype(), logits.device());
  return record("cross_entropy", {logits, target}, {loss},
                [ld, td, scale, ignore_index](const std::vector<Tensor>& g) {
                  const Shape rows_shape(ld.shape().begin(), ld.shape().end() - 1);
                  const Tensor per_row =
                      full({}, g[0].item() * scale, ld.dtype(), ld.device()).expand(rows_shape);
                  return std::vector<Tensor>{
                      cross_entropy_rows_backward(ld, td, per_row, ignore_index), Tensor()};
                })
      .front();
}

Tensor mse_loss(const Tensor& pred, const Tensor& target) {
  if (pred.shape() != target.shape())
    throw RuntimeError(fmt::format("mse_loss: pred has shape {} but target has shape {}",
                                   shape_str(pred.shape()), shape_str(target.shape())));
  const Tensor p = pred.dim() == 0 ? pred : rearrange(pred, "... -> (...)");
  const Tensor t = target.dim() == 0 ? target : rearrange(target, "... -> (...)");
  const Tensor squared =
      map(pred.dim() == 0 ? "p[], t[] -> (p - t) ** 2" : "p[n], t[n] -> (p - t) ** 2", {p, t});
  return pred.dim() == 0 ? squared : reduce(squared, "n -> ", "mean");
}

}  // namespace ein::nn
