// Fused elementwise maps (ein::map) against the reference interpreter's unary/binary/where,
// composed by hand: every function and every operator of docs/map_expressions.md, with
// broadcasting by axis name (inputs on a subset of the axes, size-1 dims, scalars `s[]`), in
// f32, f64, f16 and bf16, on contiguous, strided and column-major inputs, and zero-size ones.
//
// The reference broadcasts like numpy (by position), so every input is first rearranged onto
// the output's axes with size 1 where it lacks one (align_axes), then the ops are applied.
//
// Tolerances: the reference reads the values stored in the input dtype, and ein fuses the
// whole expression in float32 (float64 for f64 inputs) and rounds once to the output dtype.
// One op therefore costs a float32 ulp or two (the JIT's exp/log/tanh/erf/sin/cos are SLEEF's
// 1-ulp functions) plus the output rounding, which tolerance_for(dtype)
// covers for f16/bf16; for f32 and f64 a case may ask for `slack` x tolerance_for(dtype) where
// the formula amplifies rounding (pow: the error of y*log(x) is multiplied by |y log x| <= ~10;
// chains of several ops: one rounding each). Comparisons, where, maximum/minimum, abs, sign,
// relu and negation select or move values and must match exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <ein/ops.h>
#include <fmt/format.h>

#include <ein/diagnostic.h>
#include "api/map.h"
#include "api/ops/ops_test_support.h"
#include "exec/cpu_executor.h"

