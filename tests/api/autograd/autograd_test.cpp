// Eager autograd through the C++ API: the lecture's examples, PyTorch's semantics (leaves,
// retain_grad, accumulation, zero_grad, no-grad scopes) and the errors that guard them.
#include <gtest/gtest.h>

#include <ein/ops.h>

#include "exec/cpu_executor.h"
#include <ein/autograd.h>

namespace ein {
namespace {

std::vector<double> values(const Tensor& t) {
  return t.to_vector<double>();
}

// Lecture: x = [1, 2, 3]; w = [1, 1, 1] requires grad; pred_y = x @ w; loss = 0.5 (pred_y - 5)².
TEST(Autograd, LectureLinearModel) {
  const Tensor x = from_data<float>({1, 2, 3}, {3});
  Tensor w = from_data<float>({1, 1, 1}, {3}).requires_grad_();
  const Tensor pred_y = einsum("i, i ->", x, w);
  const Tensor loss = map("p[] -> 0.5 * (p - 5) ** 2", {pred_y});
  loss.backward();
  EXPECT_FALSE(loss.grad().defined());
  EXPECT_FALSE(pred_y.grad().defined());
  EXPECT_FALSE(x.grad().defined());
  EXPECT_EQ(values(w.grad()), (std::vector<double>{1, 2, 3}));
}

/// a (m k) · b (k n) in float64 on the host.
std::vector<double> matmul(const std::vector<double>& a, const std::vector<double>& b, int64_t m,
                           int64_t k, int64_t n, bool ta = false, bool tb = false) {
  std::vector<double> c(m * n, 0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p)
        c[i * n + j] += (ta ? a[p * m + i] : a[i * k + p]) * (tb ? b[j * k + p] : b[p * n + j]);
  return c;
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol,
                 const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * std::max(1.0, std::abs(want[i])))
        << what << " [" << i << "]";
}

// Lecture: x --w1--> h1 --w2--> h2 -> loss = mean(h2²), with h1 and h2 retaining their grads.
TEST(Autograd, LectureTwoLayerModel) {
  const int64_t B = 64, D = 32, K = 8;
  const Tensor x = ones({B, D}, DType::f64);
  Tensor w1 = randn({D, D}, DType::f64, cpu(), 1).requires_grad_();
  Tensor w2 = randn({D, K}, DType::f64, cpu(), 2).requires_grad_();
  const Tensor h1 = einsum("b d, d e -> b e", x, w1);
  const Tensor h2 = einsum("b e, e k -> b k", h1, w2);
  const Tensor loss = reduce(map("h[b k] -> h ** 2", {h2}), "b k -> ", "mean");
  h1.retain_grad();
  h2.retain_grad();
  loss.backward();

  const std::vector<double> xv = values(x), w1v = values(w1), w2v = values(w2);
  const std::vector<double> h1v = matmul(xv, w1v, B, D, D), h2v = matmul(h1v, w2v, B, D, K);
  std::vector<double> g2(h2v.size());
  for (size_t i = 0; i < g2.size(); ++i)
    g2[i] = 2 * h2v[i] / static_cast<double>(B * K);
  expect_near(values(h2.grad()), g2, 1e-12, "h2.grad = 2 h2 / (B K)");
  expect_near(values(w2.grad()), matmul(h1v, g2, D, B, K, true), 1e-10, "w2.grad = h1ᵀ h2.grad");
  const std::vector<double> g1 = matmul(g2, w2v, B, K, D, false, true);
  expect_near(values(h1.grad()), g1, 1e-10, "h1.grad = h2.grad w2ᵀ");
  expect_near(values(w1.grad()), matmul(xv, g1, D, B, D, true), 1e-10, "w1.grad = xᵀ h1.grad");
  EXPECT_FALSE(x.grad().defined());
  EXPECT_EQ(w1.grad().shape(), (Shape{D, D}));
  EXPECT_EQ(w2.grad().shape(), (Shape{D, K}));
}

TEST(Autograd, GradientsAccumulateUntilZeroed) {
  Tensor w = from_data<double>({1, 2}, {2}).requires_grad_();
  for (int step = 0; step < 2; ++step)
    reduce(map("w[a] -> w * w", {w}), "a -> ", "sum").backward();
  EXPECT_EQ(values(w.grad()), (std::vector<double>{4, 8}));  // 2 · (2w)
  zero_grad({w}, /*set_to_none=*/false);
  EXPECT_EQ(values(w.grad()), (std::vector<double>{0, 0}));
  zero_grad({w});
  EXPECT_FALSE(w.grad().defined());
}

TEST(Autograd, SharedInputsSumTheirGradients) {
  Tensor x = from_data<double>({1, 2, 3}, {3}).requires_grad_();
  // x used twice by one op, and along two paths (a diamond).
  const Tensor sq = map("a[i], b[i] -> a * b", {x, x});
  const Tensor twice = rearrange(x, "i -> i");
  reduce(map("s[i], t[i] -> s + 3 * t", {sq, twice}), "i -> ", "sum").backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{5, 7, 9}));  // 2x + 3
}

