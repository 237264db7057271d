// Every differentiable op against float64 central finite differences, on fresh random inputs
// in several layouts (contiguous, strided, transposed, broadcast) and with zero-size dims.
#include <gtest/gtest.h>

#include <cmath>

#include <ein/ops.h>

#include "api/autograd/gradcheck.h"

namespace ein::testing {
namespace {

constexpr DType f64 = DType::f64;

Tensor normal(const Shape& shape, uint64_t seed) {
  return randn(shape, f64, cpu(), seed);
}

/// Values in [0.5, 1.5) (away from the poles and kinks of log, sqrt, 1/x, ...).
Tensor positive(const Shape& shape, uint64_t seed) {
  NoGrad no_grad;
  return map("u[a] -> u + 0.5", {rand({checked_numel(shape)}, f64, cpu(), seed)}).view(shape);
}

/// A strided view (every other column) of fresh normal values.
Tensor strided(const Shape& shape, uint64_t seed) {
  Shape wide = shape;
  wide.back() *= 2;
  return normal(wide, seed).slice(-1, 0, wide.back(), 2);
}

/// A transposed view of fresh normal values (column-major for 2-d).
Tensor transposed(const Shape& shape, uint64_t seed) {
  return normal({shape[1], shape[0]}, seed).transpose(0, 1);
}

Function unary(std::function<Tensor(const Tensor&)> f) {
  return [f](const std::vector<Tensor>& x) { return f(x[0]); };
}

TEST(Gradcheck, Rearrange) {
  gradcheck("permute and merge (a copy)",
            unary([](const Tensor& x) { return rearrange(x, "a b c -> c (a b)"); }),
            {normal({2, 3, 4}, 1)});
  gradcheck("split (a view)", unary([](const Tensor& x) {
              return rearrange(x, "a (b c) -> b a c", {{"c", 2}});
            }),
            {normal({3, 4}, 2)});
  gradcheck("strided input", unary([](const Tensor& x) { return rearrange(x, "a b -> (b a)"); }),
            {strided({3, 4}, 3)});
  gradcheck("list input",
            [](const std::vector<Tensor>& x) { return rearrange(x, "n a b -> a (n b)"); },
            {normal({2, 3}, 4), normal({2, 3}, 5)});
}

TEST(Gradcheck, Repeat) {
  gradcheck("broadcast view", unary([](const Tensor& x) {
              return repeat(x, "a b -> a r b", {{"r", 3}});
            }),
            {normal({2, 3}, 6)});
  gradcheck("tiled copy", unary([](const Tensor& x) {
              return repeat(x, "a b -> (r a) b", {{"r", 2}});
            }),
            {transposed({3, 2}, 7)});
}

TEST(Gradcheck, EveryReduction) {
  for (const char* r : {"sum", "mean", "max", "min", "prod", "logsumexp"}) {
    gradcheck(std::string("reduce ") + r,
              unary([r](const Tensor& x) { return reduce(x, "a b c -> c a", r); }),
              {normal({2, 3, 4}, 8)});
    gradcheck(std::string("reduce all ") + r,
              unary([r](const Tensor& x) { return reduce(x, "a b -> ", r); }),
              {strided({2, 3}, 9)});
  }
  for (int64_t ddof : {0, 1}) {
    for (const char* r : {"var", "std"})
      gradcheck(fmt::format("reduce {} ddof={}", r, ddof),
                unary([r, ddof](const Tensor& x) { return reduce(x, "a b -> a", r, {}, ddof); }),
                {normal({3, 5}, 10)});
  }
}

TEST(Gradcheck, MaxSplitsTiesEvenly) {
  // torch.amax's rule: tied maxima share the gradient equally.
  Tensor x = from_data<double>({1, 3, 3, 2}, {4}).requires_grad_();
  reduce(x, "a -> ", "max").backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 0.5, 0.5, 0}));
}

