// Initialisers (include/ein/init.h): sample statistics on large tensors, exact truncation
// bounds, determinism across shapes and thread counts, the lecture's fan-in scaling, dtypes.
#include <gtest/gtest.h>
#include <tbb/global_control.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include <ein/init.h>
#include <ein/ops.h>

#include <ein/autograd.h>
#include "runtime/random.h"

namespace ein {
namespace {

struct Moments {
  double mean = 0, stddev = 0, min = INFINITY, max = -INFINITY;
};

Moments moments(const Tensor& t) {
  const std::vector<double> v = t.to_vector<double>();
  Moments m;
  for (double x : v) {
    m.mean += x;
    m.min = std::min(m.min, x);
    m.max = std::max(m.max, x);
  }
  m.mean /= static_cast<double>(v.size());
  for (double x : v)
    m.stddev += (x - m.mean) * (x - m.mean);
  m.stddev = std::sqrt(m.stddev / static_cast<double>(v.size() - 1));
  return m;
}

double phi(double x) {
  return std::exp(-x * x / 2) / std::sqrt(2 * std::numbers::pi);
}
double cdf(double x) {
  return 0.5 * std::erfc(-x / std::numbers::sqrt2);
}

constexpr int64_t kN = int64_t{1} << 20;
const DType kFloatTypes[] = {DType::f32, DType::bf16, DType::f64};

// With n = 2^20 samples the standard error of the mean is σ/1024 and of the standard deviation
// about σ/1448; the tolerances are ~8 standard errors, wide enough for bf16's rounding (a
// relative 2^-9 per element, unbiased) and still far below any scaling mistake.
TEST(Init, NormalMeanAndStd) {
  for (DType t : kFloatTypes) {
    const Moments m = moments(init::normal({kN}, 0.5, 2.0, {.dtype = t, .seed = 3}));
    EXPECT_NEAR(m.mean, 0.5, 8 * 2.0 / 1024) << dtype_name(t);
    EXPECT_NEAR(m.stddev, 2.0, 8 * 2.0 / 1448) << dtype_name(t);
  }
}

TEST(Init, NormalIsMeanPlusStdTimesNormalAt) {
  const Tensor t = init::normal({3, 5}, -1.0, 0.25, {.dtype = DType::f64, .seed = 11});
  const std::vector<double> v = t.to_vector<double>();
  for (size_t i = 0; i < v.size(); ++i)
    EXPECT_EQ(v[i], -1.0 + 0.25 * normal_at(11, i)) << i;
  EXPECT_EQ(init::normal({3, 5}, 0, 1, {.dtype = DType::f32, .seed = 11}).to_vector<float>(),
            randn({3, 5}, DType::f32, cpu(), 11).to_vector<float>());
}

TEST(Init, DeterministicAcrossShapesAndThreadCounts) {
  const init::Options o{.dtype = DType::f32, .seed = 42};
  const std::vector<float> flat = init::trunc_normal({kN}, 0, 1, -2, 2, o).to_vector<float>();
  std::vector<float> one_thread;
  {
    tbb::global_control one(tbb::global_control::max_allowed_parallelism, 1);
    one_thread = init::trunc_normal({1024, 1024}, 0, 1, -2, 2, o).to_vector<float>();
  }
  EXPECT_EQ(flat, one_thread);
  // Element i depends on (seed, i) only: a smaller tensor is a prefix, another seed differs.
  const std::vector<float> prefix = init::trunc_normal({100}, 0, 1, -2, 2, o).to_vector<float>();
  EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), flat.begin()));
  const std::vector<float> other =
      init::trunc_normal({100}, 0, 1, -2, 2, {.seed = 43}).to_vector<float>();
  EXPECT_NE(prefix, other);
  EXPECT_EQ(init::uniform({kN}, -1, 1, o).to_vector<float>(),
            init::uniform({kN}, -1, 1, o).to_vector<float>());
}

// torch.nn.init.trunc_normal_'s statistics: mean μ + σ (φ(α) − φ(β)) / Z and variance
// σ² (1 + (α φ(α) − β φ(β)) / Z − ((φ(α) − φ(β)) / Z)²), Z = Φ(β) − Φ(α).
TEST(Init, TruncNormalBoundsHoldAndMomentsMatch) {
  struct Case {
    double mean, stddev, a, b;
  };
  const Case cases[] = {{0, 1, -2, 2}, {1, 0.5, 0.9, 3}, {0, 1, 3, 4}, {0, 0.02, -0.04, 0.04}};
  for (DType t : kFloatTypes)
    for (const Case& c : cases) {
      const Moments m =
          moments(init::trunc_normal({kN}, c.mean, c.stddev, c.a, c.b, {.dtype = t, .seed = 5}));
      const double al = (c.a - c.mean) / c.stddev, be = (c.b - c.mean) / c.stddev;
      const double z = cdf(be) - cdf(al), d = (phi(al) - phi(be)) / z;
      const double mean = c.mean + c.stddev * d;
      const double sd = c.stddev * std::sqrt(1 + (al * phi(al) - be * phi(be)) / z - d * d);
      SCOPED_TRACE(testing::Message() << dtype_name(t) << " N(" << c.mean << ", " << c.stddev
                                      << ") in [" << c.a << ", " << c.b << "]");
      EXPECT_GE(m.min, c.a);
      EXPECT_LE(m.max, c.b);
      EXPECT_NEAR(m.mean, mean, 8 * sd / 1024);
      EXPECT_NEAR(m.stddev, sd, 8 * sd / 1448 + 4e-3 * (c.b - c.a) * (t == DType::bf16));
    }
}

