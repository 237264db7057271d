// parse_script: the language tour round-trips into the expected AST, every known mistake
// gets its message and caret, type ranges point into the script, and mangled scripts either
// parse or throw UserError (never crash or hang).
#include <gtest/gtest.h>

#include <random>
#include <sstream>
#include <string>

#include <ein/diagnostic.h>
#include "dsl/limits.h"
#include "dsl/script_parser.h"

namespace ein::script {
namespace {

constexpr const char* kTour = R"(# comment to end of line
import nn
import "lib/blocks.ein"
dim D = 64
dim Dh = D / H
let lr = 0.01

module Linear(in, out, bias = true) {
  param weight: f32[in out] = normal(std = 1 / sqrt(in))
  param b: f32[out]
  scale = 2.0
  layers = [Linear(D, D) for _ in 0..L]
  fn forward(x: f32[*b in]) -> f32[*b out] = x @ weight
  fn other(x: f32[B D], eps = 1e-5) -> f32[B] {
    y = x * 2; z = y + 1
    a, b = split(y)
    y += z
    for layer in layers { x = layer(x) }
    for i in 0..L {
      x = blocks[i](x)
    }
    print(x)
    return rearrange(x, "b 1 -> b")
  }
}
optimizer AdamW(lr = 1e-3, betas = 0.9, eps = 1e-8) {
  state m, v
  fn update(p, g, t) { m = 0.9 * m + 0.1 * g; return p - lr * m }
}
fn gelu2(x) = x * sigmoid(1.702 * x)
train {
  model = Linear(D, 1)
  steps = 100
  fn loss(x: f32[B D], y: f32[B]) -> f32[] = mean((model(x) - y) ** 2)
}
)";

Script parse(const std::string& text) {
  return parse_script(make_source("model.ein", text));
}

std::string slice(const Script& s, SourceRange r) {
  return std::string(s.source->slice(r));
}

// The parenthesised structure of an expression, for precedence checks.
std::string show(const ExprPtr& e) {
  switch (e->kind) {
    case ExprKind::number: {
      std::ostringstream os;
      os << e->value << (e->is_integer ? "i" : "f");
      return os.str();
    }
    case ExprKind::name:
      return e->text;
    case ExprKind::string:
      return "\"" + e->text + "\"";
    case ExprKind::unary:
      return "(" + e->text + show(e->items[0]) + ")";
    case ExprKind::binary:
    case ExprKind::range:
      return "(" + show(e->items[0]) + " " + e->text + " " + show(e->items[1]) + ")";
    case ExprKind::tuple:
    case ExprKind::list: {
      std::string s = e->kind == ExprKind::tuple ? "tuple(" : "[";
      for (const ExprPtr& i : e->items)
        s += show(i) + ",";
      return s + (e->kind == ExprKind::tuple ? ")" : "]");
    }
    case ExprKind::comprehension:
      return "[" + show(e->items[0]) + " for " + e->text + " in " + show(e->items[1]) + "]";
    case ExprKind::call: {
      std::string s = show(e->items[0]) + "(";
      for (const Arg& a : e->args)
        s += (a.name.empty() ? "" : a.name + "=") + show(a.value) + ",";
      return s + ")";
    }
    case ExprKind::index: {
      std::string s = show(e->items[0]) + "[";
      for (const IndexItem& i : e->indices) {
        if (i.kind == IndexItem::Kind::ellipsis) s += "...";
        if (i.kind == IndexItem::Kind::single) s += show(i.value);
        if (i.kind == IndexItem::Kind::slice)
          s += (i.start ? show(i.start) : "") + ":" + (i.stop ? show(i.stop) : "") +
               (i.step ? ":" + show(i.step) : "");
        s += ",";
      }
      return s + "]";
    }
    case ExprKind::attribute:
      return show(e->items[0]) + "." + e->text;
  }
  return "?";
}

// The expression of `let v = <text>`.
std::string expr(const std::string& text) {
  const Script s = parse("let v = " + text + "\n");
  return show(s.decls.at(0).value);
}

TEST(ScriptParser, TourDeclarations) {
  const Script s = parse(kTour);
  ASSERT_EQ(s.decls.size(), 9u);
  EXPECT_EQ(s.decls[0].kind, Decl::Kind::import_);
  EXPECT_EQ(s.decls[0].name, "nn");
  EXPECT_FALSE(s.decls[0].is_path);
  EXPECT_EQ(s.decls[1].name, "lib/blocks.ein");
  EXPECT_TRUE(s.decls[1].is_path);
  EXPECT_EQ(s.decls[2].kind, Decl::Kind::dim);
  EXPECT_EQ(show(s.decls[2].value), "64i");
  EXPECT_EQ(show(s.decls[3].value), "(D / H)");
  EXPECT_EQ(s.decls[4].kind, Decl::Kind::let);
  EXPECT_EQ(show(s.decls[4].value), "0.01f");
  EXPECT_EQ(slice(s, s.decls[4].range), "let lr = 0.01");

  const Decl& lin = s.decls[5];
  EXPECT_EQ(lin.kind, Decl::Kind::module);
  EXPECT_EQ(slice(s, lin.name_range), "Linear");
  ASSERT_EQ(lin.params.size(), 3u);
  EXPECT_EQ(lin.params[0].name, "in");
  EXPECT_EQ(lin.params[2].name, "bias");
  EXPECT_EQ(show(lin.params[2].default_value), "true");
  EXPECT_EQ(slice(s, lin.params[2].range), "bias = true");
  ASSERT_EQ(lin.children.size(), 6u);
  const Decl& w = lin.children[0];
  EXPECT_EQ(w.kind, Decl::Kind::param);
  EXPECT_EQ(w.name, "weight");
  ASSERT_TRUE(w.type);
  EXPECT_EQ(w.type->dims.size(), 2u);
  EXPECT_EQ(show(w.value), "normal(std=(1i / sqrt(in,)),)");
  EXPECT_EQ(lin.children[1].kind, Decl::Kind::param);
  EXPECT_EQ(lin.children[1].value, nullptr);
  EXPECT_EQ(lin.children[2].kind, Decl::Kind::member);
  EXPECT_EQ(show(lin.children[3].value), "[Linear(D,D,) for _ in (0i .. L)]");
  const Decl& fwd = lin.children[4];
  EXPECT_EQ(fwd.kind, Decl::Kind::function);
  ASSERT_EQ(fwd.body.size(), 1u);
  EXPECT_EQ(fwd.body[0].kind, Stmt::Kind::return_);
  EXPECT_EQ(show(fwd.body[0].value), "(x @ weight)");
  ASSERT_TRUE(fwd.type);
  EXPECT_EQ(slice(s, fwd.type->range), "f32[*b out]");

  const Decl& adam = s.decls[6];
  EXPECT_EQ(adam.kind, Decl::Kind::optimizer);
  ASSERT_EQ(adam.children.size(), 3u);
  EXPECT_EQ(adam.children[0].kind, Decl::Kind::state);
  EXPECT_EQ(adam.children[1].name, "v");
  EXPECT_EQ(slice(s, adam.children[1].name_range), "v");
  const Decl& upd = adam.children[2];
  ASSERT_EQ(upd.body.size(), 2u);
  EXPECT_EQ(show(upd.body[0].value), "((0.9f * m) + (0.1f * g))");
  EXPECT_EQ(show(upd.body[1].value), "(p - (lr * m))");

  EXPECT_EQ(s.decls[7].kind, Decl::Kind::function);
  EXPECT_EQ(s.decls[7].name, "gelu2");
  const Decl& train = s.decls[8];
  EXPECT_EQ(train.kind, Decl::Kind::train);
  EXPECT_EQ(train.name, "");
  EXPECT_EQ(slice(s, train.name_range), "train");
  ASSERT_EQ(train.children.size(), 3u);
  EXPECT_EQ(show(train.children[2].body[0].value), "mean(((model(x,) - y) ** 2i),)");
  EXPECT_EQ(slice(s, train.children[2].type->range), "f32[]");
}

TEST(ScriptParser, TourStatements) {
  const Script s = parse(kTour);
  const Decl& other = s.decls[5].children[5];
  ASSERT_EQ(other.params.size(), 2u);
  EXPECT_EQ(show(other.params[1].default_value), "1e-05f");
  const std::vector<Stmt>& body = other.body;
  ASSERT_EQ(body.size(), 8u);
  EXPECT_EQ(body[0].kind, Stmt::Kind::assign);
  EXPECT_EQ(body[0].targets, std::vector<std::string>{"y"});
  EXPECT_EQ(slice(s, body[0].range), "y = x * 2");
  EXPECT_EQ(body[1].targets, std::vector<std::string>{"z"});
  EXPECT_EQ((body[2].targets), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(slice(s, body[2].target_ranges[1]), "b");
  EXPECT_EQ(body[3].kind, Stmt::Kind::aug_assign);
  EXPECT_EQ(body[3].op, "+");
  EXPECT_EQ(body[4].kind, Stmt::Kind::for_loop);
  EXPECT_EQ(body[4].targets, std::vector<std::string>{"layer"});
  ASSERT_EQ(body[4].body.size(), 1u);
  EXPECT_EQ(show(body[4].body[0].value), "layer(x,)");
  EXPECT_EQ(show(body[5].value), "(0i .. L)");
  ASSERT_EQ(body[5].body.size(), 1u);
  EXPECT_EQ(show(body[5].body[0].value), "blocks[i,](x,)");
  EXPECT_EQ(body[6].kind, Stmt::Kind::expr);
  EXPECT_EQ(body[7].kind, Stmt::Kind::return_);
  EXPECT_EQ(show(body[7].value), "rearrange(x,\"b 1 -> b\",)");
  EXPECT_EQ(slice(s, body[7].value->args[1].value->range), "\"b 1 -> b\"");
}

TEST(ScriptParser, Precedence) {
  EXPECT_EQ(expr("-x**2"), "(-(x ** 2i))");
  EXPECT_EQ(expr("2**-1"), "(2i ** (-1i))");
  EXPECT_EQ(expr("a**b**c"), "(a ** (b ** c))");
  EXPECT_EQ(expr("a + b * c - d"), "((a + (b * c)) - d)");
  EXPECT_EQ(expr("a // b % c @ d"), "(((a // b) % c) @ d)");
  EXPECT_EQ(expr("a + 1 <= b * 2"), "((a + 1i) <= (b * 2i))");
  EXPECT_EQ(expr("0 .. n - 1"), "(0i .. (n - 1i))");
  EXPECT_EQ(expr("(a + b) * c"), "((a + b) * c)");
  EXPECT_EQ(expr("(a, b)"), "tuple(a,b,)");
  EXPECT_EQ(expr("(a,)"), "tuple(a,)");
  EXPECT_EQ(expr("[]"), "[]");
  EXPECT_EQ(expr("[1, 2.5,]"), "[1i,2.5f,]");
  EXPECT_EQ(expr("m.w.T"), "m.w.T");
  EXPECT_EQ(expr("x[a:b, :, ..., -1]"), "x[a:b,:,...,(-1i),]");
  EXPECT_EQ(expr("x[:n, n:]"), "x[:n,n:,]");
  // Slice steps: every spelling of Python's start:stop:step; a trailing ':' has no step.
  EXPECT_EQ(expr("x[::2]"), "x[::2i,]");
  EXPECT_EQ(expr("x[1::k]"), "x[1i::k,]");
  EXPECT_EQ(expr("x[:n:2, a:b:c]"), "x[:n:2i,a:b:c,]");
  EXPECT_EQ(expr("x[ a : b : c ]"), "x[a:b:c,]");
  EXPECT_EQ(expr("x[a:b:]"), "x[a:b,]");
  EXPECT_EQ(expr("x[::]"), "x[:,]");
  EXPECT_EQ(expr("x[::2, ..., 1:]"), "x[::2i,...,1i:,]");
  EXPECT_EQ(expr("f(a, k = 2,)"), "f(a,k=2i,)");
  EXPECT_EQ(expr(".5 + 3. + 1e-4"), "((0.5f + 3f) + 0.0001f)");
  EXPECT_EQ(expr("\"a\\\"b\\n\""), "\"a\"b\n\"");
  EXPECT_EQ(expr("-inf"), "(-inf)");
  const Script s = parse("let v = f(a)[0].b ** 2\n");
  const ExprPtr& e = s.decls[0].value;
  EXPECT_EQ(slice(s, e->range), "f(a)[0].b ** 2");
  EXPECT_EQ(slice(s, e->items[0]->range), "f(a)[0].b");
  EXPECT_EQ(slice(s, e->items[0]->items[0]->range), "f(a)[0]");
  const Script p = parse("let v = (a + b) * c\n");
  EXPECT_EQ(slice(p, p.decls[0].value->items[0]->range), "(a + b)");
  EXPECT_EQ(p.decls[0].value->text, "*");
}

TEST(ScriptParser, Numbers) {
  const Script s = parse("let a = 3\nlet b = 1e-4\n");
  EXPECT_TRUE(s.decls[0].value->is_integer);
  EXPECT_DOUBLE_EQ(s.decls[0].value->value, 3);
  EXPECT_FALSE(s.decls[1].value->is_integer);
  EXPECT_DOUBLE_EQ(s.decls[1].value->value, 1e-4);
}

TEST(ScriptParser, NewlineRule) {
  // A line ending in an operator, '(' or ',' continues; a line starting with one does not.
  const Script s = parse(
      "fn f(x,\n     y) {\n  a = x +\n      y\n  b = x\n  -y\n  c = g\n  (x)\n"
      "  d = [1,\n  2]\n  e = (x\n   + y)\n  return a,\n    b\n}\n");
  const std::vector<Stmt>& body = s.decls[0].body;
  ASSERT_EQ(body.size(), 8u);
  EXPECT_EQ(show(body[0].value), "(x + y)");
  EXPECT_EQ(show(body[1].value), "x");
  EXPECT_EQ(body[2].kind, Stmt::Kind::expr);
  EXPECT_EQ(show(body[2].value), "(-y)");
  EXPECT_EQ(show(body[3].value), "g");
  EXPECT_EQ(show(body[4].value), "x");
  EXPECT_EQ(show(body[5].value), "[1i,2i,]");
  EXPECT_EQ(show(body[6].value), "(x + y)");  // inside brackets newlines are whitespace
  EXPECT_EQ(show(body[7].value), "tuple(a,b,)");
  const Script bare = parse("fn f() { return }\nfn g() {\n  return # done\n}\n");
  EXPECT_EQ(bare.decls[0].body[0].value, nullptr);
  EXPECT_EQ(bare.decls[1].body[0].value, nullptr);
}

TEST(ScriptParser, TypesAreRelocatedIntoTheScript) {
  const Script s = parse("fn f(x: f32[*b h d], n) -> i64[b 3] = x\n");
  const Param& x = s.decls[0].params[0];
  ASSERT_TRUE(x.type);
  EXPECT_EQ(x.type->source, s.source);
  EXPECT_EQ(slice(s, x.type->range), "f32[*b h d]");
  EXPECT_EQ(slice(s, x.type->dtype->range), "f32");
  ASSERT_EQ(x.type->dims.size(), 3u);
  EXPECT_EQ(slice(s, x.type->dims[0].range), "*b");
  EXPECT_EQ(slice(s, x.type->dims[1].range), "h");
  EXPECT_EQ(slice(s, x.type->dims_range), "*b h d");
  EXPECT_EQ(slice(s, s.decls[0].type->dims[1].range), "3");
  const Script sym = parse("fn f(x: f32[n-1]) = x\n");
  const Dim& d = sym.decls[0].params[0].type->dims[0];
  if (d.kind == DimKind::symbolic) {
    EXPECT_EQ(slice(sym, d.range), "n-1");
    EXPECT_EQ(slice(sym, d.expr.args[1].range), "1");
  }
}

TEST(ScriptParser, TypeErrorsPointIntoTheScript) {
  try {
    parse("fn f(x: f32[a, b]) = x\n");
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_EQ(e.source()->name(), "model.ein");
    EXPECT_GE(e.range().begin, 8u);
    EXPECT_LE(e.range().end, 17u);
    EXPECT_NE(std::string(e.what()).find("model.ein:1:"), std::string::npos) << e.what();
  }
}

struct BadCase {
  const char* text;
  const char* message;  // a substring of the message
  uint32_t line, column;
};

class ScriptParserErrors : public testing::TestWithParam<BadCase> {};

TEST_P(ScriptParserErrors, MessageAndCaret) {
  const BadCase& c = GetParam();
  try {
    parse(c.text);
    FAIL() << "no error for: " << c.text;
  } catch (const UserError& e) {
    EXPECT_NE(e.message().find(c.message), std::string::npos) << e.what();
    const LineCol lc = e.source()->locate(e.range().begin);
    EXPECT_EQ(lc.line, c.line) << e.what();
    EXPECT_EQ(lc.column, c.column) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(
    ScriptParser, ScriptParserErrors,
    testing::Values(
        BadCase{"module Linear(in, out) {\n  param w: f32[in out]\n  fn f(x) = x\n",
                "expected '}' to close the module 'Linear' (opened at 1:24)", 4, 1},
        BadCase{"let x = a +\n", "expected an expression after '+', found the end", 2, 1},
        // `let` is a name outside declarations, so the expression runs on to `a + let`.
        BadCase{"let x = a +\n\nlet y = 2\n", "expected a newline or ';' before 'y'", 3, 5},
        BadCase{"let x = a + )\n", "expected an expression after '+', found ')'", 1, 13},
        BadCase{"let s = \"abc\n", "unterminated string", 1, 9},
        BadCase{"let x = f(k = 1, 2)\n", "keyword arguments must follow positional ones", 1, 18},
        BadCase{"let x = a < b < c\n", "comparisons do not chain", 1, 15},
        BadCase{"let x = 0..1..2\n", "ranges do not chain", 1, 13},
        BadCase{"fn f(x) {\n  param w: f32[D]\n}\n", "expected a newline or ';' before 'w'", 2,
                9},
        BadCase{"module M {\n  state m\n}\n", "'state' is only allowed inside an optimizer", 2,
                3},
        BadCase{"module M {\n  return 1\n}\n", "'return' is only allowed inside a function body",
                2, 3},
        BadCase{"module M {\n  1 + 2\n}\n", "a module body holds param", 2, 3},
        BadCase{"param w: f32[D]\n", "'param' is only allowed inside a module", 1, 1},
        BadCase{"x = 1\n", "a top-level value needs 'let' or 'dim'", 1, 1},
        BadCase{"let x = a $ b\n", "unexpected character '$'", 1, 11},
        BadCase{"let fn = 1\n", "'fn' is a keyword and cannot be used as a name", 1, 5},
        BadCase{"let x = f(a b)\n", "expected ',' or ')' to close the '(' opened at 1:10", 1,
                13},
        BadCase{"let x = [1, 2\n", "expected ',' or ']' to close the '[' opened at 1:9", 2, 1},
        BadCase{"let x = 2x\n", "'2x' is not a number", 1, 9},
        BadCase{"let x = a b\n", "expected a newline or ';' before 'b'", 1, 11},
        BadCase{"fn f(x) {\n  x.a = 1\n}\n", "only names can be assigned to", 2, 7},
        BadCase{"fn f(x) -> f32 = x\n", "a type is written dtype[dims]", 1, 15},
        BadCase{"fn f(x: f32[B D) = x\n", "this '[' of a type is never closed", 1, 12},
        BadCase{"fn f(x) x\n", "after the signature of function 'f'", 1, 9},
        BadCase{"fn f(x) {\n  for i of xs { }\n}\n", "expected 'in' after the loop variable 'i'",
                2, 9},
        BadCase{"let s = \"a\\q\"\n", "unknown escape '\\q'", 1, 11},
        BadCase{"dim D 64\n", "expected '=' and a value after 'dim D'", 1, 7},
        BadCase{"train {\n  param w: f32[D]\n}\n", "'param' is only allowed inside a module", 2,
                3},
        BadCase{"let x = y[]\n", "expected an index", 1, 11},
        BadCase{"let x = m.\n", "expected a name after '.'", 1, 11},
        BadCase{"fn f(x) {\n  fn g(y) = y\n}\n", "functions cannot be nested", 2, 3},
        BadCase{"let x = (((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((("
                "((((((((((((((((((((((((((((((((((((((((((((((((((1",
                "nests deeper than", 1, 110}));

TEST(ScriptParser, ParsesMangledScriptsOrThrowsUserError) {
  const std::string tour = kTour;
  std::mt19937 rng(1234);
  const std::string alphabet = "(){}[],.:;=+-*/\"#\n abx01_@<>\\\x80";
  int parsed = 0;
  for (int i = 0; i < 2000; ++i) {
    std::string text = tour;
    if (i % 3 == 0) {
      text.resize(rng() % text.size());
    } else {
      const int edits = 1 + static_cast<int>(rng() % 3);
      for (int k = 0; k < edits; ++k) {
        const size_t at = rng() % text.size();
        switch (rng() % 3) {
          case 0: text[at] = alphabet[rng() % alphabet.size()]; break;
          case 1: text.erase(at, 1 + rng() % 4); break;
          default: text.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
        }
      }
    }
    try {
      parse(text);
      ++parsed;
    } catch (const UserError& e) {
      EXPECT_LE(e.range().end, text.size()) << e.what();
      EXPECT_FALSE(e.message().empty());
    }
  }
  EXPECT_GT(parsed, 0);
}

TEST(ScriptParser, DeepNestingIsAnErrorNotACrash) {
  for (const char* unit : {"(", "[", "-", "f(", "a**"}) {
    std::string text = "let x = ";
    for (int i = 0; i < 5000; ++i)
      text += unit;
    EXPECT_THROW(parse(text + "1\n"), UserError) << unit;
  }
}

}  // namespace
}  // namespace ein::script

// ---- depth limits (dsl/limits.h): a long chain or call nest is refused, not a stack overflow

namespace {

// "a OP a OP ... a" with `n` operands.
std::string chain(const std::string& a, const std::string& op, int n) {
  std::string s = a;
  for (int i = 1; i < n; ++i)
    s += " " + op + " " + a;
  return s;
}

// The error parse_script raises for `text`, or a failure.
ein::UserError script_error(const std::string& text) {
  try {
    ein::script::parse_script(ein::make_source("deep.ein", text));
  } catch (const ein::UserError& e) {
    return e;
  }
  ADD_FAILURE() << "parsed without an error";
  return ein::UserError("");
}

}  // namespace

TEST(ScriptParserLimits, ChainAtTheLimitParses) {
  // 1000 operands: 999 operators, a tree 1000 tall.
  const auto script = ein::script::parse_script(
      ein::make_source("ok.ein", "let c = " + chain("1", "+", ein::limits::kMaxExprDepth) + "\n"));
  ASSERT_EQ(script.decls.size(), 1u);
}

TEST(ScriptParserLimits, LongChainIsRefusedAtTheOperatorPastTheLimit) {
  const std::string text = "let c = " + chain("1", "+", 3600) + "\n";
  const ein::UserError e = script_error(text);
  EXPECT_EQ(e.message(),
            "the expression nests deeper than 1000 levels (each operator of a chain such as "
            "a + b + c, each call and each subscript adds one): split it with intermediate names");
  // The 1000th '+': "let c = " is 8 columns, each "1 + " 4 more.
  EXPECT_EQ(e.column(), 8u + 4u * 999u + 3u);
  EXPECT_EQ(e.range().size(), 1u);
}

TEST(ScriptParserLimits, EveryChainKindCounts) {
  const std::string msg = "the expression nests deeper than 1000 levels";
  EXPECT_NE(script_error("let c = " + chain("x", "*", 2000) + "\n").message().find(msg),
            std::string::npos);
  EXPECT_NE(script_error("let c = " + chain("x", "-", 2000) + "\n").message().find(msg),
            std::string::npos);
  std::string calls = "let c = f";
  for (int i = 0; i < 2000; ++i)
    calls += "(1)";
  EXPECT_NE(script_error(calls + "\n").message().find(msg), std::string::npos);
  std::string subscripts = "let c = x";
  for (int i = 0; i < 2000; ++i)
    subscripts += "[0]";
  EXPECT_NE(script_error(subscripts + "\n").message().find(msg), std::string::npos);
  std::string attributes = "let c = x";
  for (int i = 0; i < 2000; ++i)
    attributes += ".a";
  EXPECT_NE(script_error(attributes + "\n").message().find(msg), std::string::npos);
  // A chain inside the arguments of a call counts towards the call's height.
  EXPECT_NE(script_error("let c = f(g(" + chain("1", "+", 1000) + "))\n").message().find(msg),
            std::string::npos);
  // A tall subscript index too.
  EXPECT_NE(script_error("let c = x[" + chain("1", "+", 1000) + "]\n").message().find(msg),
            std::string::npos);
}

TEST(ScriptParserLimits, DeepBracketsKeepTheNestingBound) {
  const ein::UserError e = script_error("let c = " + std::string(7000, '(') + "1" +
                                        std::string(7000, ')') + "\n");
  EXPECT_EQ(e.message(), "the script nests deeper than 100 levels (brackets, operators, loops)");
  EXPECT_EQ(e.column(), 110u);  // as the existing row: the '(' past 101 open ones
}