TEST(Gradcheck, Einsum) {
  auto es = [](const char* p) {
    return [p](const std::vector<Tensor>& x) { return einsum(p, x); };
  };
  gradcheck("matmul", es("i j, j k -> i k"), {normal({3, 4}, 11), normal({4, 2}, 12)});
  gradcheck("matmul, transposed operands", es("i j, j k -> i k"),
            {transposed({3, 4}, 13), transposed({4, 2}, 14)});
  gradcheck("batched", es("b i j, b j k -> b k i"), {normal({2, 3, 4}, 15), normal({2, 4, 2}, 16)});
  gradcheck("three operands", es("i j, j k, k l -> l i"),
            {normal({2, 3}, 17), normal({3, 4}, 18), normal({4, 2}, 19)});
  gradcheck("single-operand sum", es("i j -> j"), {normal({3, 4}, 20)});
  gradcheck("outer product", es("i, j -> i j"), {normal({3}, 21), normal({4}, 22)});
  gradcheck("axis summed inside one operand", es("i j, k -> i"),
            {normal({2, 3}, 23), normal({4}, 24)});
  gradcheck("elementwise product", es("i j, i j -> i j"),
            {normal({2, 3}, 25), strided({2, 3}, 26)});
  gradcheck("only the weight", es("b d, d f -> b f"), {normal({3, 4}, 27), normal({4, 5}, 28)},
            {false, true});
}

TEST(Gradcheck, PackUnpack) {
  gradcheck("pack", [](const std::vector<Tensor>& x) { return pack(x, "a *").first; },
            {normal({2, 3}, 29), normal({2, 2, 2}, 30)});
  gradcheck("unpack", unary([](const Tensor& x) {
              return unpack(x, {{3}, {2, 2}}, "a *")[1];
            }),
            {normal({2, 7}, 31)});
}

TEST(Gradcheck, EveryMapFunction) {
  struct Case {
    const char* f;
    bool needs_positive;
  };
  for (const Case& c : {Case{"exp", false},
                        {"log", true},
                        {"sqrt", true},
                        {"rsqrt", true},
                        {"tanh", false},
                        {"erf", false},
                        {"sin", false},
                        {"cos", false},
                        {"abs", true},
                        {"sigmoid", false},
                        {"relu", true},
                        {"gelu", false},
                        {"gelu_tanh", false},
                        {"silu", false},
                        {"square", false},
                        {"reciprocal", true}}) {
    const std::string expr = fmt::format("x[a b] -> {}(x)", c.f);
    gradcheck(expr, unary([expr](const Tensor& x) { return map(expr, {x}); }),
              {c.needs_positive ? positive({2, 3}, 32) : strided({2, 3}, 32)});
  }
  gradcheck("relu on negatives",
            unary([](const Tensor& x) { return map("x[a] -> relu(-x)", {x}); }),
            {positive({5}, 33)});
}

TEST(Gradcheck, MapOperatorsAndBroadcasting) {
  auto m = [](const char* e) { return [e](const std::vector<Tensor>& x) { return map(e, x); }; };
  gradcheck("+ - * /", m("x[a b], y[a b] -> (x + y) * x - y / (x * x + 1)"),
            {normal({2, 3}, 34), normal({2, 3}, 35)});
  gradcheck("** with a tensor exponent", m("x[a], y[a] -> x ** y"),
            {positive({4}, 36), normal({4}, 37)});
  gradcheck("** with a constant", m("x[a] -> x ** 3"), {normal({4}, 38)});
  gradcheck("maximum, minimum", m("x[a], y[a] -> maximum(x, y) * minimum(x, 2 * y)"),
            {normal({6}, 39), normal({6}, 40)});
  gradcheck("where", m("x[a], y[a] -> where(x > y, x * y, x - y)"),
            {normal({6}, 41), normal({6}, 42)});
  gradcheck("broadcast by name", m("x[b s d], w[d], m[b s] -> (x - m) * w"),
            {normal({2, 3, 4}, 43), normal({4}, 44), normal({2, 3}, 45)});
  gradcheck("permuted axes", m("x[a b], y[b a] -> x * y"),
            {normal({2, 3}, 46), transposed({3, 2}, 47)});
  gradcheck("size-1 broadcast", m("x[a b], y[a b] -> x * y"),
            {normal({3, 4}, 48), normal({1, 4}, 49)});
  gradcheck("scalar", m("x[a b], s[] -> x / s"), {normal({2, 3}, 50), positive({}, 51)});
  gradcheck("stride-0 leaf", m("x[a b] -> x * x"), {normal({3}, 52).expand({2, 3})});
  gradcheck("one input twice", m("x[a], y[a] -> x * y"), {normal({4}, 53), normal({4}, 53)});
}

