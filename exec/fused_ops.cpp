// Fused row and optimizer kernels: each function builds one general-form Kernel IR kernel
// (kernel_ir.h) and runs it. Row kernels put the rows' leading dims in P and the last dim in R:
// stages reduce along the row, full stores write (p, r), row stores write the per-row outputs.
// Formulas follow PyTorch's definitions, cited per function in fused_ops.h.
#include "exec/fused_ops.h"

#include <cmath>
#include <string>
#include <vector>

#include <ein/errors.h>
#include <fmt/format.h>

#include "exec/run_kernel.h"
#include "compiler/kernel/kernel_ir.h"

namespace ein {
namespace {

void check(const Tensor& x, const char* op, const char* what, bool integer = false) {
  if (!x.defined()) throw RuntimeError(fmt::format("{}: {} is undefined", op, what));
  if (integer ? !is_integer(x.dtype()) : !is_float(x.dtype()))
    throw RuntimeError(fmt::format("{}: {} must be {} tensor, got {}", op, what,
                                   integer ? "an integer" : "a floating-point (f64/f32/f16/bf16)",
                                   dtype_name(x.dtype())));
}

/// A kernel under construction with the tensors bound to its buffers: inputs first (bind),
/// then outputs (add_output), then run().
class BoundKernel {
 public:
  Kernel& kernel() { return k_; }

  void run() {
    std::vector<Tensor> buffers = inputs_;
    buffers.insert(buffers.end(), outputs_.begin(), outputs_.end());
    run_kernel(k_, buffers);
  }

 protected:
  int bind(const Tensor& t, Shape strides) {
    if (!outputs_.empty()) throw std::logic_error("internal error: an input after an output");
    if (inputs_.empty()) device_ = t.device();
    inputs_.push_back(t);
    return k_.load(k_.add_buffer(t.dtype(), std::move(strides)));
  }

  /// Adds `out` as an output buffer with these domain strides, storing node `value`.
  const Tensor& add_output(Tensor out, Shape strides, int value) {
    k_.store(k_.add_output(out.dtype(), std::move(strides)), value);
    outputs_.push_back(std::move(out));
    return outputs_.back();
  }

  /// Where outputs go: the first input's device.
  Device device() const { return device_; }

  Kernel k_;

 private:
  std::vector<Tensor> inputs_, outputs_;
  Device device_ = cpu();
};

/// A row kernel under construction: the domain is the rows' shape (P = all dims but the last,
/// R = the last), buffers are added as tensors are bound.
class RowKernel : public BoundKernel {
 public:
  RowKernel(const char* name, const Tensor& x, DType compute) : shape_(x.shape()) {
    if (x.dim() == 0) throw RuntimeError(fmt::format("{}: the input must have a row dim", name));
    k_.name = name;
    k_.origin = fmt::format("{} over the last dim of {}", name, shape_str(shape_));
    k_.domain = shape_;
    k_.reduced = 1;
    k_.compute = compute;
  }

  /// Rows per row (the last dim's size) as a run-time param, and 1/n.
  int64_t row_size() const { return shape_.back(); }

  /// Loads `t`, numpy-broadcast against the rows' shape (trailing dims aligned); an
  /// undefined `t` gives `fallback`.
  int input(const Tensor& t, const char* op, const char* what, double fallback = 0) {
    if (!t.defined()) return k_.constant(fallback);
    const int64_t rank = static_cast<int64_t>(shape_.size());
    if (t.dim() > rank) throw shape_error(op, what, t);
    Shape strides(rank, 0);
    for (int64_t i = 0; i < t.dim(); ++i) {
      const int64_t d = rank - t.dim() + i;
      if (t.size(i) == shape_[d])
        strides[d] = t.stride(i);
      else if (t.size(i) != 1)
        throw shape_error(op, what, t);
    }
    return bind(t, strides);
  }

  /// Loads a per-row tensor `t` (shape = the rows' shape without the last dim, or
  /// broadcastable to it).
  int row_input(const Tensor& t, const char* op, const char* what) {
    const int64_t p = static_cast<int64_t>(shape_.size()) - 1;
    if (t.dim() > p) throw shape_error(op, what, t);
    Shape strides(p + 1, 0);
    for (int64_t i = 0; i < t.dim(); ++i) {
      const int64_t d = p - t.dim() + i;
      if (t.size(i) == shape_[d])
        strides[d] = t.stride(i);
      else if (t.size(i) != 1)
        throw shape_error(op, what, t);
    }
    return bind(t, strides);
  }

