// Tensor arithmetic (include/ein/tensor_math.h). Each operator builds an Expr node: an op
// template over its operands ("{0} + {1}"), the result's shape (broadcast by position) and
// dtype (what map() gives that one op, plus torch's rules for scalars and comparisons). An
// Expr runs as one map() over its distinct leaf tensors, named t0 t1 ... with axes a0 a1 ...
// aligned on the right, so broadcasting is by position; reductions are einops reduce()
// patterns over the same names.
#include <ein/tensor_math.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include <ein/autograd.h>
#include <ein/errors.h>
#include <ein/ops.h>
#include <fmt/format.h>

#include "api/map.h"

namespace ein {

struct Expr::Node {
  Tensor leaf;         ///< defined for a leaf: the operand itself
  std::string op;      ///< for an op: its text over {0} {1} {2}, e.g. "{0} + {1}"
  std::vector<std::shared_ptr<const Node>> args;
  Shape shape;
  DType dtype = DType::f32;  ///< the result's, as the op run alone gives it
  Device device;
  bool grad_mode = true;     ///< whether autograd was on when the op was written
  mutable Tensor value;      ///< the result, once run
};

namespace {

using NodePtr = std::shared_ptr<const Expr::Node>;

bool is_low_float(DType t) {
  return t == DType::f16 || t == DType::bf16;
}

/// Position-wise broadcast of two shapes (aligned on the right; size 1 stretches), or the
/// RuntimeError torch gives, naming the dim.
Shape broadcast(const Shape& a, const Shape& b, const std::string& op) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t k = 0; k < n; ++k) {  // k counts from the right
    const int64_t x = k < a.size() ? a[a.size() - 1 - k] : 1;
    const int64_t y = k < b.size() ? b[b.size() - 1 - k] : 1;
    if (x != y && x != 1 && y != 1)
      throw RuntimeError(fmt::format(
          "{}: shapes ({}) and ({}) do not broadcast: size {} against {} at dim {} (shapes are "
          "aligned on the right; only a size of 1 stretches)",
          op, fmt::join(a, ", "), fmt::join(b, ", "), x, y, static_cast<int64_t>(n - 1 - k)));
    out[n - 1 - k] = x == 1 ? y : x;
  }
  return out;
}

/// The op's text with its operands named x y z: the single-op map whose result dtype is this
/// op's (map_result_dtype).
std::string single_op(const std::string& op, size_t arity) {
  std::string inputs;
  for (size_t i = 0; i < arity; ++i)
    inputs += fmt::format("{}{}[]", i ? ", " : "", "xyz"[i]);
  return inputs + " -> " + fmt::format(fmt::runtime(op), "x", "y", "z");
}

/// Runs `e` (once) and returns its value.
const Tensor& run(const Expr::Node& e);

/// Whether `child` may be computed inside its parent's kernel, whose ops compute in `compute`:
/// when that changes no value eager running would give. A leaf is read as is; a comparison
/// is 0 or 1 in any type; a subexpression of the parent's compute type is not rounded by
/// eager either. bf16/f16 subexpressions are carried in f32 instead of rounded (as
/// torch.compile does). Anything else (an integer or f32 subexpression under an op that
/// computes in another type) runs on its own first.
bool fuses(const Expr::Node& child, DType compute, bool grad_mode) {
  if (child.leaf.defined() || child.value.defined()) return true;
  if (child.grad_mode != grad_mode) return false;
  if (child.dtype == DType::boolean || child.dtype == compute) return true;
  return is_low_float(child.dtype) && (is_low_float(compute) || compute == DType::f32);
}

