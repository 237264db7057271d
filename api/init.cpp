// The initialisers of include/ein/init.h. Every value is computed in double from
// uniform_at/normal_at(seed, i) and rounded once to the dtype, on the CPU in parallel chunks
// whose split cannot change any value; the tensor then moves to its device.
#include <ein/init.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include <ein/errors.h>
#include <fmt/format.h>

#include "runtime/parallel.h"
#include "runtime/random.h"
#include <ein/scalar_convert.h>

namespace ein::init {
namespace {

// Elements per parallel task (a Philox block costs tens of nanoseconds).
constexpr int64_t kGrain = int64_t{1} << 14;

// The dtype's significand bits (ein/dtype.h), for the dtypes a parameter may have.
int significand_bits(DType dtype, const char* who) {
  if (dtype == DType::f64 || dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16)
    return ein::significand_bits(dtype);
  throw RuntimeError(
      fmt::format("init::{}: needs dtype f64, f32, f16 or bf16, got {}", who, dtype_name(dtype)));
}

// A fresh tensor with element i = value_at(i) rounded to the dtype (in parallel; element i
// depends on i only), moved to the device, marked as a parameter when asked.
template <class F>
Tensor generate(Shape sizes, const Options& o, const F& value_at) {
  Tensor host = empty(std::move(sizes), o.dtype, cpu());
  auto* base = static_cast<char*>(host.data_ptr());
  const int64_t esize = host.element_size();
  parallel_for(0, host.numel(), kGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      store_from_double(base + i * esize, o.dtype, value_at(i));
  });
  Tensor out = host.to(o.device);
  if (o.requires_grad) out.requires_grad_();
  return out;
}

// The largest (up) or smallest (down) number with `bits` significand bits not above (not
// below) x: directed rounding of a normal number, so a value clamped to [a, b] stays there.
double round_directed(double x, int bits, bool down) {
  if (x == 0 || !std::isfinite(x)) return x;
  int e = 0;
  std::frexp(x, &e);  // x = m · 2^e, 0.5 <= |m| < 1
  const double scale = std::ldexp(1.0, bits - e);
  return (down ? std::floor(x * scale) : std::ceil(x * scale)) / scale;
}

// x (in [a, b]) as stored in `dtype`: nearest, unless that leaves [a, b].
double round_inside(double x, double a, double b, DType dtype, int bits) {
  alignas(8) unsigned char buf[8];
  store_from_double(buf, dtype, x);
  const double stored = load_as_double(buf, dtype);
  if (stored > b) return round_directed(x, bits, /*down=*/true);
  if (stored < a) return round_directed(x, bits, /*down=*/false);
  return stored;
}

// Φ(x), the standard normal CDF.
double normal_cdf(double x) {
  return 0.5 * std::erfc(-x / std::numbers::sqrt2);
}

}  // namespace

double normal_quantile(double p) {
  // Acklam (2003), "An algorithm for computing the inverse normal cumulative distribution
  // function": relative error 1.15e-9, then one Halley step on Φ(x) − p.
  static constexpr double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,
                                 -2.759285104469687e+02, 1.383577518672690e+02,
                                 -3.066479806614716e+01, 2.506628277459239e+00};
  static constexpr double b[] = {-5.447609879822406e+01, 1.615858368580409e+02,
                                 -1.556989798598866e+02, 6.680131188771972e+01,
                                 -1.328068155288572e+01};
  static constexpr double c[] = {-7.784894002430293e-03, -3.223964580411365e-01,
                                 -2.400758277161838e+00, -2.549732539343734e+00,
                                 4.374664141464968e+00,  2.938163982698783e+00};
  static constexpr double d[] = {7.784695709041462e-03, 3.224671290700398e-01,
                                 2.445134137142996e+00, 3.754408661907416e+00};
  if (!(p > 0 && p < 1)) {
    if (p == 0) return -INFINITY;
    if (p == 1) return INFINITY;
    return NAN;
  }
  constexpr double kLow = 0.02425;
  double x = 0;
  if (p < kLow || p > 1 - kLow) {
    const double q = std::sqrt(-2 * std::log(p < kLow ? p : 1 - p));
    x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
    if (p > kLow) x = -x;
  } else {
    const double q = p - 0.5, r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
  }
  const double e = normal_cdf(x) - p;
  const double u = e * std::sqrt(2 * std::numbers::pi) * std::exp(x * x / 2);
  return x - u / (1 + x * u / 2);
}