  /// A fresh contiguous output over the rows (full) or one value per row (row).
  Tensor output(DType dtype, bool row, int value) {
    Shape shape = shape_;
    if (row) shape.pop_back();
    return into_row(empty(shape, dtype, device()), value, row);
  }

  /// `out` (of the rows' shape, or without the last dim when `row`) as an output.
  Tensor into_row(Tensor out, int value, bool row = true) {
    Shape strides = out.strides();
    if (row) strides.push_back(0);
    return add_output(std::move(out), std::move(strides), value);
  }

 private:
  RuntimeError shape_error(const char* op, const char* what, const Tensor& t) const {
    return RuntimeError(fmt::format("{}: {} of shape {} does not broadcast to the rows {}", op,
                                    what, shape_str(t.shape()), shape_str(shape_)));
  }

  Shape shape_;
};

DType compute_for(DType t) {
  return t == DType::f64 ? DType::f64 : DType::f32;
}

/// The stats dtype of LayerNorm/RMSNorm (as torch: f32 for reduced-precision inputs).
DType stats_for(DType t) {
  return t == DType::f64 ? DType::f64 : DType::f32;
}

}  // namespace

Tensor softmax_rows(const Tensor& x) {
  check(x, "softmax", "the input");
  RowKernel r("softmax", x, compute_for(x.dtype()));
  Kernel& k = r.kernel();
  const int xv = r.input(x, "softmax", "the input");
  const int m = k.reduce(Combine::max, xv);
  const int e = k.apply(ScalarOp::exp, k.apply(ScalarOp::sub, xv, m));
  const int s = k.reduce(Combine::sum, e);
  Tensor y =
      r.output(x.dtype(), false, k.apply(ScalarOp::mul, e, k.apply(ScalarOp::reciprocal, s)));
  r.run();
  return y;
}

Tensor log_softmax_rows(const Tensor& x) {
  check(x, "log_softmax", "the input");
  RowKernel r("log_softmax", x, compute_for(x.dtype()));
  Kernel& k = r.kernel();
  const int xv = r.input(x, "log_softmax", "the input");
  const int m = k.reduce(Combine::max, xv);
  const int shifted = k.apply(ScalarOp::sub, xv, m);
  const int s = k.reduce(Combine::sum, k.apply(ScalarOp::exp, shifted));
  Tensor y = r.output(x.dtype(), false, k.apply(ScalarOp::sub, shifted, k.apply(ScalarOp::log, s)));
  r.run();
  return y;
}

Tensor softmax_rows_backward(const Tensor& y, const Tensor& grad) {
  check(y, "softmax_backward", "y");
  check(grad, "softmax_backward", "the gradient");
  RowKernel r("softmax_backward", y,
              compute_for(y.dtype() == DType::f64 ? y.dtype() : grad.dtype()));
  Kernel& k = r.kernel();
  const int yv = r.input(y, "softmax_backward", "y");
  const int g = r.input(grad, "softmax_backward", "the gradient");
  const int dot = k.reduce(Combine::sum, k.apply(ScalarOp::mul, g, yv));
  Tensor dx =
      r.output(y.dtype(), false, k.apply(ScalarOp::mul, yv, k.apply(ScalarOp::sub, g, dot)));
  r.run();
  return dx;
}

LayerNormResult layer_norm_rows(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                double eps) {
  check(x, "layer_norm", "the input");
  if (weight.defined()) check(weight, "layer_norm", "the weight");
  if (bias.defined()) check(bias, "layer_norm", "the bias");
  RowKernel r("layer_norm", x, compute_for(x.dtype()));
  Kernel& k = r.kernel();
  const int xv = r.input(x, "layer_norm", "the input");
  const int w = r.input(weight, "layer_norm", "the weight", 1);
  const int b = r.input(bias, "layer_norm", "the bias", 0);
  const int inv_n = k.param(1.0 / static_cast<double>(r.row_size()));
  // Two passes (mean, then Σ (x − mean)²) rather than E[x²] − E[x]²: no cancellation.
  const int mean = k.apply(ScalarOp::mul, k.reduce(Combine::sum, xv), inv_n);
  const int centered = k.apply(ScalarOp::sub, xv, mean);
  const int var =
      k.apply(ScalarOp::mul, k.reduce(Combine::sum, k.apply(ScalarOp::square, centered)), inv_n);
  const int rstd = k.apply(ScalarOp::rsqrt, k.apply(ScalarOp::add, var, k.param(eps)));
  const int yv =
      k.apply(ScalarOp::add, k.apply(ScalarOp::mul, k.apply(ScalarOp::mul, centered, rstd), w), b);
  LayerNormResult out;
  out.y = r.output(x.dtype(), false, yv);
  out.mean = r.output(stats_for(x.dtype()), true, mean);
  out.rstd = r.output(stats_for(x.dtype()), true, rstd);
  r.run();
  return out;
}

namespace {

/// The per-element loads every norm backward starts with: the gradient, the input and the
/// weight (1 where there is none).
struct NormBackwardLoads {
  int grad, x, weight;
};
NormBackwardLoads norm_backward_loads(RowKernel& r, const char* op, const Tensor& grad,
                                      const Tensor& x, const Tensor& weight) {
  return {r.input(grad, op, "the gradient"), r.input(x, op, "the input"),
          r.input(weight, op, "the weight", 1)};
}

}  // namespace

Tensor layer_norm_rows_backward(const Tensor& grad, const Tensor& x, const Tensor& weight,
                                const Tensor& mean, const Tensor& rstd) {
  const char* op = "layer_norm_backward";
  check(grad, op, "the gradient");
  check(x, op, "the input");
  check(mean, op, "the mean");
  check(rstd, op, "rstd");
  if (weight.defined()) check(weight, op, "the weight");
  RowKernel r(op, x, compute_for(x.dtype()));
  Kernel& k = r.kernel();
  const auto [g, xv, w] = norm_backward_loads(r, op, grad, x, weight);
  const int mu = r.row_input(mean, op, "the mean");
  const int rs = r.row_input(rstd, op, "rstd");
  const int inv_n = k.param(1.0 / static_cast<double>(r.row_size()));
  const int xhat = k.apply(ScalarOp::mul, k.apply(ScalarOp::sub, xv, mu), rs);
  const int gw = k.apply(ScalarOp::mul, g, w);
  const int mean_gw = k.apply(ScalarOp::mul, k.reduce(Combine::sum, gw), inv_n);
  const int mean_gwx =
      k.apply(ScalarOp::mul, k.reduce(Combine::sum, k.apply(ScalarOp::mul, gw, xhat)), inv_n);
  const int inner = k.apply(ScalarOp::sub, k.apply(ScalarOp::sub, gw, mean_gw),
                            k.apply(ScalarOp::mul, xhat, mean_gwx));
  Tensor dx = r.output(x.dtype(), false, k.apply(ScalarOp::mul, rs, inner));
  r.run();
  return dx;
}

RmsNormResult rms_norm_rows(const Tensor& x, const Tensor& weight, double eps) {
  check(x, "rms_norm", "the input");
  if (weight.defined()) check(weight, "rms_norm", "the weight");
  RowKernel r("rms_norm", x, compute_for(x.dtype()));
  Kernel& k = r.kernel();
  const int xv = r.input(x, "rms_norm", "the input");
  const int w = r.input(weight, "rms_norm", "the weight", 1);
  const int ms = k.apply(ScalarOp::mul, k.reduce(Combine::sum, k.apply(ScalarOp::square, xv)),
                         k.param(1.0 / static_cast<double>(r.row_size())));
  const int rstd = k.apply(ScalarOp::rsqrt, k.apply(ScalarOp::add, ms, k.param(eps)));
  RmsNormResult out;
  out.y = r.output(x.dtype(), false, k.apply(ScalarOp::mul, k.apply(ScalarOp::mul, xv, rstd), w));
  out.rstd = r.output(stats_for(x.dtype()), true, rstd);
  r.run();
  return out;
}

namespace {

/// A column kernel: the last dim of the rows (n) is the one parallel dim, the rows' leading
/// dims are reduced. Full tensors (rows..., n) and per-row tensors (rows...) are bound with
/// their strides moved into that order; outputs are (n).
class ColumnKernel : public BoundKernel {
 public:
  ColumnKernel(const char* name, const Tensor& x, DType compute) : shape_(x.shape()) {
    if (x.dim() == 0) throw RuntimeError(fmt::format("{}: the input must have a row dim", name));
    if (x.dim() == 1) {  // one row: reduce over a dim of size 1
      shape_.insert(shape_.begin(), 1);
      one_row_ = true;
    }
    k_.name = name;
    k_.origin = fmt::format("{} over the rows of {}", name, shape_str(shape_));
    k_.domain = {shape_.back()};
    k_.domain.insert(k_.domain.end(), shape_.begin(), shape_.end() - 1);
    k_.reduced = static_cast<int>(shape_.size()) - 1;
    k_.compute = compute;
  }

