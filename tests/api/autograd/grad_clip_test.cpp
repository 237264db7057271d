// Gradient clipping by global norm (include/ein/grad_clip.h) against a float64 reference of
// torch.nn.utils.clip_grad_norm_, with mixed dtypes and a parameter that has no gradient.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include <ein/grad_clip.h>
#include <ein/ops.h>

#include <ein/autograd.h>

#include "api/ops/ops_test_support.h"

namespace ein {
namespace {

/// Gives `p` the gradient `g` (as backward would): p.grad() = g.
void set_grad(const Tensor& p, const Tensor& g) {
  zero_grad({p});
  reduce(map("p[n m], g[n m] -> p * g", {p, g}), "n m -> ", "sum").backward();
}

struct Params {
  std::vector<Tensor> params;
  std::vector<std::vector<double>> grads;  // before clipping, as float64
  double norm = 0;                         // the float64 reference norm
};

// An f32 (3 x 50), an f64 (7 x 3), a parameter without a gradient and a bf16 (20 x 16), with
// gradients of standard deviation `scale`.
Params make_params(double scale) {
  Params r;
  const DType types[] = {DType::f32, DType::f64, DType::f32, DType::bf16};
  const Shape shapes[] = {{3, 50}, {7, 3}, {4, 4}, {20, 16}};
  for (int i = 0; i < 4; ++i) {
    Tensor p = randn(shapes[i], types[i], cpu(), 100 + i).requires_grad_();
    if (i != 2) {
      const Tensor g = map("g[n m], s[] -> g * s",
                           {randn(shapes[i], types[i], cpu(), 200 + i), full({}, scale, types[i])});
      set_grad(p, g);
    }
    r.params.push_back(p);
    r.grads.push_back(i == 2 ? std::vector<double>{} : p.grad().to_vector<double>());
    for (double x : r.grads.back())
      r.norm += x * x;
  }
  r.norm = std::sqrt(r.norm);
  return r;
}

TEST(GradClip, NormMatchesFloat64) {
  const Params r = make_params(1.0);
  // f32 sums of squares of a few hundred O(1) terms: relative error well under 1e-6.
  EXPECT_NEAR(optim::grad_norm(r.params), r.norm, 1e-6 * r.norm);
  EXPECT_EQ(optim::grad_norm({}), 0.0);
  EXPECT_EQ(optim::grad_norm({r.params[2]}), 0.0);
}

// Gradients longer than the kernel's rows of 4,096 (a whole number of rows, and rows plus a
// remainder), and one of zero elements.
TEST(GradClip, NormOfLongGradientsMatchesFloat64) {
  std::vector<Tensor> params;
  double want = 0;
  const Shape shapes[] = {{2, 4096}, {3, 5001}, {0, 7}};
  for (int i = 0; i < 3; ++i) {
    Tensor p = randn(shapes[i], DType::f32, cpu(), 300 + i).requires_grad_();
    set_grad(p, randn(shapes[i], DType::f32, cpu(), 400 + i));
    params.push_back(p);
  }
  for (const Tensor& p : params)
    for (double x : p.grad().to_vector<double>())
      want += x * x;
  want = std::sqrt(want);
  EXPECT_NEAR(optim::grad_norm(params), want, 1e-6 * want);
  // A kernel per part (the first gradient's rows; the second's rows, then its remainder), each
  // storing into one tensor of every part's sum, and one reduction: no copy per gradient.
  const int64_t before = testing::kernel_launches();
  optim::grad_norm(params);
  EXPECT_EQ(testing::kernel_launches() - before, 4);
}

TEST(GradClip, ScalesEveryGradientWhenTheNormIsLarger) {
  const Params r = make_params(3.0);
  const double max_norm = 1.5;
  const double total = optim::clip_grad_norm_(r.params, max_norm);
  EXPECT_NEAR(total, r.norm, 1e-6 * r.norm);
  const double coef = max_norm / (r.norm + 1e-6);
  // The factor carries the f32 error of the total (the f32 and bf16 sums of squares, ~1e-7
  // relative) into every gradient, f64 ones included; bf16 results then round (2^-8 relative).
  const double rel[] = {1e-6, 1e-6, 0, 4e-3};
  for (size_t i = 0; i < r.params.size(); ++i) {
    if (i == 2) {
      EXPECT_FALSE(r.params[i].grad().defined());
      continue;
    }
    EXPECT_EQ(r.params[i].grad().dtype(), r.params[i].dtype());
    const std::vector<double> got = r.params[i].grad().to_vector<double>();
    for (size_t k = 0; k < got.size(); ++k)
      ASSERT_NEAR(got[k], r.grads[i][k] * coef, rel[i] * std::abs(r.grads[i][k] * coef) + 1e-30)
          << "param " << i << " [" << k << "]";
  }
  EXPECT_NEAR(optim::grad_norm(r.params), max_norm, 2e-3 * max_norm);
}

TEST(GradClip, LeavesGradientsAloneBelowTheLimit) {
  const Params r = make_params(0.01);
  const double total = optim::clip_grad_norm_(r.params, 10.0);
  EXPECT_NEAR(total, r.norm, 1e-6 * r.norm);
  for (size_t i = 0; i < r.params.size(); ++i)
    if (i != 2) {
      EXPECT_EQ(r.params[i].grad().to_vector<double>(), r.grads[i]) << i;
    }
}

TEST(GradClip, ReportsNonFiniteNorms) {
  for (double bad : {std::numeric_limits<double>::infinity(), std::nan("")}) {
    Tensor p = randn({2, 3}, DType::f32, cpu(), 1).requires_grad_();
    set_grad(p, from_data<float>({1, 2, static_cast<float>(bad), 4, 5, 6}, {2, 3}));
    EXPECT_THROW(optim::clip_grad_norm_({p}, 1.0, /*error_if_nonfinite=*/true), RuntimeError);
    const double total = optim::clip_grad_norm_({p}, 1.0);
    EXPECT_FALSE(std::isfinite(total));
    EXPECT_EQ(std::isnan(total), std::isnan(bad));
  }
}

}  // namespace
}  // namespace ein
