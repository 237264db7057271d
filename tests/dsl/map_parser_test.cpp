// The map-expression parser: inputs and axes, the expression tree Python's precedence
// gives, source ranges, every syntax error with its message and caret, and
// parse → print → parse round trips.
#include <gtest/gtest.h>

#include <cmath>

#include <ein/diagnostic.h>
#include "dsl/map_parser.h"
#include "dsl/map_printer.h"

namespace ein {
namespace {

const Binary& binary(const Expr& e) {
  return std::get<Binary>(e.node);
}
const Unary& unary(const Expr& e) {
  return std::get<Unary>(e.node);
}
const Call& call(const Expr& e) {
  return std::get<Call>(e.node);
}
const std::string& name(const Expr& e) {
  return std::get<Name>(e.node).name;
}
double number(const Expr& e) {
  return std::get<Number>(e.node).value;
}

// The tree with every node parenthesized, to state precedence compactly.
std::string tree(const Expr& e) {
  if (const auto* n = std::get_if<Number>(&e.node)) return n->text;
  if (const auto* n = std::get_if<Name>(&e.node)) return n->name;
  if (const auto* u = std::get_if<Unary>(&e.node))
    return "(" + std::string(spelling(u->op)) + tree(*u->operand) + ")";
  if (const auto* b = std::get_if<Binary>(&e.node))
    return "(" + tree(*b->lhs) + " " + std::string(spelling(b->op)) + " " + tree(*b->rhs) + ")";
  const Call& c = std::get<Call>(e.node);
  std::string out = c.name + "(";
  for (size_t i = 0; i < c.args.size(); ++i)
    out += (i ? ", " : "") + tree(*c.args[i]);
  return out + ")";
}

std::string tree_of(const std::string& body) {
  return tree(parse_map("x[i] -> " + body).body);
}

TEST(MapParser, InputsAxesAndBody) {
  const MapExpr m = parse_map("x[b s d], m[b s], w[d], c[d] -> (x - m)**2 * w + c");
  ASSERT_EQ(m.inputs.size(), 4u);
  EXPECT_EQ(m.inputs[0].name, "x");
  ASSERT_EQ(m.inputs[0].axes.size(), 3u);
  EXPECT_EQ(m.inputs[0].axes[2].name, "d");
  EXPECT_EQ(m.inputs[1].axes.size(), 2u);
  EXPECT_EQ(tree(m.body), "((((x - m) ** 2) * w) + c)");
  const Binary& add = binary(m.body);
  EXPECT_EQ(add.op, BinaryOp::add);
  EXPECT_EQ(name(*add.rhs), "c");
}

TEST(MapParser, ScalarInputsAndWhitespace) {
  const MapExpr m = parse_map("  s[ ] ,\n x[ b  f ]->\n s*x  ");
  ASSERT_EQ(m.inputs.size(), 2u);
  EXPECT_TRUE(m.inputs[0].axes.empty());
  EXPECT_EQ(m.inputs[1].axes.size(), 2u);
  EXPECT_EQ(tree(m.body), "(s * x)");
}

TEST(MapParser, PythonPrecedenceAndAssociativity) {
  EXPECT_EQ(tree_of("a + b * c"), "(a + (b * c))");
  EXPECT_EQ(tree_of("a - b - c"), "((a - b) - c)");
  EXPECT_EQ(tree_of("a / b / c"), "((a / b) / c)");
  EXPECT_EQ(tree_of("a * b / c * d"), "(((a * b) / c) * d)");
  EXPECT_EQ(tree_of("a ** b ** c"), "(a ** (b ** c))");  // right-associative
  EXPECT_EQ(tree_of("-x**2"), "(-(x ** 2))");            // ** binds tighter on its left
  EXPECT_EQ(tree_of("2**-x"), "(2 ** (-x))");            // a unary operand on its right
  EXPECT_EQ(tree_of("-a * b"), "((-a) * b)");
  EXPECT_EQ(tree_of("- -a"), "(-(-a))");
  EXPECT_EQ(tree_of("a - -b"), "(a - (-b))");
  EXPECT_EQ(tree_of("(-x)**2"), "((-x) ** 2)");
  EXPECT_EQ(tree_of("a + b < c * d"), "((a + b) < (c * d))");
  EXPECT_EQ(tree_of("(a < b) == (c >= d)"), "((a < b) == (c >= d))");
  EXPECT_EQ(tree_of("a<=b"), "(a <= b)");
  EXPECT_EQ(tree_of("a != b"), "(a != b)");
  EXPECT_EQ(tree_of("a > -b"), "(a > (-b))");
}

TEST(MapParser, TheDocumentedExamples) {
  EXPECT_EQ(tree(parse_map("h[b f] -> 0.5 * h * (1 + tanh(0.7978845608 * (h + 0.044715 * "
                           "h**3)))")
                     .body),
            "((0.5 * h) * (1 + tanh((0.7978845608 * (h + (0.044715 * (h ** 3)))))))");
  EXPECT_EQ(tree(parse_map("logits[b v], mx[b] -> exp(logits - mx)").body), "exp((logits - mx))");
  const MapExpr w = parse_map("a[i], b[i], t[i] -> where(a > b, a, b * t)");
  const Call& c = call(w.body);
  EXPECT_EQ(c.name, "where");
  ASSERT_EQ(c.args.size(), 3u);
  EXPECT_EQ(tree(*c.args[0]), "(a > b)");
  EXPECT_EQ(tree(*c.args[2]), "(b * t)");
}

TEST(MapParser, Numbers) {
  EXPECT_EQ(number(parse_map("x[i] -> 2").body), 2.0);
  EXPECT_EQ(number(parse_map("x[i] -> 0.25").body), 0.25);
  EXPECT_EQ(number(parse_map("x[i] -> 1e-5").body), 1e-5);
  EXPECT_EQ(number(parse_map("x[i] -> 2.5E+3").body), 2500.0);
  EXPECT_EQ(number(parse_map("x[i] -> .5").body), 0.5);
  EXPECT_EQ(number(parse_map("x[i] -> 3.").body), 3.0);
  EXPECT_TRUE(std::isinf(number(parse_map("x[i] -> inf").body)));
  EXPECT_EQ(std::get<Number>(parse_map("x[i] -> 1e-5").body.node).text, "1e-5");
  const Expr& neg_inf = parse_map("x[i] -> -inf").body;
  EXPECT_TRUE(std::isinf(number(*unary(neg_inf).operand)));
  // Names that merely start with "inf" or "e" are names.
  EXPECT_EQ(name(parse_map("info[i] -> info").body), "info");
  EXPECT_EQ(tree_of("e * 2"), "(e * 2)");
}

TEST(MapParser, CallsTakeAnyNameAndArity) {
  EXPECT_EQ(tree_of("f()"), "f()");
  EXPECT_EQ(tree_of("max(a, b, c)"), "max(a, b, c)");
  EXPECT_EQ(tree_of("g (a)"), "g(a)");
  EXPECT_EQ(tree_of("sqrt(sqrt(x) + 1) ** 2"), "(sqrt((sqrt(x) + 1)) ** 2)");
  EXPECT_EQ(tree_of("inf(x)"), "inf(x)");  // a call; sema rejects the name
}

TEST(MapParser, RangesCoverTokensAndParentheses) {
  //                          0         1         2
  //                          0123456789012345678901234567
  const MapExpr m = parse_map("x[b d], w[d] -> -(x + w)*f(x)");
  EXPECT_EQ(m.inputs[0].range, (SourceRange{0, 6}));
  EXPECT_EQ(m.inputs[0].name_range, (SourceRange{0, 1}));
  EXPECT_EQ(m.inputs[0].axes[1].range, (SourceRange{4, 5}));
  EXPECT_EQ(m.inputs[1].range, (SourceRange{8, 12}));
  EXPECT_EQ(m.arrow, (SourceRange{13, 15}));
  const Binary& mul = binary(m.body);
  EXPECT_EQ(m.body.range, (SourceRange{16, 29}));
  EXPECT_EQ(mul.op_range, (SourceRange{24, 25}));
  const Unary& neg = unary(*mul.lhs);
  EXPECT_EQ(mul.lhs->range, (SourceRange{16, 24}));
  EXPECT_EQ(neg.op_range, (SourceRange{16, 17}));
  EXPECT_EQ(neg.operand->range, (SourceRange{17, 24}));  // with its parentheses
  EXPECT_EQ(binary(*neg.operand).lhs->range, (SourceRange{18, 19}));
  EXPECT_EQ(mul.rhs->range, (SourceRange{25, 29}));
  EXPECT_EQ(call(*mul.rhs).name_range, (SourceRange{25, 26}));
  EXPECT_EQ(call(*mul.rhs).args[0]->range, (SourceRange{27, 28}));
}

struct SyntaxError {
  const char* text;
  const char* message_part;
  uint32_t column;
  uint32_t width;
};

class MapSyntaxErrors : public ::testing::TestWithParam<SyntaxError> {};

TEST_P(MapSyntaxErrors, PointAtTheOffendingText) {
  const SyntaxError& c = GetParam();
  try {
    parse_map(c.text);
    FAIL() << "parsed: " << c.text;
  } catch (const UserError& e) {
    EXPECT_NE(e.message().find(c.message_part), std::string::npos) << e.what();
    EXPECT_EQ(e.column(), c.column) << e.what();
    EXPECT_EQ(e.range().size(), c.width) << e.what();
  }
}

// One row per message in dsl/map_messages.h (and per distinct way to reach it).
INSTANTIATE_TEST_SUITE_P(
    All, MapSyntaxErrors,
    ::testing::Values(
        // inputs
        SyntaxError{"",
                    "expected an input, written name[axes] (e.g. x[b s d], or s[] for a "
                    "scalar), found the end of the text",
                    1, 0},
        SyntaxError{"-> x", "expected an input, written name[axes]", 1, 1},
        SyntaxError{"x[i], -> x", "expected an input", 7, 1},
        SyntaxError{"x[i], 2[i] -> x", "found '2'", 7, 1},
        SyntaxError{"x[i], y -> x", "input 'y' needs its axes in brackets: y[b s d], or y[]", 7, 1},
        SyntaxError{"logits -> exp(logits)", "input 'logits' needs its axes in brackets", 1, 6},
        SyntaxError{"x[b s -> x", "unbalanced brackets: this '[' is never closed", 2, 1},
        SyntaxError{"x[b s", "this '[' is never closed", 2, 1},
        SyntaxError{"x[b, s] -> x", "expected an axis name or ']', found ','", 4, 1},
        SyntaxError{"x[b (h d)] -> x", "found '('", 5, 1},
        SyntaxError{"x[b 1] -> x", "found '1'", 5, 1},
        SyntaxError{"x[b ...] -> x", "found '...'", 5, 3},
        SyntaxError{"x[i], x[j] -> x", "input 'x' is declared twice", 7, 1},
        SyntaxError{"x[b s b] -> x", "axis 'b' appears twice in input 'x'", 7, 1},
        SyntaxError{"inf[i] -> inf", "an input cannot be named 'inf'", 1, 3},
        SyntaxError{"x[i]", "needs '->' and an expression after its inputs", 5, 0},
        SyntaxError{"x[i] y[i] -> x + y",
                    "expected ',' before another input, or '->' before the expression, found 'y'",
                    6, 1},
        SyntaxError{"x[i] = x", "found '='", 6, 1},
        // operands
        SyntaxError{"x[i] ->", "the expression after '->' is empty", 6, 2},
        SyntaxError{"x[i] ->   ", "the expression after '->' is empty", 6, 2},
        SyntaxError{"x[i] -> x +",
                    "expected an operand (a number, an input name, a call f(...) "
                    "or '('), found the end of the text",
                    12, 0},
        SyntaxError{"x[i] -> x * * 2", "expected an operand", 13, 1},
        SyntaxError{"x[i] -> x ** ", "found the end of the text", 14, 0},
        SyntaxError{"x[i] -> x *** 2", "expected an operand", 13, 1},
        SyntaxError{"x[i] -> -", "expected an operand", 10, 0},
        SyntaxError{"x[i] -> ()", "expected an operand", 10, 1},
        SyntaxError{"x[i] -> f(x,)", "expected an operand", 13, 1},
        SyntaxError{"x[i] -> f(, x)", "found ','", 11, 1},
        SyntaxError{"x[i] -> x < ", "expected an operand", 13, 0},
        SyntaxError{"x[i] -> )", "found ')'", 9, 1}, SyntaxError{"x[i] -> $x", "found '$'", 9, 1},
        SyntaxError{"x[i] -> +x", "found '+'", 9, 1},
        // numbers
        SyntaxError{"x[i] -> 2x", "'2x' is not a number", 9, 2},
        SyntaxError{"x[i] -> x * 1.5.2", "'1.5.2' is not a number", 13, 5},
        SyntaxError{"x[i] -> 1e", "'1e' is not a number", 9, 2},
        SyntaxError{"x[i] -> 1e+ * x", "'1e+' is not a number", 9, 3},
        SyntaxError{"x[i] -> 1e5x", "'1e5x' is not a number", 9, 4},
        SyntaxError{"x[i] -> x + 1e999", "the number 1e999 is out of the range of a 64-bit float",
                    13, 5},
        // parentheses and what follows a complete operand
        SyntaxError{"x[i] -> (x + 1", "unbalanced parentheses: this '(' is never closed", 9, 1},
        SyntaxError{"x[i] -> ((x) + 1", "this '(' is never closed", 9, 1},
        SyntaxError{"x[i] -> (x * (x + 1)", "this '(' is never closed", 9, 1},
        SyntaxError{"x[i] -> exp(x", "this '(' is never closed", 12, 1},
        SyntaxError{"x[i] -> f(g(x), x", "this '(' is never closed", 10, 1},
        SyntaxError{"x[i] -> x + 1)", "unbalanced parentheses: ')' without a matching '('", 14, 1},
        SyntaxError{"x[i] -> (x y)",
                    "expected an operator before 'y': two operands cannot stand side by side", 12,
                    1},
        SyntaxError{"x[i] -> x 2", "expected an operator before '2'", 11, 1},
        SyntaxError{"x[i] -> f(x y)", "expected an operator before 'y'", 13, 1},
        SyntaxError{"x[i] -> 2 (x)", "expected an operator before '('", 11, 1},
        SyntaxError{"x[i] -> x -> y", "a map expression has one '->'", 11, 2},
        SyntaxError{"x[i] -> x - > y", "expected an operand", 13, 1},
        SyntaxError{"x[i] -> x, x", "commas separate inputs and call arguments only", 10, 1},
        SyntaxError{"x[i] -> (x, x)", "commas separate inputs and call arguments only", 11, 1},
        SyntaxError{"x[i] -> x ^ 2", "'^' is not an operator here; write '**'", 11, 1},
        SyntaxError{"x[i] -> x // 2", "'//' (floor division)", 11, 2},
        SyntaxError{"x[i] -> x = 2", "'=' is not a comparison; write '=='", 11, 1},
        SyntaxError{"x[i] -> x[0]", "there is no indexing", 10, 1},
        SyntaxError{"x[i] -> x ! 2", "unexpected '!' in a map expression", 11, 1},
        SyntaxError{"x[i] -> x \xC3\xA9", "unexpected '\xC3\xA9'", 11, 2},
        // comparisons
        SyntaxError{"a[i], b[i], c[i] -> a < b < c",
                    "comparisons do not chain (as Python's a < b < c would): found a second '<'; "
                    "parenthesize the comparison meant first",
                    27, 1},
        SyntaxError{"a[i], b[i] -> a == b != a", "found a second '!='", 22, 2},
        SyntaxError{"a[i], b[i] -> f(a<=b>=a)", "found a second '>='", 21, 2}));

TEST(MapParser, DuplicateErrorsNoteTheFirstOccurrence) {
  try {
    parse_map("x[b s b] -> x");
    FAIL();
  } catch (const UserError& e) {
    ASSERT_EQ(e.notes().size(), 1u);
    EXPECT_EQ(e.notes()[0].text, "'b' first appears here");
    EXPECT_EQ(e.notes()[0].range, (SourceRange{2, 3}));
  }
  try {
    parse_map("x[i], y[i], x[j] -> x");
    FAIL();
  } catch (const UserError& e) {
    ASSERT_EQ(e.notes().size(), 1u);
    EXPECT_EQ(e.notes()[0].range, (SourceRange{0, 1}));
  }
}

TEST(MapParser, ErrorsRenderWithTheSourceLine) {
  try {
    parse_map(make_source("model.ein", "x[i] -> (x + 1"));
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()),
              "model.ein:1:9: error: unbalanced parentheses: this '(' is never closed\n"
              " x[i] -> (x + 1\n"
              "         ^");
  }
}