  /// Loads a tensor of the rows' full shape.
  int input(const Tensor& t_in, const char* op, const char* what) {
    const Tensor t = one_row_ && t_in.dim() == 1 ? t_in.unsqueeze(0) : t_in;
    if (t.shape() != shape_)
      throw RuntimeError(fmt::format("{}: {} has shape {}, expected {}", op, what,
                                     shape_str(t.shape()), shape_str(shape_)));
    Shape strides = {t.strides().back()};
    strides.insert(strides.end(), t.strides().begin(), t.strides().end() - 1);
    return bind(t, std::move(strides));
  }

  /// Loads a per-row tensor (the rows' shape without the last dim).
  int row_input(const Tensor& t_in, const char* op, const char* what) {
    const Tensor t = one_row_ && t_in.dim() == 0 ? t_in.unsqueeze(0) : t_in;
    const Shape rows(shape_.begin(), shape_.end() - 1);
    if (t.shape() != rows)
      throw RuntimeError(fmt::format("{}: {} has shape {}, expected {}", op, what,
                                     shape_str(t.shape()), shape_str(rows)));
    Shape strides = {0};
    strides.insert(strides.end(), t.strides().begin(), t.strides().end());
    return bind(t, std::move(strides));
  }

  /// A fresh (n) output holding `value` (a node that reads only stage results).
  Tensor output(DType dtype, int value) {
    Shape strides(k_.domain.size(), 0);
    strides[0] = 1;
    return add_output(empty({shape_.back()}, dtype, device()), std::move(strides), value);
  }