namespace ein::testing {
namespace {

using reference::Array;
using reference::BinaryOp;
using reference::UnaryOp;

constexpr double kInf = std::numeric_limits<double>::infinity();

/// What values an input holds.
enum class Values {
  normal,    ///< standard normal
  positive,  ///< |normal| + 0.1: inside the domain of log, sqrt, rsqrt, pow's base
  halves,    ///< normal rounded to multiples of 0.5: ties for ==, <=, maximum; exact zeros
  integers,  ///< integers in [-3, 3]: exponents for a negative base
  mask,      ///< 0 or a nonzero normal value: a where() condition
};

struct In {
  std::string name;
  std::vector<std::string> axes;
  Values values = Values::normal;
};

using Ref = std::function<Array(const std::vector<Array>&)>;

struct MapCase {
  std::string body;
  std::vector<In> inputs;
  Ref ref;             ///< the expected value, from the inputs aligned on the output's axes
  double slack = 1;    ///< multiplier on tolerance_for (see the header comment)
  bool exact = false;  ///< the op selects or moves values: no rounding at all
};

Array U(UnaryOp op, const Array& a) {
  return reference::unary(op, a);
}
Array B(BinaryOp op, const Array& a, const Array& b) {
  return reference::binary(op, a, b);
}
Array K(double v) {
  return Array::filled({}, v);
}
Array erf_of(Array a) {  // the reference has no erf op; std::erf in float64 is the oracle
  for (double& v : a.data)
    v = std::erf(v);
  return a;
}

std::vector<double> values_of(Values kind, int64_t n, uint64_t seed) {
  std::vector<double> v = normal_values(n, seed);
  for (double& x : v)
    switch (kind) {
      case Values::normal:
        break;
      case Values::positive:
        x = std::abs(x) + 0.1;
        break;
      case Values::halves:
        x = std::round(2 * x) / 2;
        break;
      case Values::integers:
        x = std::clamp(std::round(1.5 * x), -3.0, 3.0);
        break;
      case Values::mask:
        x = std::abs(x) < 0.5 ? 0 : x;
        break;
    }
  return v;
}

std::string expression(const MapCase& c) {
  std::string s;
  for (const In& in : c.inputs) {
    std::string axes;
    for (const auto& a : in.axes)
      axes += (axes.empty() ? "" : " ") + a;
    s += (s.empty() ? "" : ", ") + in.name + "[" + axes + "]";
  }
  return s + " -> " + c.body;
}

std::vector<std::string> output_axes(const std::vector<In>& inputs) {
  std::vector<std::string> out;
  for (const In& in : inputs)
    for (const auto& a : in.axes)
      if (std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
  return out;
}

/// Runs `c` once: each input gets the axis sizes in `sizes` (1 where `ones` marks it, to
/// broadcast), values from its kind, dtype `dtype` and layout `layout`.
void run_case(const MapCase& c, const std::map<std::string, int64_t>& sizes,
              const std::set<std::pair<size_t, std::string>>& ones, DType dtype, Layout layout,
              uint64_t seed) {
  const std::string expr = expression(c);
  const auto out_axes = output_axes(c.inputs);
  std::vector<Tensor> xs;
  std::vector<Array> aligned;
  std::string shapes;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    Shape shape;
    for (const auto& a : c.inputs[i].axes)
      shape.push_back(ones.count({i, a}) ? 1 : sizes.at(a));
    xs.push_back(tensor_of(values_of(c.inputs[i].values, checked_numel(shape), seed + i), shape,
                           dtype, layout));
    aligned.push_back(align_axes(to_array(xs.back()), c.inputs[i].axes, out_axes));
    shapes += " " + c.inputs[i].name + shape_str(shape);
  }
  const std::string context =
      fmt::format("map '{}' in {} ({}),{}", expr, dtype_name(dtype), layout_name(layout), shapes);
  Tensor got;
  try {
    got = map(expr, xs);
  } catch (const std::exception& e) {
    ADD_FAILURE() << context << ": threw " << e.what();
    return;
  }
  EXPECT_EQ(got.dtype(), dtype) << context;
  EXPECT_TRUE(got.is_contiguous()) << context;
  Array want = c.ref(aligned);
  // Every input's size on its axes: the output shape is the union, by name.
  Shape out_shape;
  for (const auto& a : out_axes) {
    int64_t n = 1;
    for (size_t i = 0; i < c.inputs.size(); ++i)
      for (const auto& b : c.inputs[i].axes)
        if (b == a && !ones.count({i, a})) n = sizes.at(a);
    out_shape.push_back(n);
  }
  // A constant-only broadcast (e.g. all inputs size 1) still has the output's rank.
  want =
      Array(out_shape, reference::binary(BinaryOp::add, want, Array::filled(out_shape, 0.0)).data);
  // The reference computed the exact value; ein rounds its result to `dtype`.
  want = reference::cast(want, dtype);
  Tolerance tol = tolerance_for(dtype);
  tol.rtol *= c.slack;
  tol.atol *= c.slack;
  expect_close(got, want, c.exact ? Tolerance{0, 0} : tol, context);
}

/// Every case of `cases` in every float dtype with random sizes; the layout rotates so that
/// each (case, layout) and (dtype, layout) pair appears without a kernel per combination, and
/// every third run makes one input's axis size 1 so that it broadcasts.
void run_all(const std::vector<MapCase>& cases, uint64_t seed0) {
  std::mt19937_64 rng(seed0);
  std::uniform_int_distribution<int64_t> size(1, 37);
  const DType dtypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};
  uint64_t seed = seed0;
  for (size_t k = 0; k < cases.size(); ++k)
    for (size_t t = 0; t < std::size(dtypes); ++t) {
      const Layout layout = static_cast<Layout>((k + t) % 3);
      std::map<std::string, int64_t> sizes;
      for (const In& in : cases[k].inputs)
        for (const auto& a : in.axes)
          sizes.try_emplace(a, size(rng));
      std::set<std::pair<size_t, std::string>> ones;
      if ((k + t) % 3 == 1) {
        const size_t i = rng() % cases[k].inputs.size();
        if (!cases[k].inputs[i].axes.empty())
          ones.insert({i, cases[k].inputs[i].axes[rng() % cases[k].inputs[i].axes.size()]});
      }
      run_case(cases[k], sizes, ones, dtypes[t], layout, seed += 10);
    }
}

const In X{"x", {"a", "b"}};
In x_of(Values v) {
  return {"x", {"a", "b"}, v};
}
In y_of(Values v) {
  return {"y", {"b"}, v};
}  // broadcast along a by name

MapCase unary_case(const std::string& fn, UnaryOp op, Values v = Values::normal,
                   bool exact = false) {
  return {fn + "(x)", {x_of(v)}, [op](const auto& a) { return U(op, a[0]); }, 1, exact};
}

TEST(Map, EveryFunction) {
  std::vector<MapCase> cases = {
      unary_case("exp", UnaryOp::exp),
      unary_case("log", UnaryOp::log, Values::positive),
      unary_case("sqrt", UnaryOp::sqrt, Values::positive),
      unary_case("rsqrt", UnaryOp::rsqrt, Values::positive),
      unary_case("tanh", UnaryOp::tanh),
      {"erf(x)", {X}, [](const auto& a) { return erf_of(a[0]); }},
      unary_case("sin", UnaryOp::sin),
      unary_case("cos", UnaryOp::cos),
      unary_case("abs", UnaryOp::abs, Values::halves, true),
      unary_case("sigmoid", UnaryOp::sigmoid),
      unary_case("relu", UnaryOp::relu, Values::halves, true),
      unary_case("gelu", UnaryOp::gelu),
      unary_case("gelu_tanh", UnaryOp::gelu_tanh),
      unary_case("silu", UnaryOp::silu),
      unary_case("square", UnaryOp::square),
      unary_case("reciprocal", UnaryOp::reciprocal, Values::positive),
      unary_case("sign", UnaryOp::sign, Values::halves, true),
      {"maximum(x, y)",
       {x_of(Values::halves), y_of(Values::halves)},
       [](const auto& a) { return B(BinaryOp::maximum, a[0], a[1]); },
       1,
       true},
      {"minimum(x, y)",
       {x_of(Values::halves), y_of(Values::halves)},
       [](const auto& a) { return B(BinaryOp::minimum, a[0], a[1]); },
       1,
       true},
      // |y log x| <= ~3 * 3.7 here: the error of exp(y log x) is that many ulps.
      {"pow(x, y)",
       {x_of(Values::positive), y_of(Values::normal)},
       [](const auto& a) { return B(BinaryOp::pow, a[0], a[1]); },
       8},
      {"where(c, x, y)",
       {{"c", {"a"}, Values::mask}, X, y_of(Values::normal)},
       [](const auto& a) { return reference::where(a[0], a[1], a[2]); },
       1,
       true},
  };
  run_all(cases, 5100);
}

TEST(Map, EveryOperator) {
  const In xh = x_of(Values::halves), yh = y_of(Values::halves);
  auto cmp = [&](const std::string& op, BinaryOp b) {
    return MapCase{
        "x " + op + " y", {xh, yh}, [b](const auto& a) { return B(b, a[0], a[1]); }, 1, true};
  };
  auto arith = [&](const std::string& op, BinaryOp b, Values yv = Values::normal) {
    return MapCase{
        "x " + op + " y", {X, y_of(yv)}, [b](const auto& a) { return B(b, a[0], a[1]); }};
  };
  std::vector<MapCase> cases = {
      arith("+", BinaryOp::add),
      arith("-", BinaryOp::sub),
      arith("*", BinaryOp::mul),
      arith("/", BinaryOp::div),
      // A negative base with integer exponents (as in (x - m)**2): must not be NaN.
      {"x ** y",
       {X, y_of(Values::integers)},
       [](const auto& a) { return B(BinaryOp::pow, a[0], a[1]); },
       4},
      {"x**2", {X}, [](const auto& a) { return B(BinaryOp::pow, a[0], K(2)); }},
      {"x**3", {X}, [](const auto& a) { return B(BinaryOp::pow, a[0], K(3)); }, 2},
      {"2**x", {X}, [](const auto& a) { return B(BinaryOp::pow, K(2), a[0]); }, 4},
      cmp("<", BinaryOp::lt),
      cmp("<=", BinaryOp::le),
      cmp(">", BinaryOp::gt),
      cmp(">=", BinaryOp::ge),
      cmp("==", BinaryOp::eq),
      cmp("!=", BinaryOp::ne),
      {"-x", {X}, [](const auto& a) { return U(UnaryOp::neg, a[0]); }, 1, true},
      // Precedence: -x**2 is -(x**2); a - b - c is (a - b) - c; a / b * c is (a / b) * c.
      {"-x**2", {X}, [](const auto& a) { return U(UnaryOp::neg, B(BinaryOp::pow, a[0], K(2))); }},
      {"x - y - x",
       {X, y_of(Values::normal)},
       [](const auto& a) { return B(BinaryOp::sub, B(BinaryOp::sub, a[0], a[1]), a[0]); },
       2},
      {"x / y * x",
       {X, y_of(Values::positive)},
       [](const auto& a) { return B(BinaryOp::mul, B(BinaryOp::div, a[0], a[1]), a[0]); },
       2},
      // Numeric literals and inf.
      {"0.5 * x + 1e-3",
       {X},
       [](const auto& a) { return B(BinaryOp::add, B(BinaryOp::mul, K(0.5), a[0]), K(1e-3)); },
       2},
      {"where(c, x, -inf)",
       {{"c", {"a", "b"}, Values::mask}, X},
       [](const auto& a) { return reference::where(a[0], a[1], K(-kInf)); },
       1,
       true},
  };
  run_all(cases, 5200);
}

// BUG (runtime/jit/llvm_jit.cpp, add_lowering_passes): f64 tanh and erf (and gelu, gelu_tanh,
// which use them) on a vectorised inner loop (contiguous f64 input) fail in the JIT with
// "cannot be converted to LLVM IR: missing LLVMTranslationDialectInterface registration for
// dialect for op: vector.extract". LLVM has no intrinsic for them, so convert-math-to-libm
// scalarises math.tanh/math.erf on vector<8xf64> into vector.extract + call @tanh/@erf +
// vector.insert; but that pass runs after convert-vector-to-llvm, so the new vector ops are
// never lowered. f32 tanh/erf call SLEEF's vector functions and work; strided f64
// inputs (scalar loops) work. Every f64 function runs here on a contiguous input, so the list of
// affected functions is visible in one place.
TEST(Map, EveryFunctionInFloat64OnContiguousInputs) {
  const Tensor x = tensor_of(values_of(Values::positive, 6 * 25, 1), {6, 25}, DType::f64);
  const std::pair<const char*, UnaryOp> fns[] = {
      {"exp", UnaryOp::exp},
      {"log", UnaryOp::log},
      {"sqrt", UnaryOp::sqrt},
      {"rsqrt", UnaryOp::rsqrt},
      {"tanh", UnaryOp::tanh},
      {"erf", UnaryOp::neg},  // neg: a stand-in, erf_of below
      {"sin", UnaryOp::sin},
      {"cos", UnaryOp::cos},
      {"sigmoid", UnaryOp::sigmoid},
      {"gelu", UnaryOp::gelu},
      {"gelu_tanh", UnaryOp::gelu_tanh},
      {"silu", UnaryOp::silu},
  };
  for (const auto& [fn, op] : fns) {
    const std::string expr = fmt::format("x[a b] -> {}(x)", fn);
    try {
      const Tensor got = map(expr, {x});
      const Array want = std::string(fn) == "erf" ? erf_of(to_array(x)) : U(op, to_array(x));
      expect_close(got, want, tolerance_for(DType::f64), expr);
    } catch (const std::exception& e) {
      const std::string what = e.what();
      ADD_FAILURE() << expr << " on f64 [6, 25] (contiguous) threw: "
                    << what.substr(0, what.find("--- MLIR source"));
    }
  }
}

// Broadcasting by name: scalars s[], inputs whose axes come in another order than the output's,
// and a three-input where whose condition is a comparison.
TEST(Map, BroadcastByName) {
  const In s{"s", {}};
  std::vector<MapCase> cases = {
      {"x * s + s",
       {X, s},
       [](const auto& a) { return B(BinaryOp::add, B(BinaryOp::mul, a[0], a[1]), a[1]); },
       2},
      {"where(x > y, x, y * s)",
       {X, y_of(Values::normal), s},
       [](const auto& a) {
         return reference::where(B(BinaryOp::gt, a[0], a[1]), a[0], B(BinaryOp::mul, a[1], a[2]));
       }},
      // The output's axes are (b a): first appearance, so x is transposed onto them.
      {"y * x",
       {y_of(Values::normal), X},
       [](const auto& a) { return B(BinaryOp::mul, a[0], a[1]); }},
      // Inputs on disjoint axes: an outer product.
      {"u - v",
       {{"u", {"a"}}, {"v", {"b"}}},
       [](const auto& a) { return B(BinaryOp::sub, a[0], a[1]); }},
      {"-s", {s}, [](const auto& a) { return U(UnaryOp::neg, a[0]); }, 1, true},
  };
  run_all(cases, 5300);
}

// The fused chain from the docs: x[b s d], m[b s], w[d], c[d] -> (x - m)**2 * w + c.
TEST(Map, FusedNormalizationChain) {
  const MapCase chain{
      "(x - m)**2 * w + c",
      {{"x", {"b", "s", "d"}}, {"m", {"b", "s"}}, {"w", {"d"}}, {"c", {"d"}}},
      [](const auto& a) {
        return B(BinaryOp::add,
                 B(BinaryOp::mul, B(BinaryOp::pow, B(BinaryOp::sub, a[0], a[1]), K(2)), a[2]),
                 a[3]);
      },
      4};  // four ops, each one f32 rounding
  std::mt19937_64 rng(77);
  uint64_t seed = 5400;
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16})
    for (Layout layout : {Layout::contiguous, Layout::strided, Layout::column_major}) {
      std::uniform_int_distribution<int64_t> size(1, 37);
      const std::map<std::string, int64_t> sizes{
          {"b", size(rng)}, {"s", size(rng)}, {"d", size(rng)}};
      run_case(chain, sizes, {}, dtype, layout, seed += 10);
      // m with a size-1 s (broadcast inside its own axes) and w with a size-1 d.
      run_case(chain, sizes, {{1, "s"}, {2, "d"}}, dtype, layout, seed += 10);
    }
}