// Canonical text, and parse(print(m)) == m.
TEST(MapPrinter, PrintsCanonicalText) {
  EXPECT_EQ(print(parse_map("x[ b s d ],m[b s]->((x-m)) ** 2*(w)+c")),
            "x[b s d], m[b s] -> (x - m)**2 * w + c");
  EXPECT_EQ(print(parse_map("s[] -> s")), "s[] -> s");
  EXPECT_EQ(print(parse_map("x[i] -> -(x ** 2)")), "x[i] -> -x**2");
  EXPECT_EQ(print(parse_map("x[i] -> (-x) ** 2")), "x[i] -> (-x)**2");
  EXPECT_EQ(print(parse_map("x[i] -> (x ** 2) ** 3")), "x[i] -> (x**2)**3");
  EXPECT_EQ(print(parse_map("x[i] -> x ** (2 ** 3)")), "x[i] -> x**2**3");
  EXPECT_EQ(print(parse_map("x[i] -> 2 ** (-x)")), "x[i] -> 2**-x");
  EXPECT_EQ(print(parse_map("x[i] -> a - (b - c) + (d + e)")), "x[i] -> a - (b - c) + (d + e)");
  EXPECT_EQ(print(parse_map("x[i] -> a / (b * c) * (d / e)")), "x[i] -> a / (b * c) * (d / e)");
  EXPECT_EQ(print(parse_map("x[i] -> ((a + b) + c) * ((d * e) * f)")),
            "x[i] -> (a + b + c) * (d * e * f)");
  EXPECT_EQ(print(parse_map("x[i] -> -(a * b) * -c")), "x[i] -> -(a * b) * -c");
  EXPECT_EQ(print(parse_map("x[i] -> (a < b) == (c + 1 >= d)")), "x[i] -> (a < b) == (c + 1 >= d)");
  EXPECT_EQ(print(parse_map("x[i] -> where( a>b ,a,b )")), "x[i] -> where(a > b, a, b)");
  EXPECT_EQ(print(parse_map("x[i] -> 1E-5 + .5 + 3. + inf")), "x[i] -> 1E-5 + .5 + 3. + inf");
}

