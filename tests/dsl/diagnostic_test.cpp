// UserError rendering: the exact compiler-style text, caret placement and width, notes, and
// control characters in the quoted line, the message and the source name shown as escapes.
#include <ein/diagnostic.h>
#include <ein/pattern_parser.h>
#include <ein/source.h>

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

TEST(Diagnostic, ControlCharactersAreEscapedAndTheCaretStaysUnderThem) {
  // A NUL would cut what() short, a CR would overwrite the line, an ESC drive the terminal.
  auto src = make_source("pattern", std::string("a\0b\rc \x1b[31md -> a", 17));
  UserError nul("bad NUL", src, {1, 2});
  EXPECT_EQ(std::string(nul.what()),
            "pattern:1:2: error: bad NUL\n a\\x00b\\x0dc \\x1b[31md -> a\n  ^~~~");
  UserError cr("bad CR", src, {3, 4});
  EXPECT_EQ(std::string(cr.what()),
            "pattern:1:4: error: bad CR\n a\\x00b\\x0dc \\x1b[31md -> a\n       ^~~~");
  UserError after("after the escapes", src, {11, 12});  // 'd', after three escaped characters
  EXPECT_EQ(std::string(after.what()),
            "pattern:1:12: error: after the escapes\n a\\x00b\\x0dc \\x1b[31md -> a\n"
            "                     ^");
  // "b\rc \x1b" takes 1 + 4 + 1 + 1 + 4 = 11 columns once shown.
  UserError span("a span over escapes", src, {2, 7});
  EXPECT_EQ(std::string(span.what()),
            "pattern:1:3: error: a span over escapes\n a\\x00b\\x0dc \\x1b[31md -> a\n"
            "      ^~~~~~~~~~~");
}

TEST(Diagnostic, MessagesNotesAndSourceNamesNeverCarryRawControls) {
  UserError e("cannot open 'x\ry\x1b'");
  e.note("line one\nline two\tand a tab");  // a note's own line breaks and tabs stay
  EXPECT_EQ(std::string(e.what()),
            "error: cannot open 'x\\x0dy\\x1b'\nnote: line one\nline two\tand a tab");
  UserError named("bad", make_source("f\x1b.ein", "ab"), {1, 2});
  EXPECT_EQ(std::string(named.what()), "f\\x1b.ein:1:2: error: bad\n ab\n  ^");
}

TEST(Diagnostic, APatternWithControlCharactersPointsAtTheCulprit) {
  for (const char bad : {'\0', '\r', '\x1b'}) {
    SCOPED_TRACE(static_cast<int>(bad));
    const std::string text = std::string("b c") + bad + " d -> b c d";
    try {
      parse_pattern(text);
      FAIL() << "expected a UserError";
    } catch (const UserError& e) {
      const std::string what = e.what();
      const std::string escape = printable(std::string(1, bad));
      // The whole message is there (a NUL no longer ends it) and holds no raw control.
      for (char c : what)
        EXPECT_FALSE(static_cast<unsigned char>(c) < 0x20 && c != '\n') << what;
      const std::string quoted = " b c" + escape + " d -> b c d\n";
      const size_t at = what.find(quoted);
      ASSERT_NE(at, std::string::npos) << what;
      // The caret line sits under the escape: one space of indent, "b c", then '^'.
      EXPECT_EQ(what.substr(at + quoted.size(), 5), "    ^") << what;
      EXPECT_EQ(e.column(), 4u);
    }
  }
}

}  // namespace
}  // namespace ein

// Only well-formed UTF-8 counts as one character: overlong forms, surrogates and code points
// above U+10FFFF are single invalid bytes (a sample of byte-level model output once printed
// "\xED\xA0\x80", which Python and terminals reject).
TEST(Diagnostic, Utf8CharSizeAcceptsOnlyWellFormedSequences) {
  EXPECT_EQ(ein::utf8_char_size("\xC3\xA9"), 2u);          // é
  EXPECT_EQ(ein::utf8_char_size("\xED\x9F\xBF"), 3u);      // U+D7FF
  EXPECT_EQ(ein::utf8_char_size("\xF4\x8F\xBF\xBF"), 4u);  // U+10FFFF
  EXPECT_EQ(ein::utf8_char_size("\xED\xA0\x80"), 1u);      // a surrogate
  EXPECT_EQ(ein::utf8_char_size("\xC0\xAF"), 1u);          // overlong '/'
  EXPECT_EQ(ein::utf8_char_size("\xE0\x80\xAF"), 1u);      // overlong
  EXPECT_EQ(ein::utf8_char_size("\xF0\x80\x80\xAF"), 1u);  // overlong
  EXPECT_EQ(ein::utf8_char_size("\xF4\x90\x80\x80"), 1u);  // above U+10FFFF
  EXPECT_EQ(ein::utf8_char_size("\xF5\x80\x80\x80"), 1u);
}
