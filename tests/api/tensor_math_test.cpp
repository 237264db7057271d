// C++ tensor arithmetic (include/ein/tensor_math.h): values against plain loops, positional
// broadcasting, torch's result dtypes, comparisons as bool, reductions by dim, and gradients
// through the tape.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include <ein/autograd.h>
#include <ein/diagnostic.h>
#include <ein/errors.h>
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
  EXPECT_THROW(a + from_data<float>({1, 2}, {2}), UserError);  // 3 against 2
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

}  // namespace
}  // namespace ein