// Zero-size axes: the output is empty with the union's shape, and nothing is read.
TEST(Map, ZeroSize) {
  for (DType dtype : {DType::f32, DType::f16})
    for (const Shape& xs : {Shape{0, 5}, Shape{4, 0}, Shape{0, 0}}) {
      const Tensor x = empty(xs, dtype, device_under_test());
      const Tensor y = tensor_of(normal_values(xs[1], 3), {xs[1]}, dtype);
      Tensor got;
      ASSERT_NO_THROW(got = map("x[a b], y[b] -> exp(x) * y", {x, y})) << shape_str(xs);
      EXPECT_EQ(got.shape(), xs);
      EXPECT_EQ(got.dtype(), dtype);
      // A size-0 axis against a size-1 axis: 1 broadcasts, so the output is empty too.
      const Tensor one = tensor_of({1.5}, {1, 1}, dtype);
      ASSERT_NO_THROW(got = map("x[a b], z[a b] -> x + z", {x, one})) << shape_str(xs);
      EXPECT_EQ(got.shape(), xs);
    }
}

// Mixed input dtypes compute in the wider type and return it (f32 for f16 with bf16).
TEST(Map, MixedDtypes) {
  struct Mix {
    DType x, y, out;
  };
  for (const Mix& m :
       {Mix{DType::f16, DType::f32, DType::f32}, Mix{DType::bf16, DType::f16, DType::f32},
        Mix{DType::f32, DType::f64, DType::f64}, Mix{DType::f64, DType::bf16, DType::f64}}) {
    const Tensor x = tensor_of(normal_values(12, 1), {3, 4}, m.x, Layout::strided);
    const Tensor y = tensor_of(normal_values(4, 2), {4}, m.y);
    const Tensor got = map("x[a b], y[b] -> x * y + 1", {x, y});
    EXPECT_EQ(got.dtype(), m.out) << dtype_name(m.x) << " with " << dtype_name(m.y);
    const Array want =
        reference::cast(B(BinaryOp::add, B(BinaryOp::mul, to_array(x), to_array(y)), K(1)), m.out);
    Tolerance tol = tolerance_for(m.out);
    tol.rtol *= 2;
    tol.atol *= 2;
    expect_close(got, want, tol, fmt::format("{} * {}", dtype_name(m.x), dtype_name(m.y)));
  }
}

