// C++ tensor arithmetic (include/ein/tensor_math.h): values against plain loops, positional
// broadcasting, torch's result dtypes, comparisons as bool, reductions by dim, and gradients
// through the tape.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <ein/autograd.h>
#include <ein/diagnostic.h>
#include <ein/errors.h>
#include <ein/flop_counter.h>
#include <ein/ops.h>
#include <ein/tensor_math.h>

namespace ein {
namespace {

std::vector<double> values(const Tensor& t) { return t.to(DType::f64).to_vector<double>(); }

TEST(TensorMath, BroadcastingIsByPosition) {
  const Tensor a = from_data<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor row = from_data<float>({10, 20, 30}, {3});
  const Tensor col = from_data<float>({100, 200}, {2, 1});
  EXPECT_EQ(values(a + row), (std::vector<double>{11, 22, 33, 14, 25, 36}));
  EXPECT_EQ(values(a * col), (std::vector<double>{100, 200, 300, 800, 1000, 1200}));
  EXPECT_EQ((col - row).shape(), (Shape{2, 3}));
  EXPECT_EQ(values(col - row), (std::vector<double>{90, 80, 70, 190, 180, 170}));
  EXPECT_EQ(values(-a / 2.0), (std::vector<double>{-0.5, -1, -1.5, -2, -2.5, -3}));
  EXPECT_EQ(values(1.0 - a), (std::vector<double>{0, -1, -2, -3, -4, -5}));
  EXPECT_EQ((a + from_data<float>({}, {0, 1, 1})).shape(), (Shape{0, 2, 3}));  // zero-size stretches too
  try {
    const Tensor bad = a + from_data<float>({1, 2}, {2});
    ADD_FAILURE() << "3 against 2 broadcast";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("size 3 against 2 at dim 1"), std::string::npos) << e.what();
  }
}

TEST(TensorMath, ResultDtypesAreTorchs) {
  const Tensor i = from_data<int64_t>({3, -4}, {2});
  EXPECT_EQ((i + i).dtype(), DType::i64);
  EXPECT_EQ((i * 5).dtype(), DType::i64);
  EXPECT_EQ(values(i * 5), (std::vector<double>{15, -20}));
  EXPECT_EQ((i * 0.5).dtype(), DType::f32);
  EXPECT_EQ(values(i * 0.5), (std::vector<double>{1.5, -2}));
  const Tensor h = from_data<float>({1.5f, 2.5f}, {2}).to(DType::bf16);
  EXPECT_EQ((h * 0.5).dtype(), DType::bf16);
  EXPECT_EQ(values(h * 0.5), (std::vector<double>{0.75, 1.25}));
  EXPECT_EQ((from_data<double>({1}, {1}) + 1).dtype(), DType::f64);
  const Tensor lt = i < 0.0;
  EXPECT_EQ(lt.dtype(), DType::boolean);
  EXPECT_EQ(values(lt), (std::vector<double>{0, 1}));
  EXPECT_EQ(values(eq(i, from_data<int64_t>({3, 4}, {2}))), (std::vector<double>{1, 0}));
}

TEST(TensorMath, FunctionsWhereAndPow) {
  const std::vector<float> xs = {-1.5f, -0.0f, 0.25f, 2.0f};
  const Tensor x = from_data<float>(xs, {4});
  const auto expect = [&](const Tensor& got, auto f) {
    const std::vector<double> g = values(got);
    for (size_t k = 0; k < xs.size(); ++k) {
      const double want = static_cast<float>(f(static_cast<double>(xs[k])));
      if (std::isnan(want)) EXPECT_TRUE(std::isnan(g[k])) << k;
      else EXPECT_NEAR(g[k], want, 4e-7 * std::max(1.0, std::fabs(want))) << k;
    }
  };
  expect(exp(x), [](double v) { return std::exp(v); });
  expect(abs(x), [](double v) { return std::fabs(v); });
  expect(relu(x), [](double v) { return v < 0 ? 0.0 : v; });
  expect(tanh(x), [](double v) { return std::tanh(v); });
  expect(pow(x, 2), [](double v) { return v * v; });
  expect(pow(abs(x), 0.5), [](double v) { return std::sqrt(std::fabs(v)); });
  expect(floor(x), [](double v) { return std::floor(v); });
  expect(where(x > 0.0, x, x * 0.01), [](double v) { return v > 0 ? v : v * 0.01; });
  expect(maximum(x, from_data<float>({0}, {1})), [](double v) { return v > 0 ? v : 0.0; });
}

TEST(TensorMath, ReductionsOverAllOrOneDim) {
  const Tensor a = from_data<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(sum(a).item(), 21);
  EXPECT_EQ(mean(a).item(), 3.5);
  EXPECT_EQ(max(a).item(), 6);
  EXPECT_EQ(min(a).item(), 1);
  EXPECT_EQ(values(sum(a, 0)), (std::vector<double>{5, 7, 9}));
  EXPECT_EQ(values(max(a, -1)), (std::vector<double>{3, 6}));
  EXPECT_EQ(sum(a, 1, true).shape(), (Shape{2, 1}));
  EXPECT_EQ(values(mean(a, 1, true)), (std::vector<double>{2, 5}));
  EXPECT_THROW(sum(a, 2), RuntimeError);
  EXPECT_EQ(sum(from_data<int64_t>({1, 2}, {2})).dtype(), DType::i64);
}

// The lecture's loss written with operators: d/dpred of mean((pred − 5)² · 0.5) = (pred − 5)/n.
TEST(TensorMath, GradientsFlowThroughTheOperators) {
  Tensor pred = from_data<double>({1, 4, 9, 5}, {4}).requires_grad_();
  const Tensor loss = mean(pow(pred - 5, 2) * 0.5);
  EXPECT_DOUBLE_EQ(loss.item(), (16 + 1 + 16 + 0) * 0.5 / 4);
  loss.backward();
  EXPECT_EQ(values(pred.grad()), (std::vector<double>{-1, -0.25, 1, 0}));
  // where(): the gradient goes to the branch taken.
  Tensor x = from_data<double>({-2, 3}, {2}).requires_grad_();
  sum(where(x > 0.0, x * 3, x * x)).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{-4, 3}));
}

