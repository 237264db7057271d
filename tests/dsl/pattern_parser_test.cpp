// The pattern parser: AST shape and ranges, every syntax error with its caret column, and
// parse → print → parse round trips (over hand-picked patterns and every pattern in the
// einops conformance table).
#include <gtest/gtest.h>

#include <set>

#include "conformance/tsv.h"
#include <ein/diagnostic.h>
#include <ein/pattern_parser.h>
#include <ein/pattern_printer.h>

namespace ein {
namespace {

using Kind = AxisToken::Kind;

TEST(PatternParser, BuildsSidesTermsAndTokens) {
  const Pattern p = parse_pattern("b s (h d) -> b h s d");
  ASSERT_EQ(p.inputs.size(), 1u);
  ASSERT_TRUE(p.output.has_value());
  const PatternSide& in = p.inputs[0];
  ASSERT_EQ(in.terms.size(), 3u);
  EXPECT_FALSE(in.terms[0].is_group);
  EXPECT_EQ(in.terms[0].tokens[0].name, "b");
  EXPECT_TRUE(in.terms[2].is_group);
  ASSERT_EQ(in.terms[2].tokens.size(), 2u);
  EXPECT_EQ(in.terms[2].tokens[1].name, "d");
  EXPECT_EQ(p.output->terms.size(), 4u);
}

TEST(PatternParser, RangesCoverTokensGroupsSidesAndArrow) {
  const Pattern p = parse_pattern("b (h w)  c->c");
  const PatternSide& in = p.inputs[0];
  EXPECT_EQ(in.terms[0].range, (SourceRange{0, 1}));
  EXPECT_EQ(in.terms[1].range, (SourceRange{2, 7}));
  EXPECT_EQ(in.terms[1].tokens[0].range, (SourceRange{3, 4}));
  EXPECT_EQ(in.terms[2].range, (SourceRange{9, 10}));
  EXPECT_EQ(in.range, (SourceRange{0, 10}));
  EXPECT_EQ(p.arrow, (SourceRange{10, 12}));
  EXPECT_EQ(p.output->range, (SourceRange{12, 13}));
}

TEST(PatternParser, NumbersUnitsEllipsisStar) {
  const Pattern p = parse_pattern("1 () 3 ... (a ...) * \xE2\x80\xA6");
  const auto& t = p.inputs[0].terms;
  ASSERT_EQ(t.size(), 7u);
  EXPECT_TRUE(t[0].tokens[0].is_unit());
  EXPECT_TRUE(t[1].is_group);
  EXPECT_TRUE(t[1].tokens.empty());
  EXPECT_EQ(t[2].tokens[0].kind, Kind::number);
  EXPECT_EQ(t[2].tokens[0].value, 3);
  EXPECT_EQ(t[3].tokens[0].kind, Kind::ellipsis);
  EXPECT_EQ(t[4].tokens[1].kind, Kind::ellipsis);
  EXPECT_EQ(t[5].tokens[0].kind, Kind::star);
  EXPECT_EQ(t[6].tokens[0].kind, Kind::ellipsis);  // the one-character '…'
  EXPECT_FALSE(p.output.has_value());
}

TEST(PatternParser, EinsumInputsAndEmptySides) {
  const Pattern p = parse_pattern("b i d, b j d -> b i j");
  EXPECT_EQ(p.inputs.size(), 2u);
  const Pattern scalar = parse_pattern("->");
  EXPECT_EQ(scalar.inputs.size(), 1u);
  EXPECT_TRUE(scalar.inputs[0].terms.empty());
  EXPECT_TRUE(scalar.output->terms.empty());
  EXPECT_TRUE(parse_pattern("").inputs[0].terms.empty());
}

struct SyntaxError {
  const char* pattern;
  const char* message_part;
  uint32_t column;
  uint32_t width;
};

class PatternSyntaxErrors : public ::testing::TestWithParam<SyntaxError> {};

TEST_P(PatternSyntaxErrors, PointAtTheOffendingText) {
  const SyntaxError& c = GetParam();
  try {
    parse_pattern(c.pattern);
    FAIL() << "parsed: " << c.pattern;
  } catch (const UserError& e) {
    EXPECT_NE(e.message().find(c.message_part), std::string::npos) << e.what();
    EXPECT_EQ(e.column(), c.column) << e.what();
    EXPECT_EQ(e.range().size(), c.width) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(
    All, PatternSyntaxErrors,
    ::testing::Values(SyntaxError{"(a b c (d ...)", "cannot nest", 8, 1},
                      SyntaxError{"((a b)) -> a b", "cannot nest", 2, 1},
                      SyntaxError{"(a)) b c", "')' without a matching '('", 4, 1},
                      SyntaxError{"a (b c -> a b c", "never closed", 3, 1},
                      SyntaxError{"a (b c", "never closed", 3, 1},
                      SyntaxError{"a b-c", "unexpected character '-'", 4, 1},
                      SyntaxError{"a -> b -> c", "at most one '->'", 8, 2},
                      SyntaxError{"a -> b, c", "commas only separate inputs", 7, 1},
                      SyntaxError{"...pre", "'...pre' is not an axis", 1, 6},
                      SyntaxError{"a pre...", "'pre...' is not an axis", 3, 6},
                      SyntaxError{"1h_ w *", "'1h_' is not an axis", 1, 3},
                      SyntaxError{"a 2.5 -> a", "'2.5' is not an axis", 3, 3},
                      SyntaxError{"a b -> a \xC3\xA9", "unexpected character '\xC3\xA9'", 10, 2},
                      SyntaxError{"a 99999999999999999999 -> a", "too large", 3, 20},
                      SyntaxError{"a $ b", "unexpected character '$'", 3, 1}));

// Canonical text, and parse(print(p)) == p.
TEST(PatternPrinter, PrintsCanonicalText) {
  EXPECT_EQ(print(parse_pattern("  b   s (h  d)->b h s d ")), "b s (h d) -> b h s d");
  EXPECT_EQ(print(parse_pattern("a ()  1 (1 4) \xE2\x80\xA6 -> (...)")),
            "a () 1 (1 4) ... -> (...)");
  EXPECT_EQ(print(parse_pattern("i j,j k->i k")), "i j, j k -> i k");
  EXPECT_EQ(print(parse_pattern("->")), "-> ");
  EXPECT_EQ(print(parse_pattern("h w *")), "h w *");
}

void expect_round_trip(const std::string& text) {
  const Pattern first = parse_pattern(text);
  const std::string printed = print(first);
  const Pattern second = parse_pattern(printed);
  EXPECT_TRUE(same_structure(first, second)) << "'" << text << "' printed as '" << printed << "'";
  EXPECT_EQ(print(second), printed) << "printing is not idempotent for '" << text << "'";
}

TEST(PatternPrinter, RoundTripsHandPickedPatterns) {
  for (const char* text :
       {"b s (h d) -> b h s d", "... -> ...", "a ... c -> a (...) c", "() -> 1 1",
        "b c (h h1) (w w1) -> b (h1 w1 c) h w", "i i ->", "a _, _ b -> a b", "", "->", "* h w",
        "batch _ h w", "(name1 ... a1 12) name2 14", "a 2 -> a 2"})
    expect_round_trip(text);
}

TEST(PatternPrinter, RoundTripsEveryParsableConformancePattern) {
  int parsed = 0;
  for (const auto& row : testing::read_tsv(testing::conformance_file("einops_cases.tsv"))) {
    try {
      parse_pattern(row["pattern"]);
    } catch (const UserError&) {
      continue;  // syntax errors are covered above
    }
    expect_round_trip(row["pattern"]);
    ++parsed;
  }
  EXPECT_GT(parsed, 280);
}

TEST(PatternAst, SameStructureIgnoresRangesOnly) {
  EXPECT_TRUE(same_structure(parse_pattern("a  b->b a"), parse_pattern("a b -> b a")));
  EXPECT_FALSE(same_structure(parse_pattern("a b -> b a"), parse_pattern("a b -> a b")));
  EXPECT_FALSE(same_structure(parse_pattern("(a b) -> a b"), parse_pattern("a b -> a b")));
  EXPECT_FALSE(same_structure(parse_pattern("a b"), parse_pattern("a b ->")));
  EXPECT_FALSE(same_structure(parse_pattern("1 -> 1"), parse_pattern("2 -> 2")));
}

}  // namespace
}  // namespace ein