// map() keys a call by its text, the dtype asked for and its inputs' dtypes and shapes (a
// call with a key seen before runs the graph that call built), so calls of one text that
// differ in any of these each get their own graph: sizes of one rank (3 against 1 broadcasts),
// dtypes, map_as's dtype, inputs read as f32 (fp8). Every call twice, the second from the
// cache; a bad call between good ones still says what is wrong.
TEST(Map, CallsOfOneTextGetTheGraphOfTheirShapesAndDtypes) {
  const std::string text = "x[a b], y[b] -> x * y + 1";
  for (int round = 0; round < 2; ++round)
    for (const Shape& xs : {Shape{2, 3}, Shape{3, 3}, Shape{2, 1}, Shape{1, 3}})
      for (const DType dtype : {DType::f32, DType::f64, DType::f16}) {
        const std::string context =
            fmt::format("round {}, x {} {}", round, shape_str(xs), dtype_name(dtype));
        const Tensor x = tensor_of(normal_values(checked_numel(xs), 5), xs, dtype);
        const Tensor y = tensor_of(normal_values(3, 6), {3}, dtype);
        const Array want = B(BinaryOp::add, B(BinaryOp::mul, to_array(x), to_array(y)), K(1));
        const Tensor got = map(text, {x, y});
        EXPECT_EQ(got.dtype(), dtype) << context;
        expect_close(got, reference::cast(want, dtype), tolerance_for(dtype, 2), context);
        const Tensor wide = map_as(text, {x, y}, DType::f64);
        EXPECT_EQ(wide.dtype(), DType::f64) << context;
        expect_close(wide, want, tolerance_for(dtype == DType::f64 ? DType::f64 : DType::f32, 2),
                     context + ", as f64");
      }
  const Tensor x = tensor_of(normal_values(6, 7), {2, 3}, DType::f32);
  const Tensor y = tensor_of(normal_values(3, 8), {3}, DType::f32);
  for (int round = 0; round < 2; ++round) {  // the bad call is not cached as a good one
    try {
      (void)map(text, {x, tensor_of(normal_values(4, 9), {4}, DType::f32)});
      ADD_FAILURE() << "a size mismatch did not throw";
    } catch (const UserError& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind("map:1:", 0), 0u) << what;
      EXPECT_NE(what.find("axis 'b' has length 4 here but 3 earlier"), std::string::npos) << what;
    }
    expect_close(map(text, {x, y}),
                 B(BinaryOp::add, B(BinaryOp::mul, to_array(x), to_array(y)), K(1)),
                 tolerance_for(DType::f32, 2), "after a bad call");
  }
  const Tensor x8 = x.to(DType::f8e4m3), y8 = y.to(DType::f8e4m3);
  for (int round = 0; round < 2; ++round) {
    const Tensor got = map(text, {x8, y8});
    EXPECT_EQ(got.dtype(), DType::f32);
    const Array want =
        B(BinaryOp::add, B(BinaryOp::mul, to_array(x8.to(DType::f32)), to_array(y8.to(DType::f32))),
          K(1));
    expect_close(got, want, tolerance_for(DType::f32, 2), "fp8 inputs");
  }
}

