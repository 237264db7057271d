// Parameter initialisers, like torch.nn.init but functional: each returns a fresh tensor that
// is a pure function of (seed, shape, dtype) through the counter-based generator of
// runtime/random.h (element i from (seed, i)), so the values never depend on thread count or
// device. With `requires_grad` the result is a leaf that requires grad: a parameter. They do
// not fill existing tensors in place and know nothing about modules.
//
//   ein::init::Options o{.dtype = ein::DType::f32, .seed = 7, .requires_grad = true};
//   ein::Tensor w = ein::init::fan_in_normal({768, 3072}, o);  // randn(d, f) / sqrt(d)
//   ein::Tensor b = ein::init::zeros({3072}, o);
//   ein::Tensor e = ein::init::trunc_normal({50257, 768}, 0.0, 0.02, -0.04, 0.04, o);
#pragma once

#include <cstdint>
#include <optional>

#include <ein/tensor.h>

namespace ein::init {

/// Where and how an initialiser makes its tensor. The dtype must be f64, f32, f16 or bf16.
struct Options {
  DType dtype = DType::f32;    ///< element type of the result
  Device device = cpu();       ///< where the result lives (generated on the CPU, then moved)
  /// The one number the values depend on (with shape and dtype); none: default_generator()'s
  /// next draw (ein/random.h), so consecutive calls differ, as torch.nn.init's do.
  std::optional<uint64_t> seed = std::nullopt;
  bool requires_grad = false;  ///< return a leaf that requires grad (a parameter)
};

/// N(mean, std²) per element (torch.nn.init.normal_): mean + stddev · normal_at(seed, i).
Tensor normal(Shape sizes, double mean, double stddev, const Options& options = {});

/// N(0, 1 / fan_in): randn / sqrt(fan_in), which keeps the variance of x · W at the variance
/// of x for unit-variance inputs (the lecture's `torch.randn(input_dim, output_dim) /
/// np.sqrt(input_dim)`; LeCun et al. 1998).
Tensor fan_in_normal(Shape sizes, int64_t fan_in, const Options& options = {});

/// fan_in_normal with fan_in = sizes[0]: the lecture's (input_dim, output_dim) layout, used
/// as einsum("b d, d f -> b f", x, w). Needs at least one dimension.
Tensor fan_in_normal(Shape sizes, const Options& options = {});

/// N(mean, std²) truncated to [a, b] (torch.nn.init.trunc_normal_: a and b in absolute units,
/// not in multiples of stddev), by the inverse CDF of a uniform in [Φ(α), Φ(β)]. Every stored
/// value lies in [a, b] exactly: where rounding to the dtype would step outside, the value is
/// rounded towards the inside instead. Needs stddev > 0 and a < b.
Tensor trunc_normal(Shape sizes, double mean, double stddev, double a, double b,
                    const Options& options = {});

/// U[a, b) per element (torch.nn.init.uniform_): a + (b − a) · uniform_at(seed, i), with as
/// many random bits as the dtype's significand. Rounding may give b itself for f16/bf16.
Tensor uniform(Shape sizes, double a, double b, const Options& options = {});

/// Zeros (torch.nn.init.zeros_): biases, LayerNorm shifts. The seed is unused (and no draw taken).
Tensor zeros(Shape sizes, const Options& options = {});

/// Ones (torch.nn.init.ones_): LayerNorm/RMSNorm scales. The seed is unused.
Tensor ones(Shape sizes, const Options& options = {});

/// Φ⁻¹(p), the standard normal quantile, for p in (0, 1): Acklam's rational approximation
/// refined by one Halley step on erfc, accurate to about 1e-15 relative. Exposed for tests.
double normal_quantile(double p);

}  // namespace ein::init
