// Gradients where the derivative is not defined by calculus alone, with PyTorch's conventions
// (docs/autograd.md, "At the kinks"): ties of maximum/minimum and of max/min reductions split
// the gradient evenly; std at zero deviation has gradient 0 (not 0/0); prod with a zero gives
// the product of the others at the zero, and 0 everywhere when there are two zeros; relu and
// abs have gradient 0 at 0. Each case is checked against the value PyTorch 2 gives, in f32 and
// f64.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <ein/ops.h>

namespace ein {
namespace {

using Values = std::vector<double>;

/// The gradient of sum(f(x)) (and of sum(f(x, y)) for two inputs) at the given values.
std::vector<Values> gradient(const std::string& expr_or_reduction, const std::vector<Values>& at,
                             DType dtype, bool reduction = false,
                             std::optional<int64_t> ddof = std::nullopt) {
  std::vector<Tensor> xs;
  for (const Values& v : at)
    xs.push_back(from_data<double>(v, {static_cast<int64_t>(v.size())}).to(dtype).requires_grad_());
  const Tensor y = reduction ? reduce(xs[0], "a ->", expr_or_reduction, {}, ddof)
                             : reduce(map(expr_or_reduction, xs), "a ->", "sum");
  y.backward();
  std::vector<Values> grads;
  for (const Tensor& x : xs)
    grads.push_back(x.grad().to_vector<double>());
  return grads;
}

const DType kDtypes[] = {DType::f32, DType::f64};

TEST(Kinks, MaximumAndMinimumSplitTies) {
  for (DType dtype : kDtypes) {
    // torch.maximum(x, y).sum().backward(): x.grad [0.5, 0, 1], y.grad [0.5, 1, 0].
    auto g = gradient("x[i], y[i] -> maximum(x, y)", {{1, 1, 3}, {1, 2, -1}}, dtype);
    EXPECT_EQ(g[0], (Values{0.5, 0, 1})) << dtype_name(dtype);
    EXPECT_EQ(g[1], (Values{0.5, 1, 0})) << dtype_name(dtype);
    g = gradient("x[i], y[i] -> minimum(x, y)", {{1, 1, 3}, {1, 2, -1}}, dtype);
    EXPECT_EQ(g[0], (Values{0.5, 1, 0})) << dtype_name(dtype);
    EXPECT_EQ(g[1], (Values{0.5, 0, 1})) << dtype_name(dtype);
    // The same operand on both sides: one whole gradient, as torch.maximum(x, x).
    g = gradient("x[i] -> maximum(x, x)", {{2, -3}}, dtype);
    EXPECT_EQ(g[0], (Values{1, 1})) << dtype_name(dtype);
  }
}

TEST(Kinks, MaxAndMinReductionsSplitTies) {
  for (DType dtype : kDtypes) {
    EXPECT_EQ(gradient("max", {{3, 1, 3}}, dtype, true)[0], (Values{0.5, 0, 0.5}));
    EXPECT_EQ(gradient("min", {{1, 1, 4, 1, 1}}, dtype, true)[0], (Values{0.25, 0.25, 0, 0.25, 0.25}));
  }
}

TEST(Kinks, StdAtZeroDeviationIsZero) {
  for (DType dtype : kDtypes)
    for (int64_t ddof : {0, 1}) {
      EXPECT_EQ(gradient("std", {{3, 3, 3}}, dtype, true, ddof)[0], (Values{0, 0, 0}))
          << dtype_name(dtype) << " ddof " << ddof;
      // var is smooth there: 2 (x - mean) / (N - ddof) = 0.
      EXPECT_EQ(gradient("var", {{3, 3, 3}}, dtype, true, ddof)[0], (Values{0, 0, 0}));
    }
}

TEST(Kinks, ProdWithZerosUsesTheProductOfTheOthers) {
  for (DType dtype : kDtypes) {
    EXPECT_EQ(gradient("prod", {{3, 0, 2}}, dtype, true)[0], (Values{0, 6, 0}));
    EXPECT_EQ(gradient("prod", {{0, 0, 2}}, dtype, true)[0], (Values{0, 0, 0}));
    EXPECT_EQ(gradient("prod", {{2, 3, 4}}, dtype, true)[0], (Values{12, 8, 6}));
    EXPECT_EQ(gradient("prod", {{-0.0, 5}}, dtype, true)[0], (Values{5, 0}));
  }
}

TEST(Kinks, ReluAndAbsAtZero) {
  for (DType dtype : kDtypes) {
    EXPECT_EQ(gradient("x[i] -> relu(x)", {{-1, 0, 2}}, dtype)[0], (Values{0, 0, 1}));
    EXPECT_EQ(gradient("x[i] -> abs(x)", {{-1, 0, 2}}, dtype)[0], (Values{-1, 0, 1}));
  }
}

}  // namespace
}  // namespace ein
