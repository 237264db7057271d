// The standard functions of include/ein/nn.h: forward and backward are the fused row kernels
// of compiler/fused_ops.h, recorded on the tape with hand-written backward functions (one
// kernel forward; backward: one row kernel, plus one column-reduction kernel for the
// LayerNorm/RMSNorm weight and bias gradients).
#include <ein/nn.h>

#include <cmath>

#include <ein/errors.h>
#include <ein/ops.h>
#include <fmt/format.h>

#include "compiler/cpu_executor.h"
#include "compiler/fused_ops.h"
#include "compiler/kernel_ir.h"
#include "compiler/tape.h"
#include "runtime/autograd.h"
#include "runtime/counters.h"

namespace ein::nn {
namespace {

DType compute_for(DType t) {
  return t == DType::f64 ? DType::f64 : DType::f32;
}

/// Σ over rows of `terms(g, x̂)` for a norm's weight and bias gradients, in ONE kernel: the
/// domain is (d, rows) with the rows reduced, so each stage sums one column.
/// x̂ = (x − mean) · rstd (mean undefined: RMSNorm's x · rstd). Returns {dweight, dbias}.
std::pair<Tensor, Tensor> column_sums(const Tensor& grad, const Tensor& x, const Tensor& mean,
                                      const Tensor& rstd, bool want_weight, bool want_bias,
                                      DType weight_dtype) {
  const int64_t d = x.size(-1), rows = d == 0 ? 0 : x.numel() / d;
  const Tensor g2 = grad.contiguous().view({rows, d}), x2 = x.contiguous().view({rows, d});
  Kernel k;
  k.name = "norm_weight_grad";
  k.origin = fmt::format("LayerNorm/RMSNorm weight gradient over {} rows of {}", rows, d);
  k.domain = {d, rows};
  k.reduced = 1;
  k.compute = compute_for(x.dtype());
  std::vector<Tensor> buffers{g2, x2};
  const int g = k.load(k.add_buffer(g2.dtype(), {1, d}));
  int xhat = k.load(k.add_buffer(x2.dtype(), {1, d}));
  if (mean.defined()) {
    buffers.push_back(mean.contiguous().view({rows}));
    xhat = k.apply(ScalarOp::sub, xhat, k.load(k.add_buffer(mean.dtype(), {0, 1})));
  }
  buffers.push_back(rstd.contiguous().view({rows}));
  xhat = k.apply(ScalarOp::mul, xhat, k.load(k.add_buffer(rstd.dtype(), {0, 1})));
  Tensor dw, db;
  if (want_weight) {
    dw = empty({d}, weight_dtype);
    const int acc = k.reduce(Combine::sum, k.apply(ScalarOp::mul, g, xhat));
    k.store(k.add_output(weight_dtype, {1, 0}), acc);
    buffers.push_back(dw);
  }
  if (want_bias) {
    db = empty({d}, weight_dtype);
    const int acc = k.reduce(Combine::sum, g);
    k.store(k.add_output(weight_dtype, {1, 0}), acc);
    buffers.push_back(db);
  }
  detail::CountingPhase phase(CostPhase::weight_grad);
  if (want_weight || want_bias) run_kernel(k, buffers);
  return {dw, db};
}

/// RMSNorm's input gradient in ONE row kernel: with ĝ = g · w, s = rstd,
/// dx = s · ĝ − x · s³ · mean(ĝ · x) (LayerNorm's backward without the mean terms).
Tensor rms_norm_input_grad(const Tensor& grad, const Tensor& x, const Tensor& weight,
                           const Tensor& rstd) {
  const int64_t d = x.size(-1), rows = d == 0 ? 0 : x.numel() / d;
  const Tensor g2 = grad.contiguous().view({rows, d}), x2 = x.contiguous().view({rows, d});
  const Tensor s1 = rstd.contiguous().view({rows});
  Kernel k;
  k.name = "rms_norm_backward";
  k.origin = fmt::format("RMSNorm input gradient over {} rows of {}", rows, d);
  k.domain = {rows, d};
  k.reduced = 1;
  k.compute = compute_for(x.dtype());
  std::vector<Tensor> buffers{g2, x2, s1};
  int gw = k.load(k.add_buffer(g2.dtype(), {d, 1}));
  const int xv = k.load(k.add_buffer(x2.dtype(), {d, 1}));
  const int s = k.load(k.add_buffer(s1.dtype(), {1, 0}));
  if (weight.defined()) {
    gw = k.apply(ScalarOp::mul, gw, k.load(k.add_buffer(weight.dtype(), {0, weight.stride(0)})));
    buffers.push_back(weight);
  }
  const int dot = k.reduce(Combine::sum, k.apply(ScalarOp::mul, gw, xv));
  const int mean = k.apply(ScalarOp::div, dot, k.param(static_cast<double>(d)));
  const int s3 = k.apply(ScalarOp::mul, s, k.apply(ScalarOp::mul, s, s));
  const int dx = k.apply(ScalarOp::sub, k.apply(ScalarOp::mul, s, gw),
                         k.apply(ScalarOp::mul, xv, k.apply(ScalarOp::mul, s3, mean)));
  Tensor out = empty({rows, d}, x.dtype());
  k.store(k.add_output(x.dtype(), {d, 1}), dx);
  buffers.push_back(out);
  run_kernel(k, buffers);
  return out.view(x.shape());
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
  const bool want_w = weight.defined() && weight.requires_grad();
  const bool want_b = bias.defined() && bias.requires_grad();
  const DType wdt = weight.defined() ? weight.dtype() : bias.defined() ? bias.dtype() : x.dtype();
  return record("layer_norm", {x, weight, bias}, {r.y},
                [xd, wd, r, want_w, want_b, wdt](const std::vector<Tensor>& g) {
                  const Tensor dx = layer_norm_rows_backward(g[0], xd, wd, r.mean, r.rstd);
                  auto [dw, db] = column_sums(g[0], xd, r.mean, r.rstd, want_w, want_b, wdt);
                  return std::vector<Tensor>{dx, dw, db};
                })
      .front();
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  check_input(x, "rms_norm");
  check_last_dim(x, weight, "rms_norm", "weight");
  const Tensor xd = x.detach(), wd = weight.detach();
  const RmsNormResult r = rms_norm_rows(xd, wd, eps);
  const bool want_w = weight.defined() && weight.requires_grad();
  const DType wdt = weight.defined() ? weight.dtype() : x.dtype();
  return record("rms_norm", {x, weight}, {r.y},
                [xd, wd, r, want_w, wdt](const std::vector<Tensor>& g) {
                  const Tensor dx = rms_norm_input_grad(g[0], xd, wd, r.rstd);
                  auto [dw, unused] = column_sums(g[0], xd, Tensor(), r.rstd, want_w, false, wdt);
                  return std::vector<Tensor>{dx, dw};
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
  const Tensor loss = full({}, count == 0 ? std::nan("") : total * scale, logits.dtype());
  return record("cross_entropy", {logits, target}, {loss},
                [ld, td, scale, ignore_index](const std::vector<Tensor>& g) {
                  const Shape rows_shape(ld.shape().begin(), ld.shape().end() - 1);
                  const Tensor per_row =
                      full({}, g[0].item() * scale, ld.dtype()).expand(rows_shape);
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
