// ein::nn::EinMix (include/ein/einmix.h) against a float64 reference written here from EinMix's
// definition (every assignment of the named axes adds x · weight to its output element, then
// the bias), its gradients against central finite differences, and its initialisation against
// einops' bounds. The plan's shapes and errors are the conformance tables' (einmix and
// einmix_init rows of einops_cases.tsv) and tests/compiler/sema/einmix_sema_test.cpp's.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

#include <ein/autograd.h>
#include <ein/diagnostic.h>
#include <ein/einmix.h>
#include <ein/tensor_math.h>
#include "script/script.h"
#include "support/temp_path.h"

namespace ein {
namespace {

using Dims = std::vector<std::vector<std::string>>;  // per dim, the names composing it

// "b t (h c_in)" as {{b}, {t}, {h, c_in}}: the test's own reading, names only.
Dims dims_of(const std::string& side) {
  Dims out;
  std::istringstream in(side);
  bool group = false;
  for (std::string tok; in >> tok;) {
    const bool opens = tok.front() == '(', closes = tok.back() == ')';
    const std::string name = tok.substr(opens, tok.size() - opens - closes);
    if (!group) out.emplace_back();
    if (!name.empty()) out.back().push_back(name);
    group = (group || opens) && !closes;
  }
  return out;
}

struct Case {
  std::string pattern, weight;
  std::optional<std::string> bias;
  std::map<std::string, int64_t> sizes;
};

Sizes sizes_of(const Case& c) {
  Sizes out;
  for (const auto& [name, size] : c.sizes)
    out.push_back({name, size});
  return out;
}

Shape shape_of(const Dims& dims, const std::map<std::string, int64_t>& sizes) {
  Shape out;
  for (const auto& names : dims)
    out.push_back(
        std::accumulate(names.begin(), names.end(), int64_t{1},
                        [&](int64_t p, const std::string& n) { return p * sizes.at(n); }));
  return out;
}

// Row-major offset of the named axes' values `at` in a tensor whose dims are `dims`.
int64_t offset(const Dims& dims, const std::map<std::string, int64_t>& sizes,
               const std::map<std::string, int64_t>& at) {
  int64_t o = 0;
  for (const auto& names : dims)
    for (const std::string& n : names)
      o = o * sizes.at(n) + at.at(n);
  return o;
}

// EinMix by its definition, in float64: out[right] = Σ x[left] · w[weight] over every
// assignment of all the named axes, plus bias[bias axes].
std::vector<double> reference(const Case& c, const std::vector<double>& x,
                              const std::vector<double>& w, const std::vector<double>& b) {
  const size_t arrow = c.pattern.find("->");
  const Dims left = dims_of(c.pattern.substr(0, arrow)),
             right = dims_of(c.pattern.substr(arrow + 2));
  const Dims weight = dims_of(c.weight);
  std::set<std::string> varies;  // the bias' axes
  for (const auto& names : c.bias ? dims_of(*c.bias) : Dims{})
    varies.insert(names.begin(), names.end());
  Dims bias;  // in the output's order, as the bias tensor holds them (its other dims are 1)
  for (const auto& names : right)
    for (const std::string& n : names)
      if (varies.contains(n)) bias.push_back({n});
  const Shape out_shape = shape_of(right, c.sizes);
  std::vector<double> out(static_cast<size_t>(
      std::accumulate(out_shape.begin(), out_shape.end(), int64_t{1}, std::multiplies<>())));
  std::map<std::string, int64_t> at;
  for (const auto& [name, size] : c.sizes)
    at[name] = 0;
  const auto each = [&](auto&& body) {  // every assignment of every axis
    for (;;) {
      body();
      auto it = at.begin();
      for (; it != at.end(); ++it) {
        if (++it->second < c.sizes.at(it->first)) break;
        it->second = 0;
      }
      if (it == at.end()) return;
    }
  };
  for (const auto& [name, size] : c.sizes)
    if (size == 0) return out;  // the cases' empty axes are output axes: nothing to add
  each([&] {
    out[offset(right, c.sizes, at)] +=
        x[offset(left, c.sizes, at)] * w[offset(weight, c.sizes, at)];
  });
  if (c.bias) {
    std::vector<bool> added(out.size());
    each([&] {
      const int64_t o = offset(right, c.sizes, at);
      if (!added[o]) out[o] += b[offset(bias, c.sizes, at)];
      added[o] = true;
    });
  }
  return out;
}

// A non-contiguous float64 input of `shape`: a permuted view of a tensor stored reversed.
Tensor strided_input(const Shape& shape, uint64_t seed) {
  Shape reversed(shape.rbegin(), shape.rend());
  std::vector<int64_t> order(shape.size());
  std::iota(order.rbegin(), order.rend(), 0);
  return randn(reversed, DType::f64, cpu(), seed).permute(order);
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      // einops' docstring and test cases: a permuting channel mix with a bias
      {"b c_in h w -> w c_out h b",
       "c_in c_out",
       "c_out",
       {{"b", 2}, {"c_in", 3}, {"h", 2}, {"w", 4}, {"c_out", 5}}},
      // a linear layer per head: compositions split before and made after, the bias per head
      {"b t (h c_in) -> b t (h c_out)",
       "h c_in c_out",
       "h c_out",
       {{"b", 2}, {"t", 3}, {"h", 2}, {"c_in", 3}, {"c_out", 4}}},
      // qkv made by one layer; the bias' axes on both sides of the batch axes
      {"b t c -> qkv b t cout",
       "qkv c cout",
       "qkv cout",
       {{"b", 2}, {"t", 2}, {"c", 3}, {"qkv", 3}, {"cout", 2}}},
      // MLP-Mixer's token mixing, a bias per output position
      {"b t c -> b u c", "t u", "u", {{"b", 2}, {"t", 5}, {"c", 3}, {"u", 4}}},
      // a weight without axes: a learned scale of a split input
      {"b (t c) -> b t c", "", std::nullopt, {{"b", 2}, {"t", 3}, {"c", 4}}},
      // a split on the left and a composition on the right around a channel mix
      {"b (h w) c -> b h (w c2)",
       "c c2",
       "c2",
       {{"b", 2}, {"h", 2}, {"w", 3}, {"c", 4}, {"c2", 3}}},
      // channel-wise scale (as in a normalisation), the weight all output axes: fan_in 1
      {"t b c -> t b c", "c", std::nullopt, {{"t", 3}, {"b", 2}, {"c", 5}}},
      // empty batch
      {"b c_in -> b c_out", "c_in c_out", "c_out", {{"b", 0}, {"c_in", 3}, {"c_out", 2}}},
  };
  return all;
}

TEST(EinMix, MatchesItsDefinitionInFloat64) {
  uint64_t seed = 1;
  for (const Case& c : cases()) {
    SCOPED_TRACE(
        fmt::format("'{}' weight '{}' bias '{}'", c.pattern, c.weight, c.bias.value_or("-")));
    const nn::EinMix mix(c.pattern, c.weight, c.bias, sizes_of(c),
                         {.dtype = DType::f64, .seed = seed});
    const size_t arrow = c.pattern.find("->");
    const Tensor x =
        strided_input(shape_of(dims_of(c.pattern.substr(0, arrow)), c.sizes), seed + 100);
    ++seed;
    const Tensor y = mix(x);
    EXPECT_EQ(y.shape(), shape_of(dims_of(c.pattern.substr(arrow + 2)), c.sizes));
    EXPECT_EQ(mix.weight().shape(), mix.plan().weight_shape);
    EXPECT_EQ(mix.bias().defined(), c.bias.has_value());
    const std::vector<double> want =
        reference(c, x.to_vector<double>(), mix.weight().to_vector<double>(),
                  c.bias ? mix.bias().to_vector<double>() : std::vector<double>{});
    const std::vector<double> got = y.to_vector<double>();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 1e-12 * (1 + std::abs(want[i]))) << "element " << i;
  }
}

