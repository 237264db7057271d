// Gradient accumulation: k micro-batches, each loss divided by k, accumulate through the tape
// into .grad exactly what one big batch gives (to f32 rounding), so one optimizer step after
// them equals one step on the big batch. Nothing beyond the tape's accumulation is needed.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include <ein/init.h>
#include <ein/nn.h>
#include <ein/ops.h>
#include <ein/optim.h>

#include <ein/autograd.h>

namespace ein {
namespace {

struct Mlp {
  Tensor w1, b1, w2, b2;
  std::vector<Tensor> params() const { return {w1, b1, w2, b2}; }
  Tensor loss(const Tensor& x, const Tensor& y) const {
    const Tensor h = map("h[b f], c[f] -> gelu(h + c)", {einsum("b d, d f -> b f", x, w1), b1});
    const Tensor out = map("o[b d], c[d] -> o + c", {einsum("b f, f d -> b d", h, w2), b2});
    return nn::mse_loss(out, y);
  }
};

Mlp make_mlp(int64_t D, int64_t H) {
  const init::Options o{.requires_grad = true};
  return {init::fan_in_normal({D, H}, {.seed = 1, .requires_grad = true}),
          init::normal({H}, 0, 0.1, {.seed = 2, .requires_grad = true}),
          init::fan_in_normal({H, D}, {.seed = 3, .requires_grad = true}), init::zeros({D}, o)};
}

Mlp clone(const Mlp& m) {
  const auto c = [](const Tensor& t) { return t.detach().clone().requires_grad_(); };
  return {c(m.w1), c(m.b1), c(m.w2), c(m.b2)};
}

void expect_close(const std::vector<Tensor>& got, const std::vector<Tensor>& want, double tol,
                  const char* what) {
  for (size_t i = 0; i < got.size(); ++i) {
    const std::vector<double> g = got[i].to_vector<double>(), w = want[i].to_vector<double>();
    ASSERT_EQ(g.size(), w.size());
    for (size_t k = 0; k < g.size(); ++k)
      ASSERT_NEAR(g[k], w[k], tol * (1 + std::abs(w[k]))) << what << " " << i << " [" << k << "]";
  }
}

TEST(GradAccumulation, MicroBatchesEqualOneBigBatch) {
  const int64_t B = 32, D = 8, H = 16, k = 4;
  const Tensor x = randn({B, D}, DType::f32, cpu(), 10);
  const Tensor y = map("x[b d] -> sin(x)", {x});
  const Mlp big = make_mlp(D, H);
  const Mlp acc = clone(big);

  big.loss(x, y).backward();
  for (int64_t i = 0; i < k; ++i) {
    const int64_t lo = i * B / k, hi = (i + 1) * B / k;
    map("l[] -> l * 0.25", {acc.loss(x.slice(0, lo, hi), y.slice(0, lo, hi))}).backward();
  }
  std::vector<Tensor> g_big, g_acc;
  for (size_t i = 0; i < 4; ++i) {
    g_big.push_back(big.params()[i].grad());
    g_acc.push_back(acc.params()[i].grad());
  }
  // f32 sums of 32 terms taken in a different order: agreement to a few ulps of the gradient.
  expect_close(g_acc, g_big, 1e-5, "grad");

  // SGD is linear in the gradient, so the parameters after one step agree to the same
  // tolerance (Adam's first step, lr · g / |g|, would magnify differences in near-zero entries).
  optim::SGD opt_big(big.params(), {.lr = 0.1, .momentum = 0.9});
  optim::SGD opt_acc(acc.params(), {.lr = 0.1, .momentum = 0.9});
  opt_big.step();
  opt_acc.step();
  expect_close(acc.params(), big.params(), 1e-5, "param");
}

}  // namespace
}  // namespace ein
