// pack / unpack / parse_shape: shapes, packed shapes, -1 inference, and their errors.
#include <gtest/gtest.h>

#include "support/resolve.h"

namespace ein {
namespace {

using testing::error_of;
using testing::request;
using testing::resolve;
using Op = PatternOp;

ResolveRequest unpack_request(Shape shape, std::vector<std::vector<int64_t>> ps) {
  return request(Op::unpack, {std::move(shape)}, {}, [&](ResolveRequest& r) { r.packed = ps; });
}

TEST(Pack, JoinsAlongStarAndRecordsPackedShapes) {
  const Recipe r =
      resolve("i j * k", request(Op::pack, {{2, 3, 5}, {2, 3, 7, 5}, {2, 3, 7, 9, 5}}));
  EXPECT_EQ(r.output_shape(), (Shape{2, 3, 71, 5}));
  EXPECT_EQ(r.packed_shapes, (std::vector<Shape>{{}, {7}, {7, 9}}));
  EXPECT_EQ(format_result(r), "(2,3,71,5) ps=[();(7,);(7,9)]");
  EXPECT_EQ(format_result(resolve("* w", request(Op::pack, {{13, 17}, {13, 17}}))),
            "(26,17) ps=[(13,);(13,)]");
}

TEST(Pack, Errors) {
  auto e = error_of("h w nonexisting_axis *", request(Op::pack, {{13, 17}, {13, 17, 32}}));
  ASSERT_TRUE(e);
  EXPECT_NE(e->message().find("tensor 0 has shape (13,17)"), std::string::npos) << e->what();
  e = error_of("h w *", request(Op::pack, {{13, 17}, {14, 17}}));
  ASSERT_TRUE(e);
  EXPECT_NE(e->message().find("'h' has length 14"), std::string::npos) << e->what();
  EXPECT_EQ(e->column(), 1u);
  e = error_of("h h *", request(Op::pack, {{2, 2}}));
  ASSERT_TRUE(e);
  EXPECT_EQ(e->column(), 3u);
  EXPECT_TRUE(error_of("1 w *", request(Op::pack, {{1, 2}})));
  EXPECT_TRUE(error_of("h w", request(Op::pack, {{1, 2}})));
  EXPECT_TRUE(error_of("h * w *", request(Op::pack, {{1, 2}})));
  EXPECT_TRUE(error_of("h (w *)", request(Op::pack, {{1, 2}})));
  EXPECT_TRUE(error_of("h w * -> h", request(Op::pack, {{1, 2}})));
  // einops splits pack patterns at spaces: '*b' and 'a*' are (invalid) axis names there.
  for (const char* glued : {"a *b", "a* b", "a*b"}) {
    e = error_of(glued, request(Op::pack, {{2, 3}}));
    ASSERT_TRUE(e) << glued;
    EXPECT_NE(e->message().find("'*' stands alone"), std::string::npos) << e->what();
  }
  e = error_of("a *b", request(Op::pack, {{2, 3}}));
  ASSERT_TRUE(e);
  EXPECT_EQ(e->column(), 3u);
}

TEST(Unpack, SplitsAndInfersOneMinusOne) {
  EXPECT_EQ(format_result(resolve("four * three", unpack_request({4, 5, 3}, {{2, -1}, {1, 5}}))),
            "[(4,2,0,3);(4,1,5,3)]");
  EXPECT_EQ(format_result(resolve("*", unpack_request({5}, {{0}, {5}, {-1}}))), "[(0,);(5,);(0,)]");
  EXPECT_EQ(format_result(resolve("seven *", unpack_request({7, 5}, {{2}, {-1}, {2}}))),
            "[(7,2);(7,1);(7,2)]");
}

TEST(Unpack, Errors) {
  for (const auto& ps : std::vector<std::vector<std::vector<int64_t>>>{{{2}, {1}, {1}},
                                                                       {{2}, {4}, {-1}},
                                                                       {{-1, 2}, {1}, {5}},
                                                                       {{2, 1}, {1}, {3, -1}},
                                                                       {{-1}, {-1}, {1}},
                                                                       {{-3}}}) {
    const auto e = error_of("four * three", unpack_request({4, 5, 3}, ps));
    ASSERT_TRUE(e);
    EXPECT_EQ(e->column(), 6u) << e->what();  // under the '*'
  }
  EXPECT_TRUE(error_of("* seven extra", unpack_request({5, 7}, {{2}, {3}})));
  EXPECT_TRUE(error_of("*", unpack_request({5}, {})));
}

TEST(ParseShape, BindsNamesSkipsUnderscoresChecksNumbers) {
  EXPECT_EQ(format_result(resolve("batch _ h w", request(Op::parse_shape, {{2, 3, 5, 7}}))),
            "{batch:2,h:5,w:7}");
  EXPECT_EQ(format_result(resolve("_ _ _ hello", request(Op::parse_shape, {{10, 20, 30, 40}}))),
            "{hello:40}");
  EXPECT_EQ(format_result(resolve(" a ... b", request(Op::parse_shape, {{10, 20, 30, 40}}))),
            "{a:10,b:40}");
  EXPECT_EQ(format_result(resolve("...", request(Op::parse_shape, {{10, 20}}))), "{}");
  EXPECT_EQ(format_result(resolve("a () 2", request(Op::parse_shape, {{10, 1, 2}}))), "{a:10}");
}

TEST(ParseShape, Errors) {
  struct Case {
    const char* pattern;
    Shape shape;
    const char* part;
    uint32_t column;
  };
  for (const Case& c : {Case{"a a b b", {10, 20, 30, 40}, "'a' appears twice", 3},
                        Case{"2 a b c", {1, 2, 3, 4}, "anonymous axis 2 must have length 2", 1},
                        Case{"a b c ()", {1, 2, 3, 4}, "unit axis must have length 1", 7},
                        Case{"a b c d e", {1, 2, 3, 4}, "expects 5 dimensions", 1},
                        Case{"(a b) c", {6, 4}, "cannot hold compositions", 1}}) {
    const auto e = error_of(c.pattern, request(Op::parse_shape, {c.shape}));
    ASSERT_TRUE(e) << c.pattern;
    EXPECT_NE(e->message().find(c.part), std::string::npos) << e->what();
    EXPECT_EQ(e->column(), c.column) << e->what();
  }
}

TEST(ParseExpression, EinopsComposition) {
  EXPECT_EQ(parse_expression(parse_pattern("5 1 (1 4) 1")), "[(5) () (4) ()]");
  EXPECT_EQ(parse_expression(parse_pattern("name1 ... a1 12 (name2 14)")),
            "[(name1) ... (a1) (12) (name2 14)]");
  EXPECT_EQ(parse_expression(parse_pattern("(name1 ... a1 12) name2 14")),
            "[(name1 ... a1 12) (name2) (14)]");
  EXPECT_THROW(parse_expression(parse_pattern("... a b c d ...")), UserError);
  EXPECT_THROW(parse_expression(parse_pattern("a, b")), UserError);
  EXPECT_THROW(parse_expression(parse_pattern("_pre")), UserError);
}

}  // namespace
}  // namespace ein