// '...' is a run of axes like any other: the same layer over named batch axes gives the same
// values (same seed, so the same parameters).
TEST(EinMix, AnEllipsisIsTheAxesItStandsFor) {
  const Sizes sizes{{"c_in", 4}, {"c_out", 3}};
  const nn::EinMix dots("... c_in -> ... c_out", "c_in c_out", "c_out", sizes,
                        {.dtype = DType::f64, .seed = 5});
  const nn::EinMix named("a b c_in -> a b c_out", "c_in c_out", "c_out", sizes,
                         {.dtype = DType::f64, .seed = 5});
  const Tensor x = strided_input({2, 3, 4}, 9);
  EXPECT_EQ(dots(x).to_vector<double>(), named(x).to_vector<double>());
  EXPECT_EQ(dots(randn({7, 4}, DType::f64, cpu(), 2)).shape(), (Shape{7, 3}));
  EXPECT_EQ(dots(randn({4}, DType::f64, cpu(), 2)).shape(), (Shape{3}));
}

// Σ c · mix(x): the tape's gradients for the input, the weight and the bias against central
// differences of the layer itself, every element of each.
TEST(EinMix, GradientsMatchFiniteDifferences) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(fmt::format("'{}' weight '{}'", c.pattern, c.weight));
    const nn::EinMix mix(c.pattern, c.weight, c.bias, sizes_of(c),
                         {.dtype = DType::f64, .seed = 3});
    const size_t arrow = c.pattern.find("->");
    const Tensor x = strided_input(shape_of(dims_of(c.pattern.substr(0, arrow)), c.sizes), 4)
                         .detach()
                         .requires_grad_();
    const Tensor y = mix(x);
    const Tensor cot = randn(y.shape(), DType::f64, cpu(), 5);
    const std::vector<double> cv = cot.to_vector<double>();
    y.backward(cot);
    const auto loss = [&] {
      NoGrad no_grad;
      const std::vector<double> v = mix(x).to_vector<double>();
      return std::inner_product(v.begin(), v.end(), cv.begin(), 0.0);
    };
    std::vector<std::pair<std::string, Tensor>> checked = {{"x", x}, {"weight", mix.weight()}};
    if (c.bias) checked.emplace_back("bias", mix.bias());
    for (const auto& [what, t] : checked) {
      if (t.numel() == 0) continue;
      ASSERT_TRUE(t.grad().defined()) << what;
      const std::vector<double> grad = t.grad().to_vector<double>();
      std::vector<double> v = t.to_vector<double>();
      for (size_t e = 0; e < v.size(); ++e) {
        const double h = 1e-6, saved = v[e];
        const auto at = [&](double value) {
          v[e] = value;
          t.detach().copy_(from_data(v, t.shape()));
          return loss();
        };
        const double numeric = (at(saved + h) - at(saved - h)) / (2 * h);
        at(saved);
        EXPECT_NEAR(grad[e], numeric, 1e-6 * (1 + std::abs(numeric))) << what << "[" << e << "]";
      }
    }
  }
}