// A CPU launch is planned once per kernel code, exact layout and thread count; a repeated
// launch plans nothing, and a new layout of the same code gets a plan of its own (and the
// right values).
TEST(Map, ARepeatedLaunchIsPlannedOnce) {
  const std::string text = "x[a b] -> x * 2 + 1";
  const Tensor x = randn({24, 40}, DType::f32, cpu(), 3);
  const auto planned = [] { return executor_stats().launches_planned; };
  for (const Tensor& in : {x, x.transpose(0, 1), x.slice(1, 0, 40, 2), x.slice(0, 0, 12)}) {
    const std::string context =
        fmt::format("shape {} strides {}", shape_str(in.shape()), shape_str(in.strides()));
    const int64_t before = planned();
    const Tensor first = map(text, {in});
    EXPECT_GE(planned(), before + 1) << context;
    const int64_t after_first = planned();
    const Tensor second = map(text, {in});
    EXPECT_EQ(planned(), after_first) << context;
    const Array want = B(BinaryOp::add, B(BinaryOp::mul, to_array(in), K(2)), K(1));
    expect_close(first, want, tolerance_for(DType::f32), context);
    expect_close(second, want, tolerance_for(DType::f32), context + ", again");
  }
}

// Integer maps stay integers where the expression does (torch: i64 + i64 is i64), computed
// exactly (in f64, exact below 2^53, not f32); a division or a function gives floats.
TEST(Map, IntegerArithmeticKeepsIntegers) {
  const int64_t big = 3'000'000'000'000;  // above f32's exact range
  const Tensor x = from_data<int64_t>({1, -2, big}, {3});
  const Tensor twice = map("x[i] -> x + x", {x});
  EXPECT_EQ(twice.dtype(), DType::i64);
  EXPECT_EQ(twice.to_vector<int64_t>(), (std::vector<int64_t>{2, -4, 2 * big}));
  EXPECT_EQ(map("x[i] -> maximum(x * 3 - 1, 0)", {x}).to_vector<int64_t>(),
            (std::vector<int64_t>{2, 0, 3 * big - 1}));
  const Tensor i32 = from_data<int32_t>({7, -7}, {2});
  EXPECT_EQ(map("x[i] -> abs(x) * 2", {i32}).dtype(), DType::i32);
  const Tensor half = map("x[i] -> x / 2", {x});
  EXPECT_TRUE(half.dtype() == DType::f64 || half.dtype() == DType::f32) << dtype_name(half.dtype());
  EXPECT_EQ(half.to_vector<double>().front(), 0.5);
  EXPECT_EQ(map("x[i] -> x * 0.5", {x}).to_vector<double>().back(), 0.5 * static_cast<double>(big));
  EXPECT_EQ(map("x[i] -> x ** 2", {i32}).dtype(), DType::i32);  // a whole power keeps integers
  EXPECT_EQ(map("x[i] -> x ** 2", {i32}).to_vector<int32_t>(), (std::vector<int32_t>{49, 49}));
  EXPECT_NE(map("x[i] -> x ** 0.5", {i32}).dtype(), DType::i32);
}