// Bounds that bf16 cannot represent: nearest rounding would step past ±0.1 (bf16's nearest
// to 0.1 is 0.10009765625), so values are rounded towards the inside instead.
TEST(Init, TruncNormalBoundsHoldExactlyAfterRounding) {
  for (DType t : kFloatTypes) {
    const Moments m = moments(init::trunc_normal({kN}, 0, 1, -0.1, 0.1, {.dtype = t}));
    EXPECT_GE(m.min, -0.1) << dtype_name(t);
    EXPECT_LE(m.max, 0.1) << dtype_name(t);
    EXPECT_GT(m.max, 0.099) << dtype_name(t);
  }
}

// Above x ≈ 3 the test's own cdf(x) is the limit: 1 − Φ(x) keeps only ~1e-16 / (1 − Φ(x))
// relative precision in double, which the quantile turns into ~1e-11 at x = 5.
TEST(Init, NormalQuantileInvertsTheCdf) {
  for (double x = -8; x <= 5; x += 0.125)
    EXPECT_NEAR(init::normal_quantile(cdf(x)), x, x <= 3 ? 1e-12 * std::max(1.0, -x) : 1e-10) << x;
  EXPECT_EQ(init::normal_quantile(0.5), 0.0);
}

TEST(Init, UniformMeanVarianceAndBounds) {
  for (DType t : kFloatTypes) {
    const Moments m = moments(init::uniform({kN}, -3, 5, {.dtype = t, .seed = 9}));
    const double sd = 8 / std::sqrt(12.0);
    EXPECT_GE(m.min, -3) << dtype_name(t);
    EXPECT_LE(m.max, 5) << dtype_name(t);
    EXPECT_NEAR(m.mean, 1, 8 * sd / 1024) << dtype_name(t);
    EXPECT_NEAR(m.stddev, sd, 8 * sd / 1448) << dtype_name(t);
  }
}

// The lecture's point: with W ~ N(0, 1/D) the outputs of x · W keep unit variance for unit
// inputs, where an unscaled randn gives variance D.
TEST(Init, FanInScalingKeepsOutputVarianceNearOne) {
  const int64_t B = 256, D = 1024, F = 256;
  const Tensor x = randn({B, D}, DType::f32, cpu(), 1);
  const Tensor w = init::fan_in_normal({D, F}, {.seed = 2});
  EXPECT_NEAR(moments(w).stddev, 1 / std::sqrt(double(D)), 1e-3);
  const double sd = moments(einsum("b d, d f -> b f", x, w)).stddev;
  EXPECT_NEAR(sd * sd, 1.0, 0.1);
  const double raw =
      moments(einsum("b d, d f -> b f", x, randn({D, F}, DType::f32, cpu(), 2))).stddev;
  EXPECT_NEAR(raw * raw / D, 1.0, 0.1);
  EXPECT_EQ(init::fan_in_normal({D, F}, D, {.seed = 2}).to_vector<float>(), w.to_vector<float>());
}

TEST(Init, ParametersAreLeavesThatRequireGrad) {
  const init::Options o{.dtype = DType::bf16, .requires_grad = true};
  for (const Tensor& p : {init::normal({4}, 0, 1, o), init::fan_in_normal({4, 2}, o),
                          init::trunc_normal({4}, 0, 1, -1, 1, o), init::uniform({4}, 0, 1, o),
                          init::zeros({4}, o), init::ones({4}, o)}) {
    EXPECT_TRUE(p.requires_grad());
    EXPECT_TRUE(p.is_leaf());
    EXPECT_EQ(p.dtype(), DType::bf16);
  }
  EXPECT_FALSE(init::zeros({2}).requires_grad());
  EXPECT_EQ(init::ones({3}, {.dtype = DType::f64}).to_vector<double>(),
            (std::vector<double>{1, 1, 1}));
  EXPECT_EQ(init::zeros({2}).to_vector<float>(), (std::vector<float>{0, 0}));
}

TEST(Init, RejectsBadArguments) {
  EXPECT_THROW(init::normal({2}, 0, 1, {.dtype = DType::i32}), RuntimeError);
  EXPECT_THROW(init::normal({2}, 0, -1), RuntimeError);
  EXPECT_THROW(init::trunc_normal({2}, 0, 1, 1, -1), RuntimeError);
  EXPECT_THROW(init::trunc_normal({2}, 0, 0, -1, 1), RuntimeError);
  EXPECT_THROW(init::uniform({2}, 1, 0), RuntimeError);
  EXPECT_THROW(init::fan_in_normal({}), RuntimeError);
  EXPECT_THROW(init::fan_in_normal({2}, 0), RuntimeError);
}

}  // namespace
}  // namespace ein