// EinMix's initialisation: the weight U(±sqrt(3 / fan_in)), so variance 1 / fan_in; the bias
// U(±sqrt(1 / fan_in)); fan_in the weight axes not in the output. A seed fixes both, and the
// bias is not the weight's stream again.
TEST(EinMix, InitialisesAsEinops) {
  const nn::EinMix mix("b (g c_in) -> b (g c_out)", "g c_in c_out", "g c_out",
                       {{"g", 2}, {"c_in", 128}, {"c_out", 256}}, {.seed = 11});
  EXPECT_EQ(mix.plan().fan_in, 128);  // g is in the output: each output mixes c_in inputs
  const std::vector<float> w = mix.weight().to_vector<float>(), b = mix.bias().to_vector<float>();
  ASSERT_EQ(w.size(), 2u * 128 * 256);
  const double wb = std::sqrt(3.0 / 128), bb = std::sqrt(1.0 / 128);
  double sum_sq = 0;
  for (float v : w) {
    ASSERT_LE(std::abs(v), wb);
    sum_sq += double(v) * v;
  }
  EXPECT_NEAR(sum_sq / static_cast<double>(w.size()) * 128, 1.0, 0.02);  // 65,536 draws
  double b_max = 0;
  for (float v : b) {
    ASSERT_LE(std::abs(v), bb);
    b_max = std::max<double>(b_max, std::abs(v));
  }
  EXPECT_GT(b_max, 0.9 * bb);  // 512 draws spread over the bound, not a narrower one
  EXPECT_EQ(mix.bias().shape(), (Shape{1, 2, 256}));

  const nn::EinMix again("b (g c_in) -> b (g c_out)", "g c_in c_out", "g c_out",
                         {{"g", 2}, {"c_in", 128}, {"c_out", 256}}, {.seed = 11});
  EXPECT_EQ(again.weight().to_vector<float>(), w);
  EXPECT_NE(std::vector<float>(w.begin(), w.begin() + 8),
            std::vector<float>(b.begin(), b.begin() + 8));
  const StateDict params = mix.named_parameters();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].first, "weight");
  EXPECT_EQ(params[1].first, "bias");
  EXPECT_TRUE(params[0].second.requires_grad());
  const nn::EinMix no_bias("b c -> b d", "c d", std::nullopt, {{"c", 2}, {"d", 3}});
  EXPECT_EQ(no_bias.named_parameters().size(), 1u);
}

