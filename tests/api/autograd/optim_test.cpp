// Optimizers against float64 re-implementations of torch.optim's update rules, and a small
// training loop that must fit its data.
#include <gtest/gtest.h>

#include <cmath>

#include <ein/nn.h>
#include <ein/ops.h>
#include <ein/optim.h>

#include "exec/cpu_executor.h"
#include <ein/autograd.h>

namespace ein {
namespace {

/// Gives `p` the gradient `g` (as backward would): p.grad() = g.
void set_grad(const Tensor& p, const Tensor& g) {
  zero_grad({p});
  reduce(map("p[n], g[n] -> p * g", {p, g}), "n -> ", "sum").backward();
}

TEST(Optim, AdamWMatchesTorchsAlgorithm) {
  const optim::AdamWOptions o{
      .lr = 0.01, .beta1 = 0.8, .beta2 = 0.9, .eps = 1e-6, .weight_decay = 0.1};
  Tensor p = randn({37}, DType::f64, cpu(), 1).requires_grad_();
  std::vector<double> pv = p.to_vector<double>(), m(37, 0), v(37, 0);
  optim::AdamW opt({p}, o);
  for (int t = 1; t <= 3; ++t) {
    const Tensor g = randn({37}, DType::f64, cpu(), 10 + t);
    set_grad(p, g);
    opt.step();
    const std::vector<double> gv = g.to_vector<double>();
    for (size_t i = 0; i < pv.size(); ++i) {
      pv[i] *= 1 - o.lr * o.weight_decay;
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * gv[i];
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * gv[i] * gv[i];
      const double bc1 = 1 - std::pow(o.beta1, t), bc2 = 1 - std::pow(o.beta2, t);
      pv[i] -= o.lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + o.eps);
    }
    const std::vector<double> got = p.to_vector<double>();
    for (size_t i = 0; i < pv.size(); ++i)
      ASSERT_NEAR(got[i], pv[i], 1e-12) << "step " << t << " [" << i << "]";
  }
  EXPECT_EQ(opt.steps(), 3);
  EXPECT_TRUE(p.requires_grad());
  EXPECT_TRUE(p.is_leaf());
}

TEST(Optim, AdamWStepsCompileNothingNew) {
  Tensor p = randn({1000}, DType::f32, cpu(), 2).requires_grad_();
  optim::AdamW opt({p}, {.lr = 1e-3});
  const Tensor g = randn({1000}, DType::f32, cpu(), 3);
  set_grad(p, g);
  opt.step();
  const int64_t built = executor_stats().kernels_built;
  for (int i = 0; i < 3; ++i) {
    opt.options().lr *= 0.5;  // a schedule: new values, same kernel
    opt.step();
  }
  EXPECT_EQ(executor_stats().kernels_built, built);
}

TEST(Optim, SgdWithMomentumAndWeightDecay) {
  const optim::SGDOptions o{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01};
  Tensor p = randn({5}, DType::f64, cpu(), 4).requires_grad_();
  std::vector<double> pv = p.to_vector<double>(), b(5, 0);
  optim::SGD opt({p}, o);
  for (int t = 0; t < 3; ++t) {
    const Tensor g = randn({5}, DType::f64, cpu(), 20 + t);
    set_grad(p, g);
    opt.step();
    const std::vector<double> gv = g.to_vector<double>();
    for (size_t i = 0; i < 5; ++i) {
      const double gi = gv[i] + o.weight_decay * pv[i];
      b[i] = t == 0 ? gi : o.momentum * b[i] + gi;
      pv[i] -= o.lr * b[i];
    }
    const std::vector<double> got = p.to_vector<double>();
    for (size_t i = 0; i < 5; ++i)
      ASSERT_NEAR(got[i], pv[i], 1e-12) << "step " << t;
  }
}

TEST(Optim, RejectsWhatIsNotAParameter) {
  EXPECT_THROW(optim::AdamW({ones({3})}), RuntimeError);
  Tensor w = ones({3}).requires_grad_();
  EXPECT_THROW(optim::SGD({map("w[a] -> 2 * w", {w})}), RuntimeError);
}

// A two-layer MLP (Linear → GELU → Linear, MSE) fits a fixed batch: the loss falls 10×.
TEST(Optim, MlpTrainingLoopFits) {
  const int64_t B = 32, D = 16, H = 32;
  const Tensor x = randn({B, D}, DType::f32, cpu(), 5);
  const Tensor y = map("x[b d] -> sin(x)", {x});
  Tensor w1 = map("w[d h] -> w * 0.25", {randn({D, H}, DType::f32, cpu(), 6)}).requires_grad_();
  Tensor b1 = zeros({H}).requires_grad_();
  Tensor w2 = map("w[h d] -> w * 0.18", {randn({H, D}, DType::f32, cpu(), 7)}).requires_grad_();
  Tensor b2 = zeros({D}).requires_grad_();
  optim::AdamW opt({w1, b1, w2, b2}, {.lr = 1e-2, .weight_decay = 0});
  auto loss_fn = [&] {
    const Tensor h = map("h[b f], c[f] -> gelu(h + c)", {einsum("b d, d f -> b f", x, w1), b1});
    const Tensor out = map("o[b d], c[d] -> o + c", {einsum("b f, f d -> b d", h, w2), b2});
    return nn::mse_loss(out, y);
  };
  const double first = loss_fn().item();
  for (int step = 0; step < 200; ++step) {
    opt.zero_grad();
    loss_fn().backward();
    opt.step();
  }
  const double last = loss_fn().item();
  EXPECT_LT(last, first / 10) << "first " << first << ", last " << last;
}

}  // namespace
}  // namespace ein