// In place, as torch's p -= lr * g: written into the tensor's own elements (every handle sees
// it), broadcasting the right side; torch's refusals (a float result into an integer tensor,
// a result larger than the tensor, a tensor that requires grad outside NoGrad).
TEST(TensorMath, InPlaceOperatorsWriteIntoTheTensor) {
  const Tensor p = from_data<float>({1, 2, 3, 4}, {2, 2});
  const Tensor alias = p;  // another handle of the same elements
  const Tensor g = from_data<float>({10, 20}, {2});
  p -= 0.5 * g;
  EXPECT_EQ(values(alias), (std::vector<double>{-4, -8, -2, -6}));
  p *= 2;
  p /= from_data<float>({-2}, {1});
  EXPECT_EQ(values(alias), (std::vector<double>{4, 8, 2, 6}));
  const Tensor i = from_data<int64_t>({1, 2}, {2});
  i += 3;
  EXPECT_EQ(i.dtype(), DType::i64);
  EXPECT_EQ(values(i), (std::vector<double>{4, 5}));
  EXPECT_THROW(i /= 2, RuntimeError);  // 2.0, 2.5 are not i64
  EXPECT_THROW(g += p, RuntimeError);  // (2, 2) does not fit in (2)
  const Tensor w = from_data<double>({1}, {1}).requires_grad_();
  EXPECT_THROW(w -= 1.0, RuntimeError);  // would drop the gradient
  {
    NoGrad off;
    w -= 1.0;
  }
  EXPECT_EQ(values(w.detach()), (std::vector<double>{0}));
}

// The operators are built lazily: a chain of them is one map kernel, run when it becomes a
// Tensor; a reduction of it is a second kernel.
TEST(TensorMath, AChainIsOneFusedKernel) {
  const Tensor pred = randn({64, 32}, DType::f32, cpu(), 7);
  const Tensor bias = randn({32}, DType::f32, cpu(), 8);
  FlopCounter counter;
  const Tensor y = pow(pred - 5, 2) * 0.5 + relu(pred) / bias;
  EXPECT_EQ(counter.totals().kernels, 1);
  const Tensor loss = mean(pow(pred - 5, 2) * 0.5);
  EXPECT_EQ(counter.totals().kernels, 3);
  // The same values as the map string written by hand.
  const Tensor want = map("p[i j], c[j] -> (p - 5)**2 * 0.5 + relu(p) / c", {pred, bias});
  EXPECT_EQ(values(y), values(want));
  EXPECT_EQ(values(loss), values(mean(want - relu(pred) / bias)));
}

// An Expr runs once: converting it again gives the same tensor, and building it runs nothing.
TEST(TensorMath, AnExprRunsOnceWhenConverted) {
  const Tensor x = from_data<float>({1, 2, 3}, {3});
  FlopCounter counter;
  const Expr e = exp(x) * 2 - 1;
  EXPECT_EQ(counter.totals().kernels, 0);
  EXPECT_EQ(e.shape(), (Shape{3}));
  EXPECT_EQ(e.dtype(), DType::f32);
  const Tensor first = e, second = e;
  EXPECT_TRUE(first.same_storage(second));
  EXPECT_EQ(counter.totals().kernels, 1);
  // A converted Expr inside a new chain is read, not recomputed.
  const Tensor z = e * e;
  EXPECT_EQ(counter.totals().kernels, 2);
  EXPECT_FLOAT_EQ(static_cast<float>(z.at({1})), std::pow(2 * std::exp(2.0f) - 1, 2.0f));
}