// stdlib/einmix.ein's fixed layers initialise as EinMix does too: the weight U(±sqrt(3 / c_in)),
// the bias U(±1/sqrt(c_in)).
TEST(EinMix, TheStdlibLayersInitialiseAsEinops) {
  const auto path = testing::temp_path("ein_einmix_stdlib.ein");
  std::ofstream(path) << "import einmix\nlet mix = MixChannelsBias(48, 6)\n"
                         "fn weight() -> f32[48 6] = mix.weight\nfn bias() -> f32[6] = mix.bias\n";
  auto program = script::Program::load(path.string(), {});
  const auto largest = [&](const char* fn) {
    const std::vector<float> v = program->call(fn, {}).at(0).to_vector<float>();
    double m = 0;
    for (float x : v)
      m = std::max<double>(m, std::abs(x));
    return m;
  };
  const double weight = largest("weight"), bias = largest("bias");
  EXPECT_LE(weight, std::sqrt(3.0 / 48));
  EXPECT_GT(weight, 0.9 * std::sqrt(3.0 / 48));  // 288 draws: not a narrower bound
  EXPECT_LE(bias, std::sqrt(1.0 / 48));
  std::filesystem::remove(path);
}

// The `.ein` builtin EinMix(...) (script/builtins.cpp) is the same layer: its output is the
// definition's on the script's own parameters, which carry the C++ layer's names and shapes.
TEST(EinMix, AScriptLayerMatchesItsDefinition) {
  const Case c{"b t (h c_in) -> b t (h c_out)",
               "h c_in c_out",
               "h c_out",
               {{"b", 2}, {"t", 3}, {"h", 2}, {"c_in", 3}, {"c_out", 4}}};
  const auto path = testing::temp_path("ein_einmix_builtin.ein");
  std::ofstream(path) << "let mix = EinMix(\"b t (h c_in) -> b t (h c_out)\", weight_shape = "
                         "\"h c_in c_out\", bias_shape = \"h c_out\", h = 2, c_in = 3, c_out = 4)\n"
                         "fn weight() -> f32[2 3 4] = mix.weight\n"
                         "fn bias() -> f32[1 1 2 4] = mix.bias\n"
                         "fn apply(x: f32[2 3 6]) -> f32[2 3 8] = mix(x)\n";
  auto program = script::Program::load(path.string(), {});
  const Tensor x = randn({2, 3, 6}, DType::f32, cpu(), 21);
  const Tensor w = program->call("weight", {}).at(0), b = program->call("bias", {}).at(0);
  const std::vector<double> want =
      reference(c, x.to_vector<double>(), w.to_vector<double>(), b.to_vector<double>());
  const std::vector<double> got = program->call("apply", {x}).at(0).to_vector<double>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-5 * (1 + std::abs(want[i]))) << "element " << i;
  double largest = 0;
  for (double v : w.to_vector<double>())
    largest = std::max(largest, std::abs(v));
  EXPECT_LE(largest, std::sqrt(3.0 / 3));  // fan_in c_in = 3
  EXPECT_GT(largest, 0.5);
  std::filesystem::remove(path);
}

// A bad layer fails when it is made, a bad input when it is called: each a UserError under the
// axis at fault.
TEST(EinMix, ErrorsPointAtTheAxis) {
  try {
    nn::EinMix("b c_in -> b c_out", "c_in c_out", std::nullopt, {{"c_in", 4}});
    FAIL() << "no error for a weight axis without a size";
  } catch (const UserError& e) {
    EXPECT_EQ(e.source()->name(), "weight_shape");
    EXPECT_EQ(e.column(), 6u) << e.what();
  }
  const nn::EinMix mix("b t (h c) -> b t (h d)", "h c d", std::nullopt,
                       {{"h", 2}, {"c", 3}, {"d", 4}});
  EXPECT_EQ(mix(randn({2, 5, 6})).shape(), (Shape{2, 5, 8}));
  try {
    (void)mix(randn({2, 5, 7}));
    FAIL() << "no error for an input that does not split into (h c)";
  } catch (const UserError& e) {
    EXPECT_EQ(e.source()->name(), "pattern");
    EXPECT_EQ(e.column(), 5u) << e.what();  // under (h c)
  }
  EXPECT_THROW((void)mix(randn({2, 6})), UserError);
  // The layer remembers the shapes that fit, never one that did not.
  EXPECT_THROW((void)mix(randn({2, 5, 7})), UserError);
  EXPECT_EQ(mix(randn({4, 1, 6})).shape(), (Shape{4, 1, 8}));
  EXPECT_EQ(mix(randn({2, 5, 6})).shape(), (Shape{2, 5, 8}));
}

}  // namespace
}  // namespace ein
