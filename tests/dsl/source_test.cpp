// Source bookkeeping: line/column lookup and line extraction that diagnostics rely on.
#include <ein/source.h>

#include <gtest/gtest.h>

namespace ein {
namespace {

TEST(Source, LocatesOffsetsOnOneLine) {
  Source s("p", "b (h w) c");
  EXPECT_EQ(s.locate(0).line, 1u);
  EXPECT_EQ(s.locate(0).column, 1u);
  EXPECT_EQ(s.locate(2).column, 3u);
  EXPECT_EQ(s.locate(9).column, 10u);   // end of input is a valid point
  EXPECT_EQ(s.locate(99).column, 10u);  // clamped, never out of bounds
}

TEST(Source, LocatesOffsetsAcrossLines) {
  Source s("model.ein", "dim D = 64\nfn f(x: f32[B D]) = x\n\nend");
  EXPECT_EQ(s.locate(11).line, 2u);
  EXPECT_EQ(s.locate(11).column, 1u);
  EXPECT_EQ(s.locate(14).column, 4u);
  EXPECT_EQ(s.line_of(14), "fn f(x: f32[B D]) = x");
  EXPECT_EQ(s.line_of(0), "dim D = 64");
  EXPECT_EQ(s.line_of(33), "");  // the empty third line
  EXPECT_EQ(s.locate(34).line, 4u);
  EXPECT_EQ(s.line_of(34), "end");
}

TEST(Source, SlicesAndMergesRanges) {
  Source s("p", "a b -> b a");
  EXPECT_EQ(s.slice({2, 3}), "b");
  EXPECT_EQ(s.slice({4, 100}), "-> b a");
  EXPECT_EQ(s.slice({50, 60}), "");
  EXPECT_EQ((SourceRange{2, 3}.merge({7, 8})), (SourceRange{2, 8}));
  EXPECT_EQ((SourceRange{5, 5}.size()), 0u);
}

}  // namespace
}  // namespace ein
