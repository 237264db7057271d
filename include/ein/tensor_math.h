// Tensor arithmetic in C++, like libtorch's basics: + - * / with tensors and scalars, unary -,
// pow, comparisons, where, exp/log/sqrt/..., and sum/mean/max over everything or one dim.
//
//   using namespace ein;
//   Tensor loss = mean(pow(pred - 5, 2) * 0.5);       // torch: ((pred - 5).pow(2) * 0.5).mean()
//   Tensor y = where(x > 0, x, x * 0.01);             // leaky ReLU
//
// Broadcasting is by position, as PyTorch's (shapes aligned on the right, size-1 dims
// stretch); map() broadcasts by axis name instead. A shape mismatch is a RuntimeError at the
// operator that meets it.
//
// The elementwise operators are built lazily: each returns an ein::Expr, which records the
// operation and its shape and dtype but runs nothing. An Expr runs when it becomes a Tensor
// (assigned to one, passed to a function that takes one, or eval()): then the whole chain is
// ONE fused map kernel over its leaf tensors, recorded on the autograd tape as one node. So
// `pow(pred - 5, 2) * 0.5` is one kernel, and `mean(...)` of it two (the map, then the
// reduction). An Expr runs once; converting it again gives the same Tensor.
//
// As with any expression template (Eigen's, xtensor's), `auto e = a + b;` keeps an Expr that
// holds its operands' handles, not their values: an in-place write to `a` (copy_, fill_, an
// optimizer step) before `e` is converted is seen by `e`. Write `Tensor e = a + b;` to run at once.
//
// Result dtypes follow torch's: integers stay integers under + - * (i64 + i64 is i64; with a
// float scalar they give f32), / gives a float, comparisons give bool, and a bf16 or f16
// tensor with a Python-style scalar stays bf16 or f16 (the scalar is applied in f32). Inside
// one fused chain, values are carried in the compute type (f32 for bf16/f16, as torch.compile
// does) and rounded to the result dtype once, at the store; eager per-op rounding differs from
// that by at most the rounding of the intermediate values. A chain stops fusing (its operand
// runs first) where an intermediate would change precision: an integer or f32 subexpression
// feeding an op of another dtype, so mixed-dtype results equal eager ones exactly.
#pragma once

#include <cstdint>
#include <memory>

#include <ein/tensor.h>

namespace ein {

/// An elementwise expression not run yet: what the operators below return (see above).
/// Converting it to a Tensor runs it as one fused map kernel, once.
class Expr {
 public:
  /// A tensor as an operand (its handle, not a copy of its elements).
  Expr(const Tensor& t);  // NOLINT(google-explicit-constructor): operands mix freely
  /// Runs the expression (the first time) and returns its result.
  operator Tensor() const;  // NOLINT(google-explicit-constructor): `Tensor t = a + b;`
  /// The same as the conversion.
  Tensor eval() const { return *this; }

  /// The result's shape, dtype and device, known without running.
  const Shape& shape() const;
  int64_t dim() const { return static_cast<int64_t>(shape().size()); }
  int64_t numel() const;
  DType dtype() const;
  Device device() const;
  /// eval().item() and eval().backward(), so a loss can stay an Expr.
  double item() const { return eval().item(); }
  void backward() const { eval().backward(); }

  /// The expression's tree (api/tensor_math.cpp).
  struct Node;
  explicit Expr(std::shared_ptr<const Node> node) : node_(std::move(node)) {}
  const std::shared_ptr<const Node>& node() const { return node_; }

 private:
  std::shared_ptr<const Node> node_;
};

Expr operator+(const Expr& a, const Expr& b);
Expr operator-(const Expr& a, const Expr& b);
Expr operator*(const Expr& a, const Expr& b);
Expr operator/(const Expr& a, const Expr& b);
Expr operator+(const Expr& a, double b);
Expr operator-(const Expr& a, double b);
Expr operator*(const Expr& a, double b);
Expr operator/(const Expr& a, double b);
Expr operator+(double a, const Expr& b);
Expr operator-(double a, const Expr& b);
Expr operator*(double a, const Expr& b);
Expr operator/(double a, const Expr& b);
Expr operator-(const Expr& a);

/// Comparisons, elementwise: bool results.
Expr operator<(const Expr& a, const Expr& b);
Expr operator<=(const Expr& a, const Expr& b);
Expr operator>(const Expr& a, const Expr& b);
Expr operator>=(const Expr& a, const Expr& b);
Expr operator<(const Expr& a, double b);
Expr operator<=(const Expr& a, double b);
Expr operator>(const Expr& a, double b);
Expr operator>=(const Expr& a, double b);
/// Elementwise equality (a bool result), as torch.eq; not whether two tensors are the same.
Expr eq(const Expr& a, const Expr& b);
Expr ne(const Expr& a, const Expr& b);

/// a^b elementwise; pow(x, 2) is one multiply.
Expr pow(const Expr& a, double exponent);
Expr pow(const Expr& a, const Expr& exponent);
/// torch.where: x where condition is nonzero, else y (broadcast by position).
Expr where(const Expr& condition, const Expr& x, const Expr& y);
Expr maximum(const Expr& a, const Expr& b);
Expr minimum(const Expr& a, const Expr& b);

Expr exp(const Expr& x);
Expr log(const Expr& x);
Expr sqrt(const Expr& x);
Expr rsqrt(const Expr& x);
Expr abs(const Expr& x);
Expr tanh(const Expr& x);
Expr sigmoid(const Expr& x);
Expr relu(const Expr& x);
/// The exact (erf) GELU, torch's F.gelu default.
Expr gelu(const Expr& x);
Expr sin(const Expr& x);
Expr cos(const Expr& x);
Expr square(const Expr& x);
Expr floor(const Expr& x);
Expr round(const Expr& x);

/// In place, as torch's `p -= lr * g`: `a op b` runs as one fused map, then is copied into a's
/// elements (Tensor::copy_: so, as in torch, a tensor that requires grad is refused outside a
/// NoGrad scope). The result must have a's shape (b broadcasts to it), and a float result is
/// refused for an integer `a`, as torch refuses it. Returns `a`.
const Tensor& operator+=(const Tensor& a, const Expr& b);
const Tensor& operator-=(const Tensor& a, const Expr& b);
const Tensor& operator*=(const Tensor& a, const Expr& b);
const Tensor& operator/=(const Tensor& a, const Expr& b);
const Tensor& operator+=(const Tensor& a, double b);
const Tensor& operator-=(const Tensor& a, double b);
const Tensor& operator*=(const Tensor& a, double b);
const Tensor& operator/=(const Tensor& a, double b);

/// Reductions over every element (a 0-dim tensor) or over dim `dim` (negative counts from
/// the end; `keepdim` leaves it as size 1), as torch.sum/mean/max/min (values only).
Tensor sum(const Tensor& x);
Tensor mean(const Tensor& x);
Tensor max(const Tensor& x);
Tensor min(const Tensor& x);
Tensor sum(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor mean(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor max(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor min(const Tensor& x, int64_t dim, bool keepdim = false);

}  // namespace ein