void expect_round_trip(const std::string& text) {
  const MapExpr first = parse_map(text);
  const std::string printed = print(first);
  const MapExpr second = parse_map(printed);
  EXPECT_TRUE(same_structure(first, second)) << "'" << text << "' printed as '" << printed << "'";
  EXPECT_EQ(print(second), printed) << "printing is not idempotent for '" << text << "'";
}

TEST(MapPrinter, RoundTrips) {
  for (const char* text : {
           "x[b s d], m[b s], w[d], c[d] -> (x - m)**2 * w + c",
           "h[b f] -> 0.5 * h * (1 + tanh(0.7978845608 * (h + 0.044715 * h**3)))",
           "logits[b v], mx[b] -> exp(logits - mx)",
           "a[i], b[i], t[i] -> where(a > b, a, b * t)",
           "x[i] -> -x**-y**-z",
           "x[i] -> ((a - b) - (c - d)) / ((e / f) / (g * h))",
           "x[i] -> (a < b) != (c > d)",
           "x[i] -> -(-(-x))",
           "x[i] -> (-1)**x - -1**x",
           "x[i] -> f(g(), h(x, (y)), -inf, 1e+10)",
           "s[] -> s",
       })
    expect_round_trip(text);
}

TEST(MapAst, SameStructureSeesDifferences) {
  EXPECT_TRUE(same_structure(parse_map("x[i] -> x + 1"), parse_map("x[ i ]->(x)+1.0")));
  EXPECT_FALSE(same_structure(parse_map("x[i] -> x + 1"), parse_map("x[i] -> x - 1")));
  EXPECT_FALSE(same_structure(parse_map("x[i] -> x + 1"), parse_map("x[j] -> x + 1")));
  EXPECT_FALSE(same_structure(parse_map("x[i] -> f(x)"), parse_map("x[i] -> f(x, x)")));
  EXPECT_FALSE(same_structure(parse_map("x[i] -> -x"), parse_map("x[i] -> x")));
}