TEST(Gradcheck, Composites) {
  gradcheck("softmax", unary([](const Tensor& x) {
              const Tensor m = reduce(x, "b d -> b", "logsumexp");
              return map("x[b d], m[b] -> exp(x - m)", {x, m});
            }),
            {normal({3, 5}, 54)});
  gradcheck("layer norm",
            [](const std::vector<Tensor>& in) {
              const Tensor& x = in[0];
              const Tensor mu = reduce(x, "b d -> b", "mean");
              const Tensor var = reduce(x, "b d -> b", "var", {}, 0);
              return map("x[b d], mu[b], v[b], w[d] -> (x - mu) * rsqrt(v + 1e-5) * w",
                         {x, mu, var, in[1]});
            },
            {normal({3, 6}, 55), normal({6}, 56)});
  gradcheck("mse of a linear layer",
            [](const std::vector<Tensor>& in) {
              const Tensor y = einsum("b d, d f -> b f", in[0], in[1]);
              return reduce(map("y[b f], t[b f] -> (y - t) ** 2", {y, in[2]}), "b f -> ", "mean");
            },
            {normal({4, 3}, 57), normal({3, 2}, 58), normal({4, 2}, 59)}, {false, true, false});
}

TEST(Gradcheck, Cast) {
  // Through f32 and back: d/dx Σ x² = 2x, to f32 precision (finite differences of f32 values
  // would be noise at h = 1e-6, so this one is checked against the formula).
  Tensor y = normal({4}, 64).requires_grad_();
  reduce(cast(map("y[a] -> y * y", {cast(y, DType::f32)}), f64), "a -> ", "sum").backward();
  const std::vector<double> yv = y.to_vector<double>(), gy = y.grad().to_vector<double>();
  for (size_t i = 0; i < yv.size(); ++i)
    EXPECT_NEAR(gy[i], 2 * yv[i], 1e-6 * std::abs(yv[i]));
  Tensor x = normal({3}, 65).requires_grad_();
  const Tensor h = cast(x, DType::bf16);
  EXPECT_EQ(h.dtype(), DType::bf16);
  reduce(h, "a -> ", "sum").backward();
  EXPECT_EQ(x.grad().dtype(), f64);
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{1, 1, 1}));
}

TEST(Gradcheck, ZeroSize) {
  gradcheck("einsum with an empty batch",
            [](const std::vector<Tensor>& x) { return einsum("b d, d f -> b f", x); },
            {normal({0, 3}, 60), normal({3, 2}, 61)});
  gradcheck("map over nothing", unary([](const Tensor& x) { return map("x[a b] -> exp(x)", {x}); }),
            {normal({2, 0}, 62)});
  // Summing an empty axis: the result exists (zeros) and its gradient is empty.
  Tensor x = normal({0, 3}, 63).requires_grad_();
  reduce(x, "a b -> b", "sum").backward(ones({3}, f64));
  EXPECT_EQ(x.grad().shape(), (Shape{0, 3}));
}

}  // namespace
}  // namespace ein::testing
