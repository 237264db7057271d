// Tensor arithmetic (include/ein/tensor_math.h): each op is a map() over generated axis names
// (a0 a1 ...) aligned on the right, so broadcasting is by position; reductions are einops
// reduce() patterns over the same names.
#include <ein/tensor_math.h>

#include <algorithm>
#include <string>
#include <vector>

#include <ein/errors.h>
#include <ein/ops.h>
#include <fmt/format.h>

namespace ein {
namespace {

bool is_integer(DType t) {
  return t == DType::i64 || t == DType::i32 || t == DType::i8 || t == DType::u8;
}
bool is_low_float(DType t) {
  return t == DType::f16 || t == DType::bf16;
}

/// "name[aK ... aN]" for a tensor of rank r in a result of rank n (right-aligned).
std::string operand(const char* name, int64_t r, int64_t n) {
  std::string axes;
  for (int64_t d = n - r; d < n; ++d)
    axes += fmt::format("{}a{}", axes.empty() ? "" : " ", d);
  return fmt::format("{}[{}]", name, axes);
}

/// map(`body` over inputs x, y, z...) with positional broadcasting.
Tensor elementwise(const std::string& body, const std::vector<Tensor>& xs) {
  int64_t n = 0;
  for (const Tensor& x : xs) {
    if (!x.defined()) throw RuntimeError("tensor arithmetic: an operand is undefined");
    n = std::max(n, x.dim());
  }
  static const char* names[] = {"x", "y", "z"};
  std::string text;
  for (size_t i = 0; i < xs.size(); ++i)
    text += (i ? ", " : "") + operand(names[i], xs[i].dim(), n);
  return map(text + " -> " + body, xs);
}

/// A scalar operand for `t`: a 0-dim tensor of t's integer dtype (integral scalars), else f64
/// for f64 tensors and f32 otherwise.
Tensor scalar_for(const Tensor& t, double v) {
  const DType d = is_integer(t.dtype()) && v == static_cast<double>(static_cast<int64_t>(v))
                      ? t.dtype()
                      : t.dtype() == DType::f64 ? DType::f64 : DType::f32;
  return full({}, v, d, t.device());
}

/// `body` with the scalar as y (or x when `scalar_first`); a bf16/f16 tensor keeps its dtype.
Tensor with_scalar(const Tensor& t, double v, const std::string& body, bool scalar_first = false) {
  const Tensor s = scalar_for(t, v);
  const Tensor out = scalar_first ? elementwise(body, {s, t}) : elementwise(body, {t, s});
  return is_low_float(t.dtype()) && out.dtype() != t.dtype() ? cast(out, t.dtype()) : out;
}

Tensor compare(const std::string& body, const std::vector<Tensor>& xs) {
  return cast(elementwise(body, xs), DType::boolean);
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

Tensor operator+(const Tensor& a, const Tensor& b) { return elementwise("x + y", {a, b}); }
Tensor operator-(const Tensor& a, const Tensor& b) { return elementwise("x - y", {a, b}); }
Tensor operator*(const Tensor& a, const Tensor& b) { return elementwise("x * y", {a, b}); }
Tensor operator/(const Tensor& a, const Tensor& b) { return elementwise("x / y", {a, b}); }
Tensor operator+(const Tensor& a, double b) { return with_scalar(a, b, "x + y"); }
Tensor operator-(const Tensor& a, double b) { return with_scalar(a, b, "x - y"); }
Tensor operator*(const Tensor& a, double b) { return with_scalar(a, b, "x * y"); }
Tensor operator/(const Tensor& a, double b) { return with_scalar(a, b, "x / y"); }
Tensor operator+(double a, const Tensor& b) { return with_scalar(b, a, "x + y", true); }
Tensor operator-(double a, const Tensor& b) { return with_scalar(b, a, "x - y", true); }
Tensor operator*(double a, const Tensor& b) { return with_scalar(b, a, "x * y", true); }
Tensor operator/(double a, const Tensor& b) { return with_scalar(b, a, "x / y", true); }
Tensor operator-(const Tensor& a) { return elementwise("-x", {a}); }

Tensor operator<(const Tensor& a, const Tensor& b) { return compare("x < y", {a, b}); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return compare("x <= y", {a, b}); }
Tensor operator>(const Tensor& a, const Tensor& b) { return compare("x > y", {a, b}); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return compare("x >= y", {a, b}); }
Tensor operator<(const Tensor& a, double b) { return compare("x < y", {a, scalar_for(a, b)}); }
Tensor operator<=(const Tensor& a, double b) { return compare("x <= y", {a, scalar_for(a, b)}); }
Tensor operator>(const Tensor& a, double b) { return compare("x > y", {a, scalar_for(a, b)}); }
Tensor operator>=(const Tensor& a, double b) { return compare("x >= y", {a, scalar_for(a, b)}); }
Tensor eq(const Tensor& a, const Tensor& b) { return compare("x == y", {a, b}); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare("x != y", {a, b}); }

Tensor pow(const Tensor& a, double exponent) {
  if (exponent == 2) return elementwise("square(x)", {a});
  return with_scalar(a, exponent, "x ** y");
}
Tensor pow(const Tensor& a, const Tensor& exponent) { return elementwise("x ** y", {a, exponent}); }
Tensor where(const Tensor& condition, const Tensor& x, const Tensor& y) {
  // The condition does not decide the dtype: it is compared with 0 as its own type.
  return elementwise("where(x, y, z)", {condition, x, y});
}
Tensor maximum(const Tensor& a, const Tensor& b) { return elementwise("maximum(x, y)", {a, b}); }
Tensor minimum(const Tensor& a, const Tensor& b) { return elementwise("minimum(x, y)", {a, b}); }

Tensor exp(const Tensor& x) { return elementwise("exp(x)", {x}); }
Tensor log(const Tensor& x) { return elementwise("log(x)", {x}); }
Tensor sqrt(const Tensor& x) { return elementwise("sqrt(x)", {x}); }
Tensor rsqrt(const Tensor& x) { return elementwise("rsqrt(x)", {x}); }
Tensor abs(const Tensor& x) { return elementwise("abs(x)", {x}); }
Tensor tanh(const Tensor& x) { return elementwise("tanh(x)", {x}); }
Tensor sigmoid(const Tensor& x) { return elementwise("sigmoid(x)", {x}); }
Tensor relu(const Tensor& x) { return elementwise("relu(x)", {x}); }
Tensor gelu(const Tensor& x) { return elementwise("gelu(x)", {x}); }
Tensor sin(const Tensor& x) { return elementwise("sin(x)", {x}); }
Tensor cos(const Tensor& x) { return elementwise("cos(x)", {x}); }
Tensor square(const Tensor& x) { return elementwise("square(x)", {x}); }
Tensor floor(const Tensor& x) { return elementwise("floor(x)", {x}); }
Tensor round(const Tensor& x) { return elementwise("round(x)", {x}); }

Tensor sum(const Tensor& x) { return reduce_dim(x, std::nullopt, false, "sum"); }
Tensor mean(const Tensor& x) { return reduce_dim(x, std::nullopt, false, "mean"); }
Tensor max(const Tensor& x) { return reduce_dim(x, std::nullopt, false, "max"); }
Tensor min(const Tensor& x) { return reduce_dim(x, std::nullopt, false, "min"); }
Tensor sum(const Tensor& x, int64_t dim, bool keepdim) { return reduce_dim(x, dim, keepdim, "sum"); }
Tensor mean(const Tensor& x, int64_t dim, bool keepdim) { return reduce_dim(x, dim, keepdim, "mean"); }
Tensor max(const Tensor& x, int64_t dim, bool keepdim) { return reduce_dim(x, dim, keepdim, "max"); }
Tensor min(const Tensor& x, int64_t dim, bool keepdim) { return reduce_dim(x, dim, keepdim, "min"); }

}  // namespace ein
