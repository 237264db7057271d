// The reference interpreter's elementwise ops (unary, binary, where, cast) and softmax: one
// scalar formula per op, applied over numpy-broadcast operands. Casts round with explicit
// arithmetic on the value, independent of any runtime conversion code.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <string>

#include <ein/errors.h>

#include "compiler/reference/reference.h"

namespace ein::reference {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

double apply(UnaryOp op, double x) {
  switch (op) {
    case UnaryOp::neg:
      return -x;
    case UnaryOp::abs:
      return std::fabs(x);
    case UnaryOp::exp:
      return std::exp(x);
    case UnaryOp::log:
      return std::log(x);
    case UnaryOp::sqrt:
      return std::sqrt(x);
    case UnaryOp::rsqrt:
      return 1.0 / std::sqrt(x);
    case UnaryOp::tanh:
      return std::tanh(x);
    case UnaryOp::sigmoid:
      return 1.0 / (1.0 + std::exp(-x));
    case UnaryOp::relu:  // NaN and -0 stay, as torch.relu
      return x < 0 ? 0.0 : x;
    case UnaryOp::gelu:  // x * Phi(x) (Hendrycks & Gimpel 2016; torch.nn.GELU())
      return 0.5 * x * (1.0 + std::erf(x / std::numbers::sqrt2));
    case UnaryOp::gelu_tanh: {  // torch.nn.GELU(approximate='tanh')
      const double k = std::sqrt(2.0 / std::numbers::pi);
      return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
    }
    case UnaryOp::silu:  // x * sigmoid(x) (torch.nn.SiLU)
      return x / (1.0 + std::exp(-x));
    case UnaryOp::sin:
      return std::sin(x);
    case UnaryOp::cos:
      return std::cos(x);
    case UnaryOp::square:
      return x * x;
    case UnaryOp::reciprocal:
      return 1.0 / x;
    case UnaryOp::sign:  // torch.sign: 0 for ±0 and NaN
      return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0);
  }
  throw RuntimeError("reference: unknown unary op");
}

double apply(BinaryOp op, double a, double b) {
  switch (op) {
    case BinaryOp::add:
      return a + b;
    case BinaryOp::sub:
      return a - b;
    case BinaryOp::mul:
      return a * b;
    case BinaryOp::div:
      return a / b;
    case BinaryOp::pow:
      return std::pow(a, b);
    case BinaryOp::maximum:  // IEEE 754-2019: NaN propagates, -0 < +0
      if (std::isnan(a) || std::isnan(b)) return kNaN;
      return a > b || (a == b && !std::signbit(a)) ? a : b;
    case BinaryOp::minimum:
      if (std::isnan(a) || std::isnan(b)) return kNaN;
      return a < b || (a == b && std::signbit(a)) ? a : b;
    case BinaryOp::eq:
      return a == b ? 1 : 0;
    case BinaryOp::ne:
      return a != b ? 1 : 0;
    case BinaryOp::lt:
      return a < b ? 1 : 0;
    case BinaryOp::le:
      return a <= b ? 1 : 0;
    case BinaryOp::gt:
      return a > b ? 1 : 0;
    case BinaryOp::ge:
      return a >= b ? 1 : 0;
  }
  throw RuntimeError("reference: unknown binary op");
}

std::string shape_text(const Shape& shape) {
  return format_shape(shape);
}

// numpy's broadcast of several shapes: right-aligned; equal sizes, or 1, which stretches.
Shape broadcast_shapes(const std::vector<const Array*>& xs) {
  size_t rank = 0;
  for (const Array* x : xs)
    rank = std::max(rank, x->shape.size());
  Shape out(rank, 1);
  for (const Array* x : xs) {
    const size_t lead = rank - x->shape.size();
    for (size_t d = 0; d < x->shape.size(); ++d) {
      int64_t& o = out[lead + d];
      const int64_t s = x->shape[d];
      if (s == o || s == 1) continue;
      if (o != 1) {
        std::string shapes;
        for (const Array* y : xs)
          shapes += (shapes.empty() ? "" : ", ") + shape_text(y->shape);
        throw RuntimeError("shapes " + shapes + " do not broadcast: dimension " +
                           std::to_string(d) + " of " + shape_text(x->shape) + " is " +
                           std::to_string(s) + " where another operand has " + std::to_string(o));
      }
      o = s;
    }
  }
  return out;
}