namespace {

/// The options' seed, or default_generator()'s next draw when they give none.
uint64_t seed_of(const Options& o) {
  return o.seed ? *o.seed : default_generator().next_seed();
}

}  // namespace

Tensor normal(Shape sizes, double mean, double stddev, const Options& o) {
  significand_bits(o.dtype, "normal");
  if (!(stddev >= 0) || !std::isfinite(mean))
    throw RuntimeError(fmt::format(
        "init::normal: needs a finite mean and stddev >= 0, got mean {} stddev {}", mean, stddev));
  return generate(std::move(sizes), o, [=, seed = seed_of(o)](int64_t i) {
    return mean + stddev * normal_at(seed, static_cast<uint64_t>(i));
  });
}

Tensor fan_in_normal(Shape sizes, int64_t fan_in, const Options& o) {
  if (fan_in <= 0)
    throw RuntimeError(fmt::format("init::fan_in_normal: fan_in must be positive, got {}", fan_in));
  return normal(std::move(sizes), 0.0, 1.0 / std::sqrt(static_cast<double>(fan_in)), o);
}

Tensor fan_in_normal(Shape sizes, const Options& o) {
  if (sizes.empty())
    throw RuntimeError(
        "init::fan_in_normal: a 0-dim tensor has no fan-in; give a shape (input_dim, ...) or "
        "fan_in explicitly");
  const int64_t fan_in = sizes[0];
  return fan_in_normal(std::move(sizes), fan_in, o);
}

Tensor trunc_normal(Shape sizes, double mean, double stddev, double a, double b, const Options& o) {
  const int bits = significand_bits(o.dtype, "trunc_normal");
  if (!(stddev > 0) || !(a < b) || !std::isfinite(mean))
    throw RuntimeError(fmt::format(
        "init::trunc_normal: needs stddev > 0, a < b and a finite mean, got mean {} stddev {} "
        "bounds [{}, {}]",
        mean, stddev, a, b));
  // Sample the side of the mean with the smaller CDF values, where Φ keeps its precision:
  // X = mean + stddev · Φ⁻¹(U), U uniform in [Φ(α), Φ(β)], α = (a − mean)/stddev, β = (b −
  // mean)/stddev.
  const bool flip = (a - mean) + (b - mean) > 0;
  const double alpha = flip ? (mean - b) / stddev : (a - mean) / stddev;
  const double beta = flip ? (mean - a) / stddev : (b - mean) / stddev;
  const double lo = normal_cdf(alpha), hi = normal_cdf(beta);
  const DType dtype = o.dtype;
  return generate(std::move(sizes), o, [=, seed = seed_of(o)](int64_t i) {
    const double u = lo + (hi - lo) * uniform_at(seed, static_cast<uint64_t>(i));
    double z = normal_quantile(std::clamp(u, lo, hi));
    if (flip) z = -z;
    const double x = std::clamp(mean + stddev * z, a, b);
    return round_inside(x, a, b, dtype, bits);
  });
}

Tensor uniform(Shape sizes, double a, double b, const Options& o) {
  const int bits = significand_bits(o.dtype, "uniform");
  if (!(a <= b) || !std::isfinite(a) || !std::isfinite(b))
    throw RuntimeError(
        fmt::format("init::uniform: needs finite bounds with a <= b, got [{}, {})", a, b));
  return generate(std::move(sizes), o, [=, seed = seed_of(o)](int64_t i) {
    return a + (b - a) * uniform_at(seed, static_cast<uint64_t>(i), bits);
  });
}

Tensor zeros(Shape sizes, const Options& o) {
  significand_bits(o.dtype, "zeros");
  Tensor out = ein::zeros(std::move(sizes), o.dtype, o.device);
  if (o.requires_grad) out.requires_grad_();
  return out;
}

Tensor ones(Shape sizes, const Options& o) {
  significand_bits(o.dtype, "ones");
  Tensor out = ein::ones(std::move(sizes), o.dtype, o.device);
  if (o.requires_grad) out.requires_grad_();
  return out;
}

}  // namespace ein::init
