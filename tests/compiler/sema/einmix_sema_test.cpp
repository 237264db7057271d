// EinMix's sema (compiler/sema/einmix_sema.cpp): every rule's error with the text it points
// into (the pattern, the weight's or the bias' axes) and the caret's column and width, and the
// plan's parts the conformance rows do not show (the rearranges' sizes, fan_in, the bounds).
#include <gtest/gtest.h>

#include <cmath>

#include <ein/diagnostic.h>
#include <ein/patterns.h>

namespace ein {
namespace {

struct ErrorCase {
  const char* pattern;
  const char* weight;
  std::optional<std::string> bias;
  std::vector<AxisSize> sizes;
  std::optional<Shape> input;
  const char* message_part;
  const char* source;  // "pattern", "weight_shape", "bias_shape"; "" for an unlocated error
  uint32_t column;
  uint32_t width;
};

void PrintTo(const ErrorCase& c, std::ostream* os) {
  *os << "'" << c.pattern << "' weight '" << c.weight << "'";
}

class EinMixErrors : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(EinMixErrors, StateTheRuleAndPointAtTheCause) {
  const ErrorCase& c = GetParam();
  try {
    (void)resolve_einmix({c.pattern, c.weight, c.bias, c.sizes, c.input});
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(e.message().find(c.message_part), std::string::npos) << e.what();
    EXPECT_EQ(e.source() ? e.source()->name() : "", c.source) << e.what();
    EXPECT_EQ(e.column(), c.column) << e.what();
    if (c.column) {
      EXPECT_EQ(e.range().size(), c.width) << e.what();
    }
  }
}

const std::vector<AxisSize> kIO = {{"c_in", 8}, {"c_out", 4}};

const ErrorCase kCases[] = {
    // The pattern.
    {"b c_in", "c_in c_out", {}, kIO, {}, "needs '->'", "pattern", 1, 6},
    {"b c_in, c_in -> b c_out", "c_in c_out", {}, kIO, {}, "one input side", "pattern", 9, 4},
    {"b 2 c_in -> b c_out", "c_in c_out", {}, kIO, {}, "anonymous axis 2", "pattern", 3, 1},
    {"b c_in -> b 2 c_out", "c_in c_out", {}, kIO, {}, "anonymous axis 2", "pattern", 13, 1},
    {"... c_in -> b c_out", "c_in c_out", {}, kIO, {}, "on both sides", "pattern", 1, 3},
    {"b c_in -> ... c_out", "c_in c_out", {}, kIO, {}, "on both sides", "pattern", 11, 3},
    {"(... c_in) -> ... c_out", "c_in c_out", {}, kIO, {}, "'(...)'", "pattern", 1, 10},
    {"b c_in c_in -> b c_out", "c_in c_out", {}, kIO, {}, "appears twice", "pattern", 8, 4},
    {"b c_in -> b c_out d", "c_in c_out", {}, kIO, {}, "output axis 'd'", "pattern", 19, 1},
    // The weight.
    {"b c_in -> b c_out", "(c_in c_out)", {}, kIO, {}, "no parentheses", "weight_shape", 1, 12},
    {"b c_in -> b c_out",
     "... c_in c_out",
     {},
     kIO,
     {},
     "no parentheses or numbers",
     "weight_shape",
     1,
     3},
    {"b c_in -> b c_out", "c_in 3 c_out", {}, kIO, {}, "numbers", "weight_shape", 6, 1},
    {"b c_in -> b c_out",
     "c_in -> c_out",
     {},
     kIO,
     {},
     "'->' is not allowed",
     "weight_shape",
     6,
     2},
    {"b c_in -> b c_out", "c_in c_in c_out", {}, kIO, {}, "appears twice", "weight_shape", 6, 4},
    {"b c_in -> b c_out",
     "c_in c_out",
     {},
     {{"c_in", 8}},
     {},
     "weight axis 'c_out' is not given",
     "weight_shape",
     6,
     5},
    {"b c_in -> b c_out",
     "c_in c_out x",
     {},
     {{"c_in", 8}, {"c_out", 4}, {"x", 3}},
     {},
     "weight axis 'x' is neither",
     "weight_shape",
     12,
     1},
    {"b c_in -> b c_out", "c_in c_out", {}, {{"c_in", 8}, {"c_out", -4}}, {}, "negative", "", 0, 0},
    {"b c_in -> b c_out",
     "c_in c_out",
     {},
     {{"c_in", 8}, {"c_out", 4}, {"z", 3}},
     {},
     "size z=3 names no axis",
     "",
     0,
     0},
    // The bias.
    {"b c_in -> b c_out",
     "c_in c_out",
     "c_in",
     kIO,
     {},
     "bias axis 'c_in' is not an axis of the output",
     "bias_shape",
     1,
     4},
    {"b c_in -> b c_out",
     "c_in c_out",
     "(c_out)",
     kIO,
     {},
     "bias names output axes",
     "bias_shape",
     1,
     7},
    {"b c_in -> b c_out",
     "c_in c_out",
     "b",
     kIO,
     {},
     "bias axis 'b' is not given",
     "bias_shape",
     1,
     1},
    {"b ... c_in -> b ... c_out",
     "c_in c_out",
     "b c_out",
     {{"c_in", 8}, {"c_out", 4}, {"b", 2}},
     {},
     "bias axis 'b' comes before '...'",
     "pattern",
     15,
     1},
    // The input.
    {"b (h c) -> b (h d)",
     "h c d",
     {},
     {{"h", 2}, {"c", 3}, {"d", 4}},
     Shape{5, 7},
     "cannot split",
     "pattern",
     3,
     5},
    {"b c_in -> b c_out", "c_in c_out", {}, kIO, Shape{5, 7}, "c_in=8 was given", "pattern", 3, 4},
    {"b c_in -> b c_out", "c_in c_out", {}, kIO, Shape{5, 2, 8}, "dimension", "pattern", 1, 6},
};

INSTANTIATE_TEST_SUITE_P(Sema, EinMixErrors, ::testing::ValuesIn(kCases));

TEST(EinMixPlan, SplitsAndMakesCompositionsAroundOneEinsum) {
  const EinMixPlan plan = resolve_einmix({"b t (h c_in) -> b t (h c_out)",
                                          "h c_in c_out",
                                          "h c_out",
                                          {{"h", 4}, {"c_in", 16}, {"c_out", 32}, {"t", 10}},
                                          Shape{2, 10, 64}});
  EXPECT_EQ(plan.einsum, "b t h c_in, h c_in c_out -> b t h c_out");
  EXPECT_EQ(plan.pre, "b t (h c_in) -> b t h c_in");
  // every given size of the pre rearrange's axes, t included (the rearrange checks it)
  ASSERT_EQ(plan.pre_sizes.size(), 3u);
  EXPECT_EQ(plan.pre_sizes[2].name, "t");
  EXPECT_EQ(plan.post, "b t h c_out -> b t (h c_out)");
  EXPECT_EQ(plan.weight_shape, (Shape{4, 16, 32}));
  EXPECT_EQ(plan.bias_shape, (Shape{1, 1, 4, 32}));
  EXPECT_EQ(plan.fan_in, 16);
  EXPECT_DOUBLE_EQ(plan.weight_bound, std::sqrt(3.0 / 16));
  EXPECT_DOUBLE_EQ(plan.bias_bound, 0.25);
  EXPECT_EQ(plan.output, (Shape{2, 10, 128}));
  EXPECT_EQ(format_einmix(plan), "(2,10,128)");

  // Units on either side are compositions of nothing: a rearrange drops or makes them.
  const EinMixPlan units =
      resolve_einmix({"b 1 c -> b () d", "c d", std::nullopt, {{"c", 2}, {"d", 3}}, {}});
  EXPECT_EQ(units.pre, "b 1 c -> b c");
  EXPECT_EQ(units.post, "b d -> b () d");
  // '...' in the output's composition is made after the einsum.
  const EinMixPlan dots =
      resolve_einmix({"... c -> (...) d", "c d", "d", {{"c", 2}, {"d", 3}}, Shape{4, 5, 2}});
  EXPECT_EQ(dots.einsum, "... c, c d -> ... d");
  EXPECT_EQ(dots.post, "... d -> (...) d");
  EXPECT_EQ(dots.bias_shape, (Shape{3}));
  EXPECT_EQ(dots.output, (Shape{20, 3}));
  // A weight without axes: a scalar, fan_in 1.
  const EinMixPlan scalar = resolve_einmix({"b c -> c b", "", std::nullopt, {}, {}});
  EXPECT_EQ(scalar.einsum, "b c, -> c b");
  EXPECT_EQ(scalar.weight_shape, Shape{});
  EXPECT_EQ(format_einmix(scalar),
            "weight=() bias=None fan_in=1 einsum='b c, -> c b' pre=None post=None");
  // An empty contraction: nothing mixed, no bound to draw from.
  const EinMixPlan empty = resolve_einmix({"b c -> b d", "c d", "d", {{"c", 0}, {"d", 3}}, {}});
  EXPECT_EQ(empty.fan_in, 0);
  EXPECT_EQ(empty.weight_bound, 0);
  EXPECT_EQ(empty.bias_bound, 0);
}

}  // namespace
}  // namespace ein
