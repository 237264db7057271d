// UserError rendering: the exact compiler-style text, caret placement and width, notes.
#include <ein/diagnostic.h>

#include <gtest/gtest.h>

namespace ein {
namespace {

TEST(Diagnostic, RendersLocationLineCaretAndNotes) {
  auto src = make_source("pattern", "b (h w) c -> b h w c");
  UserError e("cannot split", src, {2, 7});
  e.note("input shape: (2,12,3)");
  EXPECT_EQ(std::string(e.what()),
            "pattern:1:3: error: cannot split\n"
            " b (h w) c -> b h w c\n"
            "   ^~~~~\n"
            "note: input shape: (2,12,3)");
  EXPECT_EQ(e.column(), 3u);
  EXPECT_EQ(e.message(), "cannot split");
}

TEST(Diagnostic, PointAtEndOfInputGetsOneCaret) {
  auto src = make_source("pattern", "(a b");
  UserError e("unclosed", src, {4, 4});
  EXPECT_EQ(std::string(e.what()), "pattern:1:5: error: unclosed\n (a b\n     ^");
}

TEST(Diagnostic, CaretStopsAtEndOfLineAndKeepsTabs) {
  auto src = make_source("f.ein", "x\tyy\nzz");
  UserError e("bad", src, {2, 9});  // runs past the line end
  EXPECT_EQ(std::string(e.what()), "f.ein:1:3: error: bad\n x\tyy\n  \t^~");
}

TEST(Diagnostic, LocatedNotesPointElsewhere) {
  auto src = make_source("pattern", "i j, j k -> i k");
  UserError e("mismatch", src, {5, 6});
  e.note_at("first here", src, {2, 3});
  EXPECT_EQ(std::string(e.what()),
            "pattern:1:6: error: mismatch\n i j, j k -> i k\n      ^\n"
            "pattern:1:3: note: first here\n i j, j k -> i k\n   ^");
  ASSERT_EQ(e.notes().size(), 1u);
}

TEST(Diagnostic, UnlocatedErrorsHaveNoCaret) {
  UserError e("var needs an explicit ddof");
  EXPECT_EQ(std::string(e.what()), "error: var needs an explicit ddof");
  EXPECT_EQ(e.column(), 0u);
}

TEST(Diagnostic, SecondLineOfAFileIsShown) {
  auto src = make_source("m.ein", "dim D = 64\nparam w: f32[D E]\n");
  UserError e("unknown dim 'E'", src, {26, 27});
  EXPECT_EQ(std::string(e.what()),
            "m.ein:2:16: error: unknown dim 'E'\n param w: f32[D E]\n                ^");
}

}  // namespace
}  // namespace ein