TEST(Autograd, NoGradRecordsNothing) {
  Tensor w = ones({3}).requires_grad_();
  {
    NoGrad no_grad;
    EXPECT_FALSE(grad_enabled());
    const Tensor y = map("w[a] -> 2 * w", {w});
    EXPECT_FALSE(y.requires_grad());
    EXPECT_TRUE(y.is_leaf());
    w.slice(0, 0, 2);  // views are allowed where nothing records
  }
  EXPECT_TRUE(grad_enabled());
  EXPECT_TRUE(map("w[a] -> 2 * w", {w}).requires_grad());
  EXPECT_FALSE(map("w[a] -> 2 * w", {w.detach()}).requires_grad());
}

TEST(Autograd, ClearErrors) {
  Tensor w = ones({3}).requires_grad_();
  const Tensor y = map("w[a] -> 2 * w", {w});
  EXPECT_THROW(y.backward(), RuntimeError);                // not one element, no gradient given
  EXPECT_THROW(y.backward(ones({4})), RuntimeError);       // wrong gradient shape
  EXPECT_THROW(ones({3}).backward(), RuntimeError);        // requires no grad
  EXPECT_THROW(arange(3).requires_grad_(), RuntimeError);  // integers have no gradient
  EXPECT_THROW(Tensor(y).requires_grad_(false), RuntimeError);  // not a leaf
  try {
    (void)w.slice(0, 0, 2);
    FAIL() << "a view of a tensor that requires grad must not silently drop its gradient";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("ein::rearrange"), std::string::npos) << e.what();
  }
  EXPECT_THROW(w.fill_(0), RuntimeError);  // in-place write on a leaf that requires grad
}

TEST(Autograd, IntegerInputsGetNoGradient) {
  Tensor x = from_data<double>({1, 2, 3}, {3}).requires_grad_();
  const Tensor mask = from_data<int64_t>({1, 0, 1}, {3});
  reduce(map("x[i], m[i] -> where(m, x, 0)", {x, mask}), "i -> ", "sum").backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{1, 0, 1}));
}

TEST(Autograd, RepeatedStepsCompileNothingNew) {
  Tensor w = randn({16, 8}, DType::f32, cpu(), 3).requires_grad_();
  const Tensor x = randn({4, 16}, DType::f32, cpu(), 4);
  auto step = [&] {
    const Tensor h = map("h[b f] -> gelu(h)", {einsum("b d, d f -> b f", x, w)});
    reduce(h, "b f -> ", "mean").backward();
  };
  step();
  step();  // the first accumulation into w.grad compiles its kernel
  const int64_t built = executor_stats().kernels_built;
  step();
  EXPECT_EQ(executor_stats().kernels_built, built);
}

}  // namespace
}  // namespace ein