// The element of `x` that a broadcast result reads at `index` (of the broadcast rank).
double broadcast_read(const Array& x, const std::vector<int64_t>& index) {
  const size_t lead = index.size() - x.shape.size();
  int64_t off = 0;
  for (size_t d = 0; d < x.shape.size(); ++d)
    off = off * x.shape[d] + (x.shape[d] == 1 ? 0 : index[lead + d]);
  return x.data[off];
}

// out[i] = f(operands broadcast to a common shape, read at i).
template <typename F>
Array broadcast_map(const std::vector<const Array*>& xs, F&& f) {
  Array out = Array::filled(broadcast_shapes(xs), 0.0);
  if (out.numel() == 0) return out;
  std::vector<int64_t> index(out.shape.size(), 0);
  std::vector<double> args(xs.size());
  int64_t o = 0;
  do {
    for (size_t k = 0; k < xs.size(); ++k)
      args[k] = broadcast_read(*xs[k], index);
    out.data[o++] = f(args);
  } while (next_index(index, out.shape));
  return out;
}

/// A binary floating-point format: `mantissa_bits` stored fraction bits, the smallest
/// normal exponent, the largest finite value, and whether it has an infinity.
struct FloatFormat {
  int mantissa_bits;
  int min_exponent;
  double max_finite;
  bool has_infinity;
};

// IEEE binary32 / binary16, bfloat16, and the OCP 8-bit formats (E4M3 is PyTorch's
// float8_e4m3fn: no infinity, NaN at 0x7F, max 448; E5M2 is IEEE-like, max 57344).
constexpr FloatFormat kF32{23, -126, 0x1.fffffep127, true};
constexpr FloatFormat kF16{10, -14, 65504.0, true};
constexpr FloatFormat kBF16{7, -126, 0x1.fep127, true};
constexpr FloatFormat kF8E4M3{3, -6, 448.0, false};
constexpr FloatFormat kF8E5M2{2, -14, 57344.0, true};

// Round to nearest, ties to even, on the value: the representable numbers near |v| are
// multiples of quantum = 2^(e - mantissa_bits), e being v's exponent (clamped to the smallest
// normal exponent, which gives the subnormals). Rounded values past the largest finite one
// overflow to inf, or to NaN in formats without inf (PyTorch's non-saturating conversion).
double round_to(double v, const FloatFormat& f) {
  if (std::isnan(v) || v == 0) return v;
  if (std::isinf(v)) return f.has_infinity ? v : kNaN;
  const double a = std::fabs(v);
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e with m in [0.5, 1): the leading bit is 2^(e-1)
  const double quantum = std::ldexp(1.0, std::max(e - 1, f.min_exponent) - f.mantissa_bits);
  const double scaled = a / quantum;  // exact: a power-of-two scaling
  double q = std::floor(scaled);
  const double frac = scaled - q;
  if (frac > 0.5 || (frac == 0.5 && std::fmod(q, 2.0) != 0)) q += 1;
  double rounded = q * quantum;
  if (rounded > f.max_finite) rounded = f.has_infinity ? kInf : kNaN;
  return std::copysign(rounded, v);
}

// Truncation toward zero into [lo, hi_exclusive); anything else is undefined in C++ (and so
// in PyTorch's static_cast-based conversion), which an oracle must not guess.
double to_integer(double v, double lo, double hi_exclusive, DType dtype) {
  const double t = std::trunc(v);
  if (!std::isfinite(v) || t < lo || t >= hi_exclusive)
    throw RuntimeError("reference::cast: " + std::to_string(v) + " has no defined value as " +
                       std::string(dtype_name(dtype)));
  return t + 0.0;  // -0.0 becomes 0: integers have no signed zero
}

