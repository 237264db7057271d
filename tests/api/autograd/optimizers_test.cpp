// Adam, Adagrad and RMSprop against float64 re-implementations of torch.optim's update rules
// (torch/optim/{adam,adagrad,rmsprop}.py, single-tensor path) over several steps, and the
// promise that a changing learning rate compiles no new kernel.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include <ein/ops.h>
#include <ein/checkpoint.h>
#include <ein/optim.h>

#include <ein/autograd.h>
#include "exec/cpu_executor.h"
#include "support/temp_path.h"

namespace ein {
namespace {

constexpr int64_t kN = 37;

/// Gives `p` the gradient `g` (as backward would): p.grad() = g.
void set_grad(const Tensor& p, const Tensor& g) {
  zero_grad({p});
  reduce(map("p[n], g[n] -> p * g", {p, g}), "n -> ", "sum").backward();
}

/// Runs `steps` steps of `step` on an f64 parameter with fresh random gradients, applying
/// `reference(t, p, g)` (t from 1) to a float64 copy, and compares after every step.
void check_against_reference(
    const Tensor& p, int steps, const std::function<void()>& step,
    const std::function<void(int, std::vector<double>&, const std::vector<double>&)>& reference) {
  std::vector<double> pv = p.to_vector<double>();
  for (int t = 1; t <= steps; ++t) {
    const Tensor g = randn({kN}, DType::f64, cpu(), 50 + t);
    set_grad(p, g);
    step();
    reference(t, pv, g.to_vector<double>());
    const std::vector<double> got = p.to_vector<double>();
    for (size_t i = 0; i < pv.size(); ++i)
      ASSERT_NEAR(got[i], pv[i], 1e-12) << "step " << t << " [" << i << "]";
  }
  EXPECT_TRUE(p.requires_grad());
  EXPECT_TRUE(p.is_leaf());
}

TEST(Optimizers, AdamMatchesTorch) {
  const optim::AdamOptions o{
      .lr = 0.01, .beta1 = 0.8, .beta2 = 0.9, .eps = 1e-6, .weight_decay = 0.1};
  Tensor p = randn({kN}, DType::f64, cpu(), 1).requires_grad_();
  optim::Adam opt({p}, o);
  std::vector<double> m(kN, 0), v(kN, 0);
  check_against_reference(
      p, 4, [&] { opt.step(); },
      [&](int t, std::vector<double>& pv, const std::vector<double>& gv) {
        for (size_t i = 0; i < pv.size(); ++i) {
          const double g = gv[i] + o.weight_decay * pv[i];
          m[i] = o.beta1 * m[i] + (1 - o.beta1) * g;
          v[i] = o.beta2 * v[i] + (1 - o.beta2) * g * g;
          const double bc1 = 1 - std::pow(o.beta1, t);
          const double bc2 = 1 - std::pow(o.beta2, t);
          pv[i] -= o.lr / bc1 * m[i] / (std::sqrt(v[i] / bc2) + o.eps);
        }
      });
  EXPECT_EQ(opt.steps(0), 4);
}

TEST(Optimizers, AdamWithoutDecayIsAdamWWithoutDecay) {
  Tensor a = randn({kN}, DType::f32, cpu(), 2).requires_grad_();
  Tensor b = a.detach().clone().requires_grad_();
  optim::Adam adam({a}, {.lr = 0.05});
  optim::AdamW adamw({b}, {.lr = 0.05, .weight_decay = 0});
  for (int t = 0; t < 3; ++t) {
    const Tensor g = randn({kN}, DType::f32, cpu(), 60 + t);
    set_grad(a, g);
    set_grad(b, g);
    adam.step();
    adamw.step();
  }
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
}

TEST(Optimizers, AdagradMatchesTorch) {
  const optim::AdagradOptions o{.lr = 0.1,
                                .lr_decay = 0.05,
                                .weight_decay = 0.01,
                                .initial_accumulator_value = 0.2,
                                .eps = 1e-10};
  Tensor p = randn({kN}, DType::f64, cpu(), 3).requires_grad_();
  optim::Adagrad opt({p}, o);
  std::vector<double> s(kN, o.initial_accumulator_value);
  check_against_reference(
      p, 4, [&] { opt.step(); },
      [&](int t, std::vector<double>& pv, const std::vector<double>& gv) {
        const double clr = o.lr / (1 + (t - 1) * o.lr_decay);
        for (size_t i = 0; i < pv.size(); ++i) {
          const double g = gv[i] + o.weight_decay * pv[i];
          s[i] += g * g;
          pv[i] -= clr * g / (std::sqrt(s[i]) + o.eps);
        }
      });
}

TEST(Optimizers, AdagradDefaultsAreTorchs) {
  const optim::AdagradOptions o;
  EXPECT_EQ(o.lr, 1e-2);
  EXPECT_EQ(o.lr_decay, 0);
  EXPECT_EQ(o.initial_accumulator_value, 0);
  EXPECT_EQ(o.eps, 1e-10);
  const optim::RMSpropOptions r;
  EXPECT_EQ(r.lr, 1e-2);
  EXPECT_EQ(r.alpha, 0.99);
  EXPECT_EQ(r.eps, 1e-8);
  EXPECT_FALSE(r.centered);
  const optim::AdamOptions a;
  EXPECT_EQ(a.lr, 1e-3);
  EXPECT_EQ(a.weight_decay, 0);
}

void check_rmsprop(const optim::RMSpropOptions& o) {
  Tensor p = randn({kN}, DType::f64, cpu(), 4).requires_grad_();
  optim::RMSprop opt({p}, o);
  std::vector<double> v(kN, 0), m(kN, 0), b(kN, 0);
  check_against_reference(
      p, 4, [&] { opt.step(); },
      [&](int, std::vector<double>& pv, const std::vector<double>& gv) {
        for (size_t i = 0; i < pv.size(); ++i) {
          const double g = gv[i] + o.weight_decay * pv[i];
          v[i] = o.alpha * v[i] + (1 - o.alpha) * g * g;
          double avg = v[i];
          if (o.centered) {
            m[i] = o.alpha * m[i] + (1 - o.alpha) * g;
            avg -= m[i] * m[i];
          }
          avg = std::sqrt(avg) + o.eps;
          if (o.momentum > 0) {
            b[i] = o.momentum * b[i] + g / avg;
            pv[i] -= o.lr * b[i];
          } else {
            pv[i] -= o.lr * g / avg;
          }
        }
      });
}

TEST(Optimizers, RmspropMatchesTorch) {
  check_rmsprop({.lr = 0.01, .alpha = 0.9});
}

TEST(Optimizers, RmspropCenteredWithMomentumAndDecayMatchesTorch) {
  check_rmsprop({.lr = 0.02,
                 .alpha = 0.8,
                 .eps = 1e-6,
                 .weight_decay = 0.1,
                 .momentum = 0.9,
                 .centered = true});
}

// Momentum and centering switched on after the first step start their state from zeros then,
// instead of reading state that was never allocated.
TEST(Optimizers, RmspropOptionsMayChangeBetweenSteps) {
  Tensor p = randn({kN}, DType::f32, cpu(), 9).requires_grad_();
  optim::RMSprop opt({p});
  set_grad(p, randn({kN}, DType::f32, cpu(), 10));
  opt.step();
  opt.options().centered = true;
  opt.options().momentum = 0.9;
  opt.step();
  for (float x : p.to_vector<float>())
    ASSERT_TRUE(std::isfinite(x));
}

// A schedule writes a new lr into the options every step; the kernels stay the same.
TEST(Optimizers, LearningRateChangesCompileNothingNew) {
  Tensor p = randn({1000}, DType::f32, cpu(), 5).requires_grad_();
  optim::Adam adam({p}, {.weight_decay = 0.01});
  optim::Adagrad adagrad({p}, {.lr_decay = 0.1, .weight_decay = 0.01});
  optim::RMSprop rmsprop({p}, {.weight_decay = 0.01, .momentum = 0.5, .centered = true});
  set_grad(p, randn({1000}, DType::f32, cpu(), 6));
  const auto all_steps = [&] {
    adam.step();
    adagrad.step();
    rmsprop.step();
  };
  all_steps();
  const int64_t built = executor_stats().kernels_built;
  for (int i = 0; i < 3; ++i) {
    adam.options().lr *= 0.5;
    adagrad.options().lr *= 0.5;
    rmsprop.options().lr *= 0.5;
    all_steps();
  }
  EXPECT_EQ(executor_stats().kernels_built, built);
}

TEST(Optimizers, SkipParametersWithoutGradientAndRejectNonParameters) {
  Tensor a = randn({3}, DType::f32, cpu(), 7).requires_grad_();
  Tensor b = randn({3}, DType::f32, cpu(), 8).requires_grad_();
  const std::vector<float> b0 = b.to_vector<float>();
  optim::Adam opt({a, b});
  set_grad(a, ones({3}));
  opt.step();
  EXPECT_EQ(b.to_vector<float>(), b0);
  EXPECT_EQ(opt.steps(0), 1);
  EXPECT_EQ(opt.steps(1), 0);
  EXPECT_THROW(optim::Adagrad({ones({3})}), RuntimeError);
  EXPECT_THROW(optim::RMSprop({ones({3})}), RuntimeError);
  EXPECT_THROW(optim::Adam({ones({3})}), RuntimeError);
}

// state_dict() → safetensors → load_state_dict() into a fresh optimizer over copies of the
// parameters: the next steps are bitwise those of the optimizer that kept going, for every
// optimizer and its state (moments, step counts, momentum buffers, centered averages).
template <class Optimizer, class Options>
void check_resume(Options options, const char* name) {
  const auto fresh = [](uint64_t seed) {
    return randn({kN}, DType::f32, cpu(), seed).requires_grad_();
  };
  Tensor a = fresh(1), b = fresh(2);
  Optimizer live({a, b}, options);
  const auto step = [](Optimizer& opt, const Tensor& x, const Tensor& y, int t) {
    set_grad(x, randn({kN}, DType::f32, cpu(), 100 + t));
    set_grad(y, randn({kN}, DType::f32, cpu(), 200 + t));
    if (t == 1) zero_grad({y});  // y skips the first step: its state starts later
    opt.step();
  };
  for (int t = 1; t <= 3; ++t) step(live, a, b, t);
  const std::string path = ein::testing::temp_path("ein_optim_state.safetensors").string();
  save_safetensors(path, live.state_dict());
  Tensor a2 = a.detach().clone().requires_grad_(), b2 = b.detach().clone().requires_grad_();
  Optimizer loaded({a2, b2}, options);
  loaded.load_state_dict(load_safetensors(path).tensors);
  for (int t = 4; t <= 6; ++t) {
    step(live, a, b, t);
    step(loaded, a2, b2, t);
  }
  EXPECT_EQ(a.to_vector<float>(), a2.to_vector<float>()) << name;
  EXPECT_EQ(b.to_vector<float>(), b2.to_vector<float>()) << name;
  // A state of another shape, or an unknown key, is refused naming it.
  StateDict bad = live.state_dict();
  bad.emplace_back("state.9.exp_avg", zeros({kN}));
  EXPECT_THROW(loaded.load_state_dict(bad), RuntimeError) << name;
}

TEST(OptimizerState, EveryOptimizerResumesBitwise) {
  check_resume<optim::AdamW>(optim::AdamWOptions{.lr = 1e-2, .weight_decay = 0.1}, "AdamW");
  check_resume<optim::Adam>(optim::AdamOptions{.lr = 1e-2, .weight_decay = 0.1}, "Adam");
  check_resume<optim::SGD>(optim::SGDOptions{.lr = 1e-2, .momentum = 0.9}, "SGD");
  check_resume<optim::Adagrad>(optim::AdagradOptions{.lr = 1e-2, .lr_decay = 0.01}, "Adagrad");
  check_resume<optim::RMSprop>(
      optim::RMSpropOptions{.lr = 1e-2, .momentum = 0.5, .centered = true}, "RMSprop");
  optim::AdamW fresh({randn({kN}).requires_grad_()});
  EXPECT_EQ(fresh.state_dict().size(), 1u);  // only the shared step: no moments before a step
}

}  // namespace
}  // namespace ein