/// A node for `op` over `args`: broadcast shape, the dtype eager running gives (`dtype`
/// overrides map's choice: bool for comparisons, the tensor's for a low-float tensor with a
/// scalar), operands that must not fuse run now.
Expr make(const std::string& op, std::vector<Expr> args, std::optional<DType> dtype = {}) {
  auto n = std::make_shared<Expr::Node>();
  n->op = op;
  n->grad_mode = grad_enabled();
  std::vector<DType> dtypes;
  const std::string name = op.substr(0, op.find('('));
  for (const Expr& a : args) {
    n->shape = n->args.empty() ? a.shape() : broadcast(n->shape, a.shape(), single_op(op, args.size()));
    if (!n->args.empty() && a.device() != n->device)
      throw RuntimeError(fmt::format("{}: operands are on {} and {}; move one with .to(...)",
                                     single_op(op, args.size()), n->device.str(), a.device().str()));
    n->device = a.device();
    n->args.push_back(a.node());
    dtypes.push_back(a.dtype());
  }
  const DType compute = map_result_dtype(single_op(op, args.size()), dtypes);
  n->dtype = dtype ? *dtype : compute;
  for (const NodePtr& a : n->args)
    if (!fuses(*a, compute, n->grad_mode)) run(*a);  // its value is then read as a leaf
  return Expr(NodePtr(std::move(n)));
}

/// A scalar operand for `t`: a 0-dim tensor of t's integer dtype (integral scalars), else f64
/// for f64 operands and f32 otherwise.
Expr scalar_for(const Expr& t, double v) {
  const DType d = is_integer(t.dtype()) && v == static_cast<double>(static_cast<int64_t>(v))
                      ? t.dtype()
                      : t.dtype() == DType::f64 ? DType::f64 : DType::f32;
  return full({}, v, d, t.device());
}

/// `op` with the scalar as {1} (or {0} when `scalar_first`); a bf16/f16 operand keeps its dtype.
Expr with_scalar(const Expr& t, double v, const std::string& op, bool scalar_first = false) {
  const Expr s = scalar_for(t, v);
  std::optional<DType> keep;
  if (is_low_float(t.dtype())) keep = t.dtype();
  return scalar_first ? make(op, {s, t}, keep) : make(op, {t, s}, keep);
}

Expr compare(const std::string& op, const Expr& a, const Expr& b) {
  return make(op, {a, b}, DType::boolean);
}

/// The map text of `e` with its leaves as t0 t1 ... (`leaves` collects them, each distinct
/// tensor once).
std::string text(const Expr::Node& e, std::vector<Tensor>& leaves) {
  const Tensor& t = e.leaf.defined() ? e.leaf : e.value;
  if (t.defined()) {
    for (size_t i = 0; i < leaves.size(); ++i) {
      const Tensor& l = leaves[i];
      if (l.storage() == t.storage() && l.offset() == t.offset() && l.dtype() == t.dtype() &&
          l.shape() == t.shape() && l.strides() == t.strides() && l.autograd() == t.autograd())
        return fmt::format("t{}", i);
    }
    leaves.push_back(t);
    return fmt::format("t{}", leaves.size() - 1);
  }
  std::vector<std::string> parts;
  for (const NodePtr& a : e.args) {
    std::string s = text(*a, leaves);
    parts.push_back(a->leaf.defined() || a->value.defined() ? s : "(" + s + ")");
  }
  parts.resize(3);
  return fmt::format(fmt::runtime(e.op), parts[0], parts[1], parts[2]);
}

const Tensor& run(const Expr::Node& e) {
  if (e.leaf.defined()) return e.leaf;
  if (e.value.defined()) return e.value;
  std::vector<Tensor> leaves;
  const std::string body = text(e, leaves);
  const int64_t n = static_cast<int64_t>(e.shape.size());
  std::string inputs;
  for (size_t i = 0; i < leaves.size(); ++i) {
    std::string axes;
    for (int64_t d = n - leaves[i].dim(); d < n; ++d)
      axes += fmt::format("{}a{}", axes.empty() ? "" : " ", d);
    inputs += fmt::format("{}t{}[{}]", i ? ", " : "", i, axes);
  }
  // Record (or not) as the operators' own grad mode says, wherever the Expr is run.
  std::optional<NoGrad> off;
  std::optional<EnableGrad> on;
  if (e.grad_mode && !grad_enabled()) on.emplace();
  if (!e.grad_mode && grad_enabled()) off.emplace();
  e.value = map_as(inputs + " -> " + body, leaves, e.dtype);
  return e.value;
}