double cast_value(double v, DType dtype) {
  switch (dtype) {
    case DType::f64:
      return v;
    case DType::f32:
      return round_to(v, kF32);
    case DType::f16:
      return round_to(v, kF16);
    case DType::bf16:
      return round_to(v, kBF16);
    case DType::f8e4m3:
      return round_to(v, kF8E4M3);
    case DType::f8e5m2:
      return round_to(v, kF8E5M2);
    case DType::i64:
      return to_integer(v, -0x1p63, 0x1p63, dtype);
    case DType::i32:
      return to_integer(v, -0x1p31, 0x1p31, dtype);
    case DType::i8:
      return to_integer(v, -128, 128, dtype);
    case DType::u8:
      return to_integer(v, 0, 256, dtype);
    case DType::boolean:
      return v != 0 ? 1 : 0;  // NaN is true, as bool(nan) in C++ and PyTorch
  }
  throw RuntimeError("reference: unknown dtype");
}

// Applies `f(slice)` to every 1-d slice of `x` along `dim` (negative counts from the end).
template <typename F>
Array along_dim(const Array& x, int64_t dim, F&& f) {
  const int64_t rank = std::max<int64_t>(static_cast<int64_t>(x.shape.size()), 1);
  if (dim < -rank || dim >= rank)
    throw RuntimeError("dim " + std::to_string(dim) + " is out of range for an array of rank " +
                       std::to_string(x.shape.size()));
  const Shape shape = x.shape.empty() ? Shape{1} : x.shape;  // rank 0 acts as (1,)
  const size_t d = static_cast<size_t>(dim < 0 ? dim + rank : dim);
  Array out = x;
  if (x.numel() == 0) return out;
  Shape outer = shape;
  outer[d] = 1;
  auto offset = [&](const std::vector<int64_t>& index) {
    int64_t off = 0;
    for (size_t k = 0; k < shape.size(); ++k)
      off = off * shape[k] + index[k];
    return off;
  };
  std::vector<int64_t> index(shape.size(), 0);
  std::vector<double> slice(static_cast<size_t>(shape[d]));
  do {
    for (int64_t k = 0; k < shape[d]; ++k) {
      index[d] = k;
      slice[k] = x.data[offset(index)];
    }
    f(slice);
    for (int64_t k = 0; k < shape[d]; ++k) {
      index[d] = k;
      out.data[offset(index)] = slice[k];
    }
    index[d] = 0;
  } while (next_index(index, outer));
  return out;
}

}  // namespace

Array unary(UnaryOp op, const Array& x) {
  Array out = x;
  for (double& v : out.data)
    v = apply(op, v);
  return out;
}

Array binary(BinaryOp op, const Array& a, const Array& b) {
  return broadcast_map({&a, &b},
                       [&](const std::vector<double>& v) { return apply(op, v[0], v[1]); });
}

Array where(const Array& cond, const Array& a, const Array& b) {
  return broadcast_map({&cond, &a, &b},
                       [](const std::vector<double>& v) { return v[0] != 0 ? v[1] : v[2]; });
}

Array cast(const Array& x, DType dtype) {
  Array out = x;
  for (double& v : out.data)
    v = cast_value(v, dtype);
  return out;
}

Array softmax(const Array& x, int64_t dim) {
  // softmax(x)_i = exp(x_i - m) / sum_j exp(x_j - m), m = max_j x_j (torch.softmax); a row
  // of -inf gives NaN, as in torch.
  return along_dim(x, dim, [](std::vector<double>& s) {
    const double m = *std::max_element(s.begin(), s.end());
    double sum = 0;
    for (double& v : s)
      sum += (v = std::exp(v - m));
    for (double& v : s)
      v /= sum;
  });
}

Array log_softmax(const Array& x, int64_t dim) {
  return along_dim(x, dim, [](std::vector<double>& s) {
    const double m = *std::max_element(s.begin(), s.end());
    double sum = 0;
    for (double v : s)
      sum += std::exp(v - m);
    const double log_sum = std::log(sum);
    for (double& v : s)
      v = v - m - log_sum;
  });
}

}  // namespace ein::reference
