// Every user mistake we know of for pattern ops, with the message it gets and where the
// caret points (column and width), plus the notes on shapes and sizes bound so far.
#include <gtest/gtest.h>

#include "support/resolve.h"

namespace ein {
namespace {

using Op = PatternOp;

struct ErrorCase {
  Op op;
  const char* pattern;
  std::vector<Shape> shapes;
  std::vector<AxisSize> sizes;
  const char* message_part;
  uint32_t column;  // 0: the error has no location (an argument, not the pattern)
  uint32_t width;
  Reduction reduction = Reduction::sum;
  std::optional<int64_t> ddof = std::nullopt;
  DType dtype = DType::f32;
  bool list = false;
};

// Readable test names in gtest's output.
void PrintTo(const ErrorCase& c, std::ostream* os) {
  *os << op_name(c.op) << " '" << c.pattern << "'";
}

class PatternErrors : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(PatternErrors, StateTheRuleAndPointAtTheCause) {
  const ErrorCase& c = GetParam();
  auto req = testing::request(c.op, c.shapes, c.sizes, [&](ResolveRequest& r) {
    r.reduction = c.op == Op::reduce ? c.reduction : Reduction::none;
    r.ddof = c.ddof;
    r.dtype = c.dtype;
    r.list_input = c.list;
  });
  const auto err = testing::error_of(c.pattern, req);
  ASSERT_TRUE(err);
  EXPECT_NE(err->message().find(c.message_part), std::string::npos) << err->what();
  EXPECT_EQ(err->column(), c.column) << err->what();
  if (c.column) {
    EXPECT_EQ(err->range().size(), c.width) << err->what();
  }
  // No standard-library text ever reaches the user.
  EXPECT_EQ(std::string(err->what()).find("std::"), std::string::npos);
}

const ErrorCase kCases[] = {
    // Sizes and compositions.
    {Op::rearrange,
     "b (h w) c -> b h w c",
     {{2, 12, 3}},
     {{"h", 5}},
     "12 is not divisible by 5",
     3,
     5},
    {Op::rearrange,
     "(a b) c -> a b c",
     {{6, 4}},
     {{"a", 2}, {"b", 4}},
     "their product is 8, not 6",
     1,
     5},
    {Op::rearrange,
     "b s (h d) -> b h s d",
     {{2, 5, 12}},
     {},
     "cannot infer the sizes of h and d",
     5,
     5},
    {Op::rearrange,
     "b c h w -> b (c h w)",
     {{10, 21, 30, 40}},
     {{"c", 20}},
     "but c=20 was given",
     3,
     1},
    {Op::rearrange, "a 1 -> a", {{2, 3}}, {}, "unit axis must have length 1", 3, 1},
    {Op::reduce, "b (s 4) -> b s", {{2, 10}}, {}, "10 is not divisible by 4", 3, 5},
    {Op::rearrange, "(a b) -> a b", {{0}}, {}, "cannot infer the sizes of a and b", 1, 5},
    {Op::rearrange, "(a b) -> a b", {{0}}, {{"a", 0}}, "cannot infer b in (a b)", 1, 5},
    {Op::rearrange, "a b -> b a", {{2, 3}}, {{"c", 3}}, "no axis 'c'", 1, 10},
    // Dimension counts.
    {Op::rearrange,
     "b c h w -> b (c h w)",
     {{10, 10, 10}},
     {},
     "expects 4 dimensions, but the input has 3",
     1,
     7},
    {Op::rearrange, "b ... c -> c b ...", {{10}}, {}, "expects at least 2 dimensions", 1, 7},
    {Op::rearrange, "a -> a", {{}}, {}, "expects 1 dimension, but the input has 0", 1, 1},
    // Identifier rules per op.
    {Op::rearrange, "a b -> a b c", {{2, 3}}, {}, "'c' appears only on the right side", 12, 1},
    {Op::rearrange, "a b c -> a b", {{2, 3, 4}}, {}, "'c' appears only on the left side", 5, 1},
    {Op::rearrange, "a b 2 -> a b", {{2, 3, 2}}, {}, "anonymous axis 2 in rearrange", 5, 1},
    {Op::rearrange, "a b -> ... a b", {{2, 3}}, {}, "right side but not on the left", 8, 3},
    {Op::rearrange, "a ... -> a", {{2, 3}}, {}, "on the left side but not on the right", 3, 3},
    {Op::rearrange, "a b -> (a a) b", {{2, 3}}, {}, "'a' appears twice", 11, 1},
    {Op::rearrange, "a _ -> a _", {{2, 3}}, {}, "'_' skips an axis only in parse_shape", 3, 1},
    {Op::rearrange, "_pre -> _pre", {{2}}, {}, "'_pre' is not a valid axis name", 1, 4},
    {Op::rearrange,
     "a b c d (...) -> a b c ... d",
     {{1, 1, 1, 1, 1}},
     {},
     "only on the right side",
     9,
     5},
    {Op::rearrange, "... a ... -> a", {{1, 2}}, {}, "'...' only once", 7, 3},
    {Op::rearrange, "a b", {{2, 3}}, {}, "needs '->'", 1, 3},
    {Op::rearrange, "a, b -> a b", {{2}, {3}}, {}, "takes one input side", 4, 1},
    {Op::rearrange, "a * -> a", {{2, 3}}, {}, "'*' belongs to pack and unpack", 3, 1},
    {Op::reduce, "a b -> a b c", {{2, 3}}, {}, "'c' appears only on the right side", 12, 1},
    {Op::reduce, "a 2 -> a 2", {{3, 2}}, {}, "anonymous axis 2 on the right side of reduce", 10, 1},
    {Op::repeat, "a b -> a", {{2, 3}}, {}, "repeat cannot remove axes", 3, 1},
    {Op::repeat, "a 2 -> a", {{3, 2}}, {}, "anonymous axis 2 on the left side of repeat", 3, 1},
    {Op::repeat, "h w -> h w c", {{30, 40}}, {}, "new axis 'c' needs a size", 12, 1},
    // Reductions.
    {Op::reduce, "a b -> a", {{2, 3}}, {}, "reduce needs a reduction", 5, 2, Reduction::none},
    {Op::reduce,
     "a b -> a",
     {{2, 3}},
     {},
     "mean needs a floating-point tensor, but the input is i64",
     1,
     3,
     Reduction::mean,
     std::nullopt,
     DType::i64},
    {Op::reduce,
     "a b -> a",
     {{2, 0}},
     {},
     "max over zero elements has no identity",
     3,
     1,
     Reduction::max},
    {Op::reduce, "a b -> a", {{2, 3}}, {}, "var needs an explicit ddof", 5, 2, Reduction::var},
    {Op::reduce,
     "a b -> a",
     {{2, 1}},
     {},
     "std with ddof=1 over 1 element",
     5,
     2,
     Reduction::std,
     1},
    // Lists.
    {Op::rearrange,
     "b h w -> b h w",
     {{2, 3}, {2, 4}},
     {},
     "tensor 1 has shape (2,4)",
     1,
     5,
     Reduction::none,
     std::nullopt,
     DType::f32,
     true},
    // einsum.
    {Op::einsum,
     "i j, j k -> i k",
     {{2, 3}, {4, 5}},
     {},
     "'j' has length 4 here, but length 3",
     6,
     1},
    {Op::einsum,
     "ii->i",
     {{3}},
     {},
     "'i' on the right side of einsum appears in no input",
     5,
     1},  // 'ii' is one axis
    {Op::einsum, "i j -> i 2", {{3, 3}}, {}, "anonymous axis 2 on the right side of einsum", 10, 1},
    {Op::einsum,
     "... i -> i",
     {{2, 3}},
     {},
     "'...' dimensions (2,) are missing on the right side",
     10,
     1},
    {Op::einsum,
     "i i -> i",
     {{3, 1}},
     {},
     "'i' has length 1 here, but length 3",
     3,
     1},  // no broadcast in a diagonal
    {Op::rearrange, "a 0 -> a", {{2, 1}}, {}, "positive length", 3, 1},
    {Op::parse_shape, "a 0", {{2, 1}}, {}, "positive length", 3, 1},
    {Op::rearrange, "a b -> (a b)", {{INT64_MAX, 3}}, {}, "beyond the largest tensor size", 8, 5},
    {Op::repeat,
     "a -> a b c",
     {{2}},
     {{"b", int64_t{1} << 32}, {"c", int64_t{1} << 32}},
     "beyond the largest",
     6,
     5},  // the numel
    {Op::pack,
     "a * b",
     {{2, 3, 4}, {3, 3, 4}},
     {},
     "length 3 in tensor 1, but length 2 in tensor 0",
     1,
     1},
    {Op::pack, "... *", {{2, 3}}, {}, "'...' is not allowed in pack", 1, 3},
    {Op::rearrange, "a b -> a b", {}, {}, "needs one input shape, but none was given", 1, 3},
    {Op::einsum, "i j, j k -> i k", {{2, 3}}, {}, "2 input sides, but 1 tensor was given", 6, 3},
    {Op::einsum, "i j -> i i", {{2, 3}}, {}, "'i' appears twice", 10, 1},
    {Op::einsum, "... i, ... i -> ...", {{4, 3}, {5, 3}}, {}, "do not broadcast", 8, 3},
    {Op::einsum, "i j", {{2, 3}}, {}, "needs '->'", 1, 3},
};

INSTANTIATE_TEST_SUITE_P(All, PatternErrors, ::testing::ValuesIn(kCases));

TEST(PatternErrorNotes, ListInputShapesAndSizesBoundSoFar) {
  const auto err = testing::error_of("b (h w) c -> b h w c",
                                     testing::request(Op::rearrange, {{2, 12, 3}}, {{"h", 5}}));
  ASSERT_TRUE(err);
  ASSERT_EQ(err->notes().size(), 2u);
  EXPECT_EQ(err->notes()[0].text, "input shape: (2,12,3)");
  // Given sizes first, then the order in which the pattern bound them: deterministic.
  EXPECT_EQ(err->notes()[1].text, "sizes bound so far: h=5 (given), b=2, c=3");
}

TEST(PatternErrorNotes, EinsumMismatchPointsAtBothOccurrences) {
  const auto err =
      testing::error_of("i j, j k -> i k", testing::request(Op::einsum, {{2, 3}, {4, 5}}));
  ASSERT_TRUE(err);
  ASSERT_GE(err->notes().size(), 1u);
  EXPECT_EQ(err->notes()[0].text, "'j' first appears here, with length 3");
  ASSERT_TRUE(err->notes()[0].source);
  EXPECT_EQ(err->notes()[0].range, (SourceRange{2, 3}));
}

}  // namespace
}  // namespace ein