/// The einops pattern reducing `dim` of a rank-n tensor (all dims when dim is empty).
Tensor reduce_dim(const Tensor& x, std::optional<int64_t> dim, bool keepdim, const char* how) {
  const int64_t n = x.dim();
  std::optional<int64_t> d;
  if (dim) {
    d = *dim < 0 ? *dim + n : *dim;
    if (*d < 0 || *d >= n)
      throw RuntimeError(fmt::format("{}: dim {} is out of range for a tensor of {} dims", how, *dim, n));
  }
  std::string left, right;
  for (int64_t i = 0; i < n; ++i) {
    left += fmt::format("{}a{}", i ? " " : "", i);
    const bool gone = !d || *d == i;
    if (!gone) right += fmt::format("{}a{}", right.empty() ? "" : " ", i);
    else if (keepdim) right += fmt::format("{}1", right.empty() ? "" : " ");
  }
  return reduce(x, left + " -> " + right, how);
}

}  // namespace

Expr::Expr(const Tensor& t) {
  if (!t.defined()) throw RuntimeError("tensor arithmetic: an operand is undefined");
  auto n = std::make_shared<Node>();
  n->leaf = t;
  n->shape = t.shape();
  n->dtype = t.dtype();
  n->device = t.device();
  n->grad_mode = grad_enabled();
  node_ = std::move(n);
}

Expr::operator Tensor() const { return run(*node_); }
const Shape& Expr::shape() const { return node_->shape; }
int64_t Expr::numel() const { return checked_numel(node_->shape); }
DType Expr::dtype() const { return node_->dtype; }
Device Expr::device() const { return node_->device; }

Expr operator+(const Expr& a, const Expr& b) { return make("{0} + {1}", {a, b}); }
Expr operator-(const Expr& a, const Expr& b) { return make("{0} - {1}", {a, b}); }
Expr operator*(const Expr& a, const Expr& b) { return make("{0} * {1}", {a, b}); }
Expr operator/(const Expr& a, const Expr& b) { return make("{0} / {1}", {a, b}); }
Expr operator+(const Expr& a, double b) { return with_scalar(a, b, "{0} + {1}"); }
Expr operator-(const Expr& a, double b) { return with_scalar(a, b, "{0} - {1}"); }
Expr operator*(const Expr& a, double b) { return with_scalar(a, b, "{0} * {1}"); }
Expr operator/(const Expr& a, double b) { return with_scalar(a, b, "{0} / {1}"); }
Expr operator+(double a, const Expr& b) { return with_scalar(b, a, "{0} + {1}", true); }
Expr operator-(double a, const Expr& b) { return with_scalar(b, a, "{0} - {1}", true); }
Expr operator*(double a, const Expr& b) { return with_scalar(b, a, "{0} * {1}", true); }
Expr operator/(double a, const Expr& b) { return with_scalar(b, a, "{0} / {1}", true); }
Expr operator-(const Expr& a) { return make("-{0}", {a}); }

Expr operator<(const Expr& a, const Expr& b) { return compare("{0} < {1}", a, b); }
Expr operator<=(const Expr& a, const Expr& b) { return compare("{0} <= {1}", a, b); }
Expr operator>(const Expr& a, const Expr& b) { return compare("{0} > {1}", a, b); }
Expr operator>=(const Expr& a, const Expr& b) { return compare("{0} >= {1}", a, b); }
Expr operator<(const Expr& a, double b) { return compare("{0} < {1}", a, scalar_for(a, b)); }
Expr operator<=(const Expr& a, double b) { return compare("{0} <= {1}", a, scalar_for(a, b)); }
Expr operator>(const Expr& a, double b) { return compare("{0} > {1}", a, scalar_for(a, b)); }
Expr operator>=(const Expr& a, double b) { return compare("{0} >= {1}", a, scalar_for(a, b)); }
Expr eq(const Expr& a, const Expr& b) { return compare("{0} == {1}", a, b); }
Expr ne(const Expr& a, const Expr& b) { return compare("{0} != {1}", a, b); }

Expr pow(const Expr& a, double exponent) {
  if (exponent == 2) return make("square({0})", {a});
  return with_scalar(a, exponent, "{0} ** {1}");
}
Expr pow(const Expr& a, const Expr& exponent) { return make("{0} ** {1}", {a, exponent}); }
Expr where(const Expr& condition, const Expr& x, const Expr& y) {
  // The condition does not decide the dtype: it is compared with 0 as its own type.
  return make("where({0}, {1}, {2})", {condition, x, y});
}
Expr maximum(const Expr& a, const Expr& b) { return make("maximum({0}, {1})", {a, b}); }
Expr minimum(const Expr& a, const Expr& b) { return make("minimum({0}, {1})", {a, b}); }