// `...` stands for the axes a declaration does not name, right-aligned across inputs: one
// string for every rank (an optimizer's update, a scale along the last axis).
TEST(Map, EllipsisStandsForTheRemainingAxes) {
  const Tensor w = from_data<float>({10, 100}, {2});
  for (const Shape& shape : {Shape{2}, Shape{3, 2}, Shape{2, 2, 2}}) {
    std::vector<float> xs(static_cast<size_t>(checked_numel(shape)));
    for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i + 1);
    const Tensor x = from_data(xs, shape);
    const Tensor y = map("x[... d], w[d] -> x * w", {x, w});
    EXPECT_EQ(y.shape(), shape);
    const std::vector<float> got = y.to_vector<float>();
    for (size_t i = 0; i < xs.size(); ++i) EXPECT_EQ(got[i], xs[i] * (i % 2 ? 100.f : 10.f));
    const Tensor g = map("g[...], s[] -> g * s", {x, full({}, 0.5)});
    EXPECT_EQ(g.to_vector<float>().back(), xs.back() * 0.5f);
  }
  // Two ellipses broadcast by position: (2, 3) against (3).
  const Tensor a = from_data<float>({1, 2, 3, 4, 5, 6}, {2, 3}), b = from_data<float>({1, 10, 100}, {3});
  EXPECT_EQ(map("a[...], b[...] -> a * b", {a, b}).to_vector<float>(),
            (std::vector<float>{1, 20, 300, 4, 50, 600}));
  // A tensor with fewer axes than the declaration names is an error, as without `...`.
  EXPECT_THROW(map("x[... c d], w[d] -> x * w", {w, w}), UserError);
}

}  // namespace
}  // namespace ein::testing