 private:
  Shape shape_;
  bool one_row_ = false;
};

/// 1 where the row's class index equals its target, else 0 (the one-hot of the target).
int is_target(Kernel& k, int target) {
  return k.apply(ScalarOp::eq, k.index(static_cast<int>(k.domain.size()) - 1), target);
}

}  // namespace

NormWeightGrads layer_norm_weight_grads(const Tensor& grad, const Tensor& x, const Tensor& mean,
                                        const Tensor& rstd) {
  const char* op = "layer_norm_weight_grads";
  check(grad, op, "the gradient");
  check(x, op, "the input");
  check(mean, op, "the mean");
  check(rstd, op, "rstd");
  ColumnKernel c(op, x, compute_for(x.dtype()));
  Kernel& k = c.kernel();
  const int g = c.input(grad, op, "the gradient");
  const int xv = c.input(x, op, "the input");
  const int mu = c.row_input(mean, op, "the mean");
  const int rs = c.row_input(rstd, op, "rstd");
  const int xhat = k.apply(ScalarOp::mul, k.apply(ScalarOp::sub, xv, mu), rs);
  const int dw = k.reduce(Combine::sum, k.apply(ScalarOp::mul, g, xhat));
  const int db = k.reduce(Combine::sum, g);
  NormWeightGrads out;
  out.dweight = c.output(x.dtype(), dw);
  out.dbias = c.output(x.dtype(), db);
  c.run();
  return out;
}

Tensor rms_norm_rows_backward(const Tensor& grad, const Tensor& x, const Tensor& weight,
                              const Tensor& rstd) {
  const char* op = "rms_norm_backward";
  check(grad, op, "the gradient");
  check(x, op, "the input");
  check(rstd, op, "rstd");
  if (weight.defined()) check(weight, op, "the weight");
  RowKernel r(op, x, compute_for(x.dtype()));
  Kernel& k = r.kernel();
  const auto [g, xv, w] = norm_backward_loads(r, op, grad, x, weight);
  const int rs = r.row_input(rstd, op, "rstd");
  const int xhat = k.apply(ScalarOp::mul, xv, rs);
  const int gw = k.apply(ScalarOp::mul, g, w);
  const int mean_gwx =
      k.apply(ScalarOp::mul, k.reduce(Combine::sum, k.apply(ScalarOp::mul, gw, xhat)),
              k.param(1.0 / static_cast<double>(r.row_size())));
  const int inner = k.apply(ScalarOp::sub, gw, k.apply(ScalarOp::mul, xhat, mean_gwx));
  Tensor dx = r.output(x.dtype(), false, k.apply(ScalarOp::mul, rs, inner));
  r.run();
  return dx;
}

Tensor rms_norm_weight_grad(const Tensor& grad, const Tensor& x, const Tensor& rstd) {
  const char* op = "rms_norm_weight_grad";
  check(grad, op, "the gradient");
  check(x, op, "the input");
  check(rstd, op, "rstd");
  ColumnKernel c(op, x, compute_for(x.dtype()));
  Kernel& k = c.kernel();
  const int g = c.input(grad, op, "the gradient");
  const int xv = c.input(x, op, "the input");
  const int rs = c.row_input(rstd, op, "rstd");
  const int dw = k.reduce(Combine::sum, k.apply(ScalarOp::mul, g, k.apply(ScalarOp::mul, xv, rs)));
  Tensor out = c.output(x.dtype(), dw);
  c.run();
  return out;
}

Tensor cross_entropy_rows(const Tensor& logits, const Tensor& target, int64_t ignore_index) {
  const char* op = "cross_entropy";
  check(logits, op, "the logits");
  check(target, op, "the target", true);
  // Class indices are compared as compute-type numbers: exact below 2^24 classes in f32.
  if (logits.dim() > 0 && logits.size(-1) > (int64_t{1} << 24))
    throw RuntimeError(fmt::format("{}: more than 2^24 classes ({})", op, logits.size(-1)));
  RowKernel r(op, logits, compute_for(logits.dtype()));
  Kernel& k = r.kernel();
  const int x = r.input(logits, op, "the logits");
  const int t = r.row_input(target, op, "the target");
  const int m = k.reduce(Combine::max, x);
  const int s = k.reduce(Combine::sum, k.apply(ScalarOp::exp, k.apply(ScalarOp::sub, x, m)));
  const int zero = k.constant(0);
  const int xt = k.reduce(Combine::sum, k.apply(ScalarOp::where, is_target(k, t), x, zero));
  const int loss = k.apply(ScalarOp::sub, k.apply(ScalarOp::add, k.apply(ScalarOp::log, s), m), xt);
  const int ignored = k.apply(ScalarOp::eq, t, k.param(static_cast<double>(ignore_index)));
  Tensor out = r.output(logits.dtype(), true, k.apply(ScalarOp::where, ignored, zero, loss));
  r.run();
  return out;
}

Tensor cross_entropy_rows_backward(const Tensor& logits, const Tensor& target, const Tensor& grad,
                                   int64_t ignore_index) {
  const char* op = "cross_entropy_backward";
  check(logits, op, "the logits");
  check(target, op, "the target", true);
  check(grad, op, "the gradient");
  RowKernel r(op, logits, compute_for(logits.dtype()));
  Kernel& k = r.kernel();
  const int x = r.input(logits, op, "the logits");
  const int t = r.row_input(target, op, "the target");
  const int g = r.row_input(grad, op, "the gradient");
  const int m = k.reduce(Combine::max, x);
  const int e = k.apply(ScalarOp::exp, k.apply(ScalarOp::sub, x, m));
  const int s = k.reduce(Combine::sum, e);
  const int p = k.apply(ScalarOp::mul, e, k.apply(ScalarOp::reciprocal, s));
  const int d = k.apply(ScalarOp::mul, k.apply(ScalarOp::sub, p, is_target(k, t)), g);
  const int ignored = k.apply(ScalarOp::eq, t, k.param(static_cast<double>(ignore_index)));
  Tensor dx = r.output(logits.dtype(), false, k.apply(ScalarOp::where, ignored, k.constant(0), d));
  r.run();
  return dx;
}

Tensor row_sum_of_squares(const Tensor& x, const Tensor& into) {
  check(x, "row_sum_of_squares", "x");
  const Tensor rows = x.dim() == 0 ? x.reshape({1}) : x;
  RowKernel r("row_sum_of_squares", rows, compute_for(x.dtype()));
  Kernel& k = r.kernel();
  const int xv = r.input(rows, "row_sum_of_squares", "x");
  const int total = k.reduce(Combine::sum, k.apply(ScalarOp::mul, xv, xv));
  if (!into.defined()) {
    Tensor out = r.output(DType::f64, true, total);
    r.run();
    return out;
  }
  const Shape want(rows.shape().begin(), rows.shape().end() - 1);
  if (into.shape() != want || into.dtype() != DType::f64 || into.device() != x.device())
    throw RuntimeError(
        fmt::format("row_sum_of_squares: `into` must be f64{} on {}, not {}{} "
                    "on {}",
                    shape_str(want), x.device().str(), dtype_name(into.dtype()),
                    shape_str(into.shape()), into.device().str()));
  r.into_row(into, total);
  r.run();
  return into;
}

void scale_in_place(const Tensor& x, double factor) {
  check(x, "scale_in_place", "x");
  for (int64_t d = 0; d < x.dim(); ++d)
    if (x.stride(d) == 0 && x.size(d) > 1)
      throw RuntimeError(fmt::format("scale_in_place: x must not be a broadcast view (stride 0 "
                                     "along dim {} of size {})", d, x.size(d)));
  if (x.numel() == 0) return;
  Kernel k;
  k.name = "scale_in_place";
  k.origin = fmt::format("x · factor in place on {}", shape_str(x.shape()));
  k.domain = x.shape();
  k.compute = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
  k.add_buffer(x.dtype(), x.strides());
  k.add_output(x.dtype(), x.strides());
  k.store(1, k.apply(ScalarOp::mul, k.load(0), k.param(factor)));
  const Tensor buffers[] = {x, x};
  run_kernel(k, buffers);
}

void adamw_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                  const Tensor& exp_avg_sq, const AdamWConfig& c, int64_t step) {
  const char* op = "adamw";
  check(param, op, "the parameter");
  check(grad, op, "the gradient");
  check(exp_avg, op, "exp_avg");
  check(exp_avg_sq, op, "exp_avg_sq");
  for (const Tensor* t : {&grad, &exp_avg, &exp_avg_sq})
    if (t->shape() != param.shape())
      throw RuntimeError(fmt::format("{}: shapes differ: parameter {} vs {}", op,
                                     shape_str(param.shape()), shape_str(t->shape())));
  if (step < 1) throw RuntimeError(fmt::format("{}: step must be at least 1, got {}", op, step));
  // Updated in place: a broadcast (stride-0) view would have several threads write one element.
  for (const Tensor* t : {&param, &exp_avg, &exp_avg_sq})
    for (int64_t d = 0; d < t->dim(); ++d)
      if (t->stride(d) == 0 && t->size(d) > 1)
        throw RuntimeError(
            fmt::format("{}: the tensors updated in place must not be broadcast "
                        "views (stride 0 along dim {} of size {})",
                        op, d, t->size(d)));
  Kernel k;
  k.name = "adamw";
  k.origin = fmt::format("adamw step on {}", shape_str(param.shape()));
  k.domain = param.shape();
  k.compute = param.dtype() == DType::f64 ? DType::f64 : DType::f32;
  const Tensor buffers[] = {param, grad, exp_avg, exp_avg_sq, param, exp_avg, exp_avg_sq};
  for (int i = 0; i < 7; ++i)
    k.add_buffer(buffers[i].dtype(), buffers[i].strides(), i >= 4);
  const int p = k.load(0), g = k.load(1), m = k.load(2), v = k.load(3);
  // Host-side factors, in double (torch computes them as Python floats too).
  const double t = static_cast<double>(step);
  const double bias1 = 1 - std::pow(c.beta1, t), bias2 = 1 - std::pow(c.beta2, t);
  const int beta1 = k.param(c.beta1), one_minus_beta1 = k.param(1 - c.beta1);
  const int beta2 = k.param(c.beta2), one_minus_beta2 = k.param(1 - c.beta2);
  const int decay = k.param(1 - c.lr * c.weight_decay);
  const int step_size = k.param(c.lr / bias1);
  const int inv_bias2_sqrt = k.param(1 / std::sqrt(bias2));
  const int eps = k.param(c.eps);
  using S = ScalarOp;
  const int m_new = k.apply(S::add, k.apply(S::mul, m, beta1), k.apply(S::mul, g, one_minus_beta1));
  const int v_new = k.apply(S::add, k.apply(S::mul, v, beta2),
                            k.apply(S::mul, k.apply(S::square, g), one_minus_beta2));
  const int denom = k.apply(S::add, k.apply(S::mul, k.apply(S::sqrt, v_new), inv_bias2_sqrt), eps);
  const int p_new = k.apply(S::sub, k.apply(S::mul, p, decay),
                            k.apply(S::mul, step_size, k.apply(S::div, m_new, denom)));
  k.store(4, p_new);
  k.store(5, m_new);
  k.store(6, v_new);
  run_kernel(k, buffers);
}

}  // namespace ein