Expr exp(const Expr& x) { return make("exp({0})", {x}); }
Expr log(const Expr& x) { return make("log({0})", {x}); }
Expr sqrt(const Expr& x) { return make("sqrt({0})", {x}); }
Expr rsqrt(const Expr& x) { return make("rsqrt({0})", {x}); }
Expr abs(const Expr& x) { return make("abs({0})", {x}); }
Expr tanh(const Expr& x) { return make("tanh({0})", {x}); }
Expr sigmoid(const Expr& x) { return make("sigmoid({0})", {x}); }
Expr relu(const Expr& x) { return make("relu({0})", {x}); }
Expr gelu(const Expr& x) { return make("gelu({0})", {x}); }
Expr sin(const Expr& x) { return make("sin({0})", {x}); }
Expr cos(const Expr& x) { return make("cos({0})", {x}); }
Expr square(const Expr& x) { return make("square({0})", {x}); }
Expr floor(const Expr& x) { return make("floor({0})", {x}); }
Expr round(const Expr& x) { return make("round({0})", {x}); }

namespace {

/// a.copy_(result), with torch's rules for an in-place op: the result keeps a's shape, and a
/// float result does not go into an integer tensor.
const Tensor& assign(const Tensor& a, const Expr& result, const char* op) {
  if (result.shape() != a.shape())
    throw RuntimeError(fmt::format("{}: the result's shape ({}) is not the tensor's ({}); an "
                                   "in-place op cannot grow its tensor",
                                   op, fmt::join(result.shape(), ", "), fmt::join(a.shape(), ", ")));
  if (is_integer(a.dtype()) && !is_integer(result.dtype()) && result.dtype() != DType::boolean)
    throw RuntimeError(fmt::format("{}: the result is {} and cannot be written into an {} tensor "
                                   "in place (torch refuses it too); convert with .to()",
                                   op, dtype_name(result.dtype()), dtype_name(a.dtype())));
  a.copy_(result);
  return a;
}

}  // namespace

const Tensor& operator+=(const Tensor& a, const Expr& b) { return assign(a, Expr(a) + b, "+="); }
const Tensor& operator-=(const Tensor& a, const Expr& b) { return assign(a, Expr(a) - b, "-="); }
const Tensor& operator*=(const Tensor& a, const Expr& b) { return assign(a, Expr(a) * b, "*="); }
const Tensor& operator/=(const Tensor& a, const Expr& b) { return assign(a, Expr(a) / b, "/="); }
const Tensor& operator+=(const Tensor& a, double b) { return assign(a, Expr(a) + b, "+="); }
const Tensor& operator-=(const Tensor& a, double b) { return assign(a, Expr(a) - b, "-="); }
const Tensor& operator*=(const Tensor& a, double b) { return assign(a, Expr(a) * b, "*="); }
const Tensor& operator/=(const Tensor& a, double b) { return assign(a, Expr(a) / b, "/="); }

Tensor sum(const Tensor& x) { return reduce_dim(x, std::nullopt, false, "sum"); }
Tensor mean(const Tensor& x) { return reduce_dim(x, std::nullopt, false, "mean"); }
Tensor max(const Tensor& x) { return reduce_dim(x, std::nullopt, false, "max"); }
Tensor min(const Tensor& x) { return reduce_dim(x, std::nullopt, false, "min"); }
Tensor sum(const Tensor& x, int64_t dim, bool keepdim) { return reduce_dim(x, dim, keepdim, "sum"); }
Tensor mean(const Tensor& x, int64_t dim, bool keepdim) { return reduce_dim(x, dim, keepdim, "mean"); }
Tensor max(const Tensor& x, int64_t dim, bool keepdim) { return reduce_dim(x, dim, keepdim, "max"); }
Tensor min(const Tensor& x, int64_t dim, bool keepdim) { return reduce_dim(x, dim, keepdim, "min"); }

}  // namespace ein