// ---- depth limits (dsl/limits.h): deep nests and long chains are refused, not a stack overflow

// "x[n] -> " and `body`; the error parse_map raises, or a failure.
UserError map_error(const std::string& body) {
  try {
    parse_map("x[n] -> " + body);
  } catch (const UserError& e) {
    return e;
  }
  ADD_FAILURE() << "parsed without an error";
  return UserError("");
}

TEST(MapParserLimits, DeepParenthesesAndCallsAreRefusedAtTheHundredthLevel) {
  const std::string nest = "the map expression nests deeper than 100 levels (parentheses, calls, "
                           "prefix '-' and '**' chains)";
  UserError e = map_error(std::string(7000, '(') + "x" + std::string(7000, ')'));
  EXPECT_EQ(e.message(), nest);
  EXPECT_EQ(e.column(), 9u + 100u);  // the 101st '('
  std::string calls;
  for (int i = 0; i < 7000; ++i)
    calls += "exp(";
  e = map_error(calls + "x" + std::string(7000, ')'));
  EXPECT_EQ(e.message(), nest);
  EXPECT_EQ(e.column(), 9u + 4u * 100u + 3u);  // the '(' of the 101st call
  e = map_error(std::string(20000, '-') + "x");
  EXPECT_EQ(e.message(), nest);
  // 99 levels parse.
  EXPECT_NO_THROW(parse_map("x[n] -> " + std::string(99, '(') + "x" + std::string(99, ')')));
}

TEST(MapParserLimits, LongChainsAreRefusedAtTheOperatorPastTheLimit) {
  std::string body = "x";
  for (int i = 1; i < 20000; ++i)
    body += " + x";
  const UserError e = map_error(body);
  EXPECT_EQ(e.message(),
            "the map expression nests deeper than 1000 levels (each operator of a chain such as "
            "a + b + c and each call adds one): split it into several maps");
  EXPECT_EQ(e.column(), 9u + 2u + 4u * 999u);  // the 1000th '+'
  EXPECT_EQ(e.range().size(), 1u);
  // 1000 operands make a tree exactly 1000 tall: accepted.
  EXPECT_NO_THROW(parse_map("x[n] -> " + body.substr(0, 4 * 999 + 1)));
}

}  // namespace
}  // namespace ein