// Fusion changes no result of mixed dtypes: an integer or f32 subexpression under an op of
// another dtype runs first, so the values equal the op-by-op (eager) ones bitwise.
TEST(TensorMath, FusingKeepsMixedDtypeResultsExact) {
  const int64_t big = int64_t{1} << 40;  // big + 1 is not an f32: fused in f32, i - j would be 0
  const Tensor i = from_data<int64_t>({big + 1, -3}, {2}), j = from_data<int64_t>({big, 4}, {2});
  const Tensor fused = (i - j) * 0.5;
  EXPECT_EQ(fused.dtype(), DType::f32);
  EXPECT_EQ(values(fused), (std::vector<double>{0.5, -3.5}));
  EXPECT_EQ(values((i - j) * 3 - i), (std::vector<double>{3.0 - static_cast<double>(big + 1), -18}));
  EXPECT_EQ(((i - j) * 3 - i).dtype(), DType::i64);

  const Tensor x = from_data<float>({0.1f, 1e-30f, 3.3f}, {3});
  const Tensor d = from_data<double>({0.7, 1e-300, -2}, {3});
  const Tensor x3 = x * 3.3f;
  EXPECT_EQ(values(x * 3.3f + d), values(x3 + d));  // f32 x * 3.3 rounded to f32, as eager
  EXPECT_EQ((x * 3.3f + d).dtype(), DType::f64);
}

// bf16 chains are carried in f32 and rounded once (as torch.compile): within one bf16 rounding
// of the op-by-op result, and bf16 in the end.
TEST(TensorMath, LowFloatChainsRoundOnce) {
  const Tensor h = randn({257}, DType::f32, cpu(), 3).to(DType::bf16);
  const Tensor fused = tanh(h * 1.7 + 0.3) * h;
  EXPECT_EQ(fused.dtype(), DType::bf16);
  const Tensor a = h * 1.7, b = a + 0.3, c = tanh(b), eager = c * h;
  const std::vector<double> want = values(map("x[i] -> tanh(x * 1.7 + 0.3) * x", {h.to(DType::f32)}));
  const std::vector<double> got = values(fused), step = values(eager), hs = values(h);
  for (size_t k = 0; k < got.size(); ++k) {
    EXPECT_NEAR(got[k], want[k], std::fabs(want[k]) * 0x1p-8 + 1e-30) << k;  // one rounding
    // Eager rounds h·1.7 and then + 0.3 to bf16 (each within 2^-8 of its size), tanh passes
    // that error on at most 1:1, and the product scales it by |h|.
    const double hk = std::fabs(hs[k]);
    EXPECT_NEAR(got[k], step[k], 0x1p-6 * (1.7 * hk + 0.3 + 1) * hk) << k;
  }
}

// Special values and strided, broadcast operands go through a chain as through a loop.
TEST(TensorMath, ChainsOnSpecialValuesAndViews) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  const std::vector<float> xs = {-inf, -2.5f, -0.0f, 0.0f, 1e-40f, 3.0f, inf, nan};
  const Tensor x = from_data<float>(xs, {2, 4}).transpose(0, 1);  // strides {1, 4}
  const Tensor w = from_data<float>({2, -1}, {2});                // broadcast over rows
  const Tensor y = where(x > 0, x * w, abs(x) - 1) + minimum(x, w) * 0;
  ASSERT_EQ(y.shape(), (Shape{4, 2}));
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t c = 0; c < 2; ++c) {
      const float v = xs[static_cast<size_t>(c * 4 + r)], wv = c == 0 ? 2.0f : -1.0f;
      const float want = (v > 0 ? v * wv : std::fabs(v) - 1) + std::fmin(v, wv) * 0;
      const double got = y.at({r, c});
      if (std::isnan(want)) EXPECT_TRUE(std::isnan(got)) << r << "," << c;
      else EXPECT_EQ(got, static_cast<double>(want)) << r << "," << c;
    }
  const Tensor positive = x > 0.0;  // a bool result: NaN > 0 is false
  EXPECT_EQ(positive.dtype(), DType::boolean);
  EXPECT_EQ(values(positive), (std::vector<double>{0, 1, 0, 1, 0, 1, 0, 0}));
}

// A chain records one node: its gradient matches finite differences, and it records (or not)
// as the grad mode was when it was written, wherever it runs.
TEST(TensorMath, ChainGradientsAndGradMode) {
  Tensor x = from_data<double>({-1.3, 0.2, 0.9, 2.5}, {4}).requires_grad_();
  const auto f = [](const Tensor& t) { return sum(tanh(t) * t + sigmoid(t) / 3 - pow(t, 3)); };
  f(x).backward();
  const std::vector<double> g = values(x.grad()), x0 = values(x);
  for (size_t k = 0; k < x0.size(); ++k) {
    const double h = 1e-6;
    std::vector<double> up = x0, down = x0;
    up[k] += h;
    down[k] -= h;
    const double fd = (f(from_data<double>(up, {4})).item() - f(from_data<double>(down, {4})).item()) / (2 * h);
    EXPECT_NEAR(g[k], fd, 1e-6 * std::max(1.0, std::fabs(fd))) << k;
  }
  const Expr written_with_grad = x * 2;
  {
    NoGrad off;
    const Expr written_without = x * 2;
    EXPECT_TRUE(Tensor(written_with_grad).requires_grad());
    const Tensor run_later = written_without;
    EXPECT_FALSE(run_later.requires_grad());
  }
  NoGrad off;
  const Expr no_grad = x * 3;
  EnableGrad on;
  EXPECT_FALSE(Tensor(no_grad).requires_grad());
}

}  // namespace
}  // namespace ein
