// Sema recipes for rearrange/reduce/repeat/einsum: elementary axes, split, reduced axes,
// permutation, added axes and output shapes; ein's extensions; zero-size and list inputs.
#include <ein/patterns.h>

#include <gtest/gtest.h>

#include "support/resolve.h"

namespace ein {
namespace {

using testing::request;
using testing::resolve;
using Op = PatternOp;

std::vector<std::string> names(const Recipe& r, const std::vector<int>& ids) {
  std::vector<std::string> out;
  for (int id : ids)
    out.push_back(r.axes[id].name);
  return out;
}

TEST(RearrangeSema, SplitPermuteMerge) {
  const Recipe r =
      resolve("b s (h d) -> b h s d", request(Op::rearrange, {{2, 5, 12}}, {{"h", 3}}));
  EXPECT_EQ(r.output_shape(), (Shape{2, 3, 5, 4}));
  EXPECT_EQ(r.elementary_shape, (Shape{2, 5, 3, 4}));
  EXPECT_EQ(names(r, r.elementary_axes), (std::vector<std::string>{"b", "s", "h", "d"}));
  EXPECT_EQ(r.permutation, (std::vector<int>{0, 2, 1, 3}));
  EXPECT_TRUE(r.reduced_axes.empty());
  EXPECT_TRUE(r.added_axes.empty());
  ASSERT_EQ(r.input_groups.size(), 1u);
  EXPECT_EQ(r.input_groups[0].size(), 3u);
  EXPECT_EQ(r.input_groups[0][2].size(), 2u);
}

TEST(RearrangeSema, EllipsisExpandsInCOrder) {
  const Recipe r = resolve("a ... e -> e (...) a", request(Op::rearrange, {{2, 3, 4, 5, 6}}));
  EXPECT_EQ(r.output_shape(), (Shape{6, 60, 2}));
  EXPECT_EQ(r.permutation, (std::vector<int>{4, 1, 2, 3, 0}));
  EXPECT_EQ(r.axes[1].origin, ElementaryAxis::Origin::ellipsis);
  // An ellipsis may also stand for no axes at all.
  EXPECT_EQ(resolve("a ... -> ... a", request(Op::rearrange, {{7}})).output_shape(), (Shape{7}));
  EXPECT_EQ(resolve("... -> (...)", request(Op::rearrange, {{}})).output_shape(), (Shape{1}));
}

TEST(RearrangeSema, UnitsAndOnesAreDroppedOrAdded) {
  EXPECT_EQ(resolve("a 1 b () -> () b a 1", request(Op::rearrange, {{2, 1, 3, 1}})).output_shape(),
            (Shape{1, 3, 2, 1}));
  EXPECT_EQ(resolve("(a 1) b -> a (1 b)", request(Op::rearrange, {{2, 3}})).output_shape(),
            (Shape{2, 3}));
}

TEST(ParseShapeSema, OneAxisGroupsAreNotCompositions) {
  EXPECT_EQ(format_result(resolve("a (b) ()", request(Op::parse_shape, {{2, 3, 1}}))), "{a:2,b:3}");
}

TEST(RearrangeSema, ZeroSizeAxesAndCompositions) {
  EXPECT_EQ(resolve("a b -> b a", request(Op::rearrange, {{0, 3}})).output_shape(), (Shape{3, 0}));
  EXPECT_EQ(resolve("(a b) -> a b", request(Op::rearrange, {{0}}, {{"a", 2}})).output_shape(),
            (Shape{2, 0}));
  EXPECT_EQ(
      resolve("(a b) -> b a", request(Op::rearrange, {{0}}, {{"a", 0}, {"b", 5}})).output_shape(),
      (Shape{5, 0}));
}

TEST(RearrangeSema, ListInputIsStackedFirst) {
  auto req = request(Op::rearrange, {{3, 4}, {3, 4}});
  req.list_input = true;
  const Recipe r = resolve("b h w -> h (b w)", req);
  EXPECT_EQ(r.output_shape(), (Shape{3, 8}));
  EXPECT_EQ(r.elementary_shape, (Shape{2, 3, 4}));
  req.shapes = {{5}};  // a one-element list still gains the stacking axis
  EXPECT_EQ(resolve("b w -> w b", req).output_shape(), (Shape{5, 1}));
}

TEST(ReduceSema, ReducedAxesAndKeepdims) {
  const auto sum = [](ResolveRequest& r) { r.reduction = Reduction::max; };
  const Recipe r = resolve("b c (h h2) (w w2) -> b c h w",
                           request(Op::reduce, {{10, 20, 30, 40}}, {{"h2", 2}, {"w2", 2}}, sum));
  EXPECT_EQ(r.output_shape(), (Shape{10, 20, 15, 20}));
  EXPECT_EQ(names(r, r.reduced_axes), (std::vector<std::string>{"h2", "w2"}));
  EXPECT_EQ(r.permutation, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(
      resolve("b c h w -> b c 1 ()", request(Op::reduce, {{2, 3, 4, 5}}, {}, sum)).output_shape(),
      (Shape{2, 3, 1, 1}));
  EXPECT_EQ(resolve("... ->", request(Op::reduce, {{2, 3}}, {}, sum)).output_shape(), (Shape{}));
}

TEST(ReduceSema, AnonymousAxesOnTheLeftAreReduced) {
  const auto min = [](ResolveRequest& r) { r.reduction = Reduction::min; };
  const Recipe r = resolve("(d copy 1) 3 b c -> 1 b c d",
                           request(Op::reduce, {{18, 3, 2, 4}}, {{"copy", 3}}, min));
  EXPECT_EQ(r.output_shape(), (Shape{1, 2, 4, 6}));
  EXPECT_EQ(r.reduced_axes.size(), 2u);  // copy and the anonymous 3
}

TEST(ReduceSema, ExtensionsLogsumexpVarStd) {
  const auto with = [](Reduction red, std::optional<int64_t> ddof) {
    return [=](ResolveRequest& r) {
      r.reduction = red;
      r.ddof = ddof;
    };
  };
  EXPECT_EQ(
      resolve("b t d -> b d", request(Op::reduce, {{2, 5, 8}}, {}, with(Reduction::logsumexp, {})))
          .output_shape(),
      (Shape{2, 8}));
  EXPECT_EQ(resolve("b t d -> b d", request(Op::reduce, {{2, 5, 8}}, {}, with(Reduction::var, 1)))
                .output_shape(),
            (Shape{2, 8}));
  EXPECT_EQ(resolve("b t d -> b", request(Op::reduce, {{2, 5, 8}}, {}, with(Reduction::std, 0)))
                .output_shape(),
            (Shape{2}));
  // ddof = 0 over a single element is fine (variance 0); ddof = 1 over one element is not.
  EXPECT_NO_THROW(resolve("b t -> b", request(Op::reduce, {{2, 1}}, {}, with(Reduction::var, 0))));
  EXPECT_TRUE(
      testing::error_of("b t -> b", request(Op::reduce, {{2, 1}}, {}, with(Reduction::var, 1))));
}

TEST(RepeatSema, NewAxesTakeGivenOrAnonymousSizes) {
  const Recipe r =
      resolve("h w -> (h h2) (w 3) c", request(Op::repeat, {{30, 40}}, {{"h2", 2}, {"c", 5}}));
  EXPECT_EQ(r.output_shape(), (Shape{60, 120, 5}));
  EXPECT_EQ(names(r, r.added_axes), (std::vector<std::string>{"h2", "3", "c"}));
  EXPECT_EQ(r.permutation, (std::vector<int>{0, 1}));
  EXPECT_EQ(resolve("-> a 2", request(Op::repeat, {{}}, {{"a", 3}})).output_shape(), (Shape{3, 2}));
}

TEST(EinsumSema, ContractionBatchAndOutputOrder) {
  const Recipe r = resolve("b s d, d f -> b s f", request(Op::einsum, {{2, 5, 12}, {12, 7}}));
  EXPECT_EQ(r.output_shape(), (Shape{2, 5, 7}));
  EXPECT_EQ(names(r, r.reduced_axes), (std::vector<std::string>{"d"}));
  EXPECT_EQ(r.input_groups.size(), 2u);
}

TEST(EinsumSema, TraceDiagonalAndEllipsisBroadcast) {
  EXPECT_EQ(resolve("i i ->", request(Op::einsum, {{4, 4}})).output_shape(), (Shape{}));
  EXPECT_EQ(resolve("i ... i -> i ...", request(Op::einsum, {{5, 3, 2, 5}})).output_shape(),
            (Shape{5, 3, 2}));
  // '...' of different ranks broadcast numpy-style, size 1 stretching.
  EXPECT_EQ(resolve("... i, ... i -> ...", request(Op::einsum, {{4, 1, 3}, {5, 3}})).output_shape(),
            (Shape{4, 5}));
}

TEST(EinsumSema, ExtensionCompositionsOnBothSides) {
  // einops issue #286: heads split inside einsum, sizes flowing from another operand.
  const Recipe r =
      resolve("b s (h d), h d f -> b s (h f)", request(Op::einsum, {{2, 5, 12}, {3, 4, 7}}));
  EXPECT_EQ(r.output_shape(), (Shape{2, 5, 21}));
  EXPECT_EQ(names(r, r.reduced_axes), (std::vector<std::string>{"d"}));
  EXPECT_EQ(resolve("a b -> (a b)", request(Op::einsum, {{5, 1}})).output_shape(), (Shape{5}));
  EXPECT_EQ(resolve("(a b) c -> a b c", request(Op::einsum, {{6, 2}}, {{"a", 2}})).output_shape(),
            (Shape{2, 3, 2}));
}

TEST(EinsumSema, ExtensionAnonymousAndUnitAxes) {
  // An anonymous axis is distinct from every other axis, so it is summed over.
  EXPECT_EQ(resolve("i 2 -> i", request(Op::einsum, {{5, 2}})).output_shape(), (Shape{5}));
  EXPECT_EQ(resolve("i 1, 1 j -> i 1 j ()", request(Op::einsum, {{5, 1}, {1, 4}})).output_shape(),
            (Shape{5, 1, 4, 1}));
}

TEST(EinsumSema, SizeOneAxesBroadcastAcrossOperandsAsInNumpy) {
  EXPECT_EQ(resolve("i j, j k -> i k", request(Op::einsum, {{2, 1}, {3, 4}})).output_shape(),
            (Shape{2, 4}));
  EXPECT_EQ(resolve("b i, b i -> b", request(Op::einsum, {{1, 3}, {5, 3}})).output_shape(),
            (Shape{5}));
  // '...' on the right with none on the left is empty, as in numpy.
  EXPECT_EQ(resolve("i j -> ... i", request(Op::einsum, {{2, 3}})).output_shape(), (Shape{2}));
}

// einops.einsum's identifier rule: a lone '_' is a name, but no name starts or ends with one.
TEST(EinsumSema, IdentifierRulesAreEinops) {
  EXPECT_EQ(resolve("_ j, j k -> _ k", request(Op::einsum, {{2, 3}, {3, 4}})).output_shape(),
            (Shape{2, 4}));
  EXPECT_EQ(resolve("a_b j -> j a_b", request(Op::einsum, {{2, 3}})).output_shape(),
            (Shape{3, 2}));
  for (const char* bad : {"a_ j -> j", "_a j -> j", "i j -> j_"}) {
    const auto e = testing::error_of(bad, request(Op::einsum, {{2, 3}}));
    ASSERT_TRUE(e) << bad;
    EXPECT_NE(e->message().find("not start or end with '_'"), std::string::npos) << e->what();
  }
}

TEST(EinsumSema, GivenSizesAreVerified) {
  EXPECT_EQ(resolve("i j -> j", request(Op::einsum, {{2, 3}}, {{"j", 3}})).output_shape(),
            (Shape{3}));
  EXPECT_TRUE(testing::error_of("i j -> j", request(Op::einsum, {{2, 3}}, {{"j", 4}})));
}

TEST(RecipeText, FormatsAndExplains) {
  EXPECT_EQ(format_shape(Shape{}), "()");
  EXPECT_EQ(format_shape(Shape{5}), "(5,)");
  EXPECT_EQ(format_shape(Shape{2, 3}), "(2,3)");
  const std::string text =
      explain(resolve("b (h w) -> w b h", request(Op::rearrange, {{2, 12}}, {{"h", 3}})));
  EXPECT_NE(text.find("split: b (h w) -> (2,3,4)"), std::string::npos) << text;
  EXPECT_NE(text.find("permute: [2,0,1]"), std::string::npos) << text;
  EXPECT_NE(text.find("result: (4,2,3)"), std::string::npos) << text;
}

TEST(OpNames, ParseAndPrintEveryName) {
  for (auto op :
       {Op::rearrange, Op::reduce, Op::repeat, Op::einsum, Op::pack, Op::unpack, Op::parse_shape})
    EXPECT_EQ(parse_pattern_op(op_name(op)), op);
  for (auto r :
       {Reduction::min, Reduction::max, Reduction::sum, Reduction::mean, Reduction::prod,
        Reduction::any, Reduction::all, Reduction::logsumexp, Reduction::var, Reduction::std})
    EXPECT_EQ(parse_reduction(reduction_name(r)), r);
  EXPECT_FALSE(parse_reduction("median"));
  EXPECT_FALSE(parse_pattern_op("transpose"));
}

}  // namespace
}  // namespace ein
