// Tests of the shape-spec parser and printer: every construct with its AST and ranges, every
// error message with its caret column, parse -> print -> parse round trips, and the PEGTL
// grammar analysis. Checking specs against shapes is tested in compiler/shape_check_test.
#include <gtest/gtest.h>
#include <tao/pegtl/contrib/analyze.hpp>

#include <string>
#include <vector>

#include <ein/diagnostic.h>
#include "dsl/shape_spec_grammar.h"
#include <ein/shape_spec_parser.h>
#include <ein/shape_spec_printer.h>

namespace ein {
namespace {

// The text a range covers in the spec it came from.
std::string text_of(const ShapeSpec& spec, SourceRange r) {
  return std::string(spec.source->slice(r));
}

TEST(ShapeSpecGrammar, AnalyzeFindsNoProblems) {
  EXPECT_EQ(tao::pegtl::analyze<grammar::shape_spec::spec>(), 0u);
}

TEST(ShapeSpecParser, DTypeAndNamedDims) {
  const ShapeSpec s = parse_shape_spec("f32[batch seq hidden]");
  ASSERT_TRUE(s.dtype.has_value());
  EXPECT_EQ(s.dtype->name, "f32");
  EXPECT_EQ(s.dtype->dtypes, DTypeSet{DType::f32});
  EXPECT_EQ(s.dtype->range, (SourceRange{0, 3}));
  ASSERT_EQ(s.dims.size(), 3u);
  const char* names[] = {"batch", "seq", "hidden"};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(s.dims[i].kind, DimKind::named);
    EXPECT_EQ(s.dims[i].name, names[i]);
    EXPECT_FALSE(s.dims[i].broadcastable);
    EXPECT_EQ(text_of(s, s.dims[i].range), names[i]);
  }
  EXPECT_EQ(s.dims[0].range, (SourceRange{4, 9}));
  EXPECT_EQ(text_of(s, s.dims_range), "batch seq hidden");
  EXPECT_EQ(text_of(s, s.range), "f32[batch seq hidden]");
  EXPECT_EQ(s.source->name(), "shape spec");
}

TEST(ShapeSpecParser, JaxtypingCategoriesAndShortNames) {
  EXPECT_EQ(parse_shape_spec("Float[b c]").dtype->dtypes, kFloatDTypes);
  EXPECT_EQ(parse_shape_spec("Int[n]").dtype->dtypes, kIntDTypes);
  EXPECT_EQ(parse_shape_spec("Integer[n]").dtype->dtypes, kIntDTypes | kUIntDTypes);
  EXPECT_EQ(parse_shape_spec("Shaped[n]").dtype->dtypes, DTypeSet::all());
  EXPECT_EQ(parse_shape_spec("Float32[*batch foo]").dtype->dtypes, DTypeSet{DType::f32});
  EXPECT_EQ(parse_shape_spec("i64[n]").dtype->dtypes, DTypeSet{DType::i64});
  EXPECT_EQ(parse_shape_spec("bool [n]").dtype->name, "bool");  // a space before '[' is fine
}

TEST(ShapeSpecParser, BareDimsMeanAnyDType) {
  const ShapeSpec s = parse_shape_spec("  batch seq hidden ");
  EXPECT_FALSE(s.dtype.has_value());
  EXPECT_EQ(accepted_dtypes(s), DTypeSet::all());
  ASSERT_EQ(s.dims.size(), 3u);
  EXPECT_EQ(s.dims[0].range, (SourceRange{2, 7}));
  EXPECT_EQ(text_of(s, s.range), "batch seq hidden");
}

TEST(ShapeSpecParser, ScalarSpecs) {
  for (const char* text : {"f32[]", "f32[  ]", "", "   "}) {
    const ShapeSpec s = parse_shape_spec(text);
    EXPECT_TRUE(s.dims.empty()) << text;
  }
  EXPECT_EQ(parse_shape_spec("f32[]").dims_range, (SourceRange{4, 4}));
}

TEST(ShapeSpecParser, EveryDimKind) {
  const ShapeSpec s = parse_shape_spec("f32[4 _ _label ... #foo #4 rows=3 #a=b]");
  ASSERT_EQ(s.dims.size(), 8u);
  EXPECT_EQ(s.dims[0].kind, DimKind::fixed);
  EXPECT_EQ(s.dims[0].size, 4);
  EXPECT_EQ(s.dims[1].kind, DimKind::anonymous);
  EXPECT_EQ(s.dims[1].name, "");
  EXPECT_EQ(s.dims[2].kind, DimKind::anonymous);
  EXPECT_EQ(s.dims[2].name, "label");
  EXPECT_EQ(s.dims[3].kind, DimKind::anonymous_variadic);
  EXPECT_EQ(s.dims[4].kind, DimKind::named);
  EXPECT_TRUE(s.dims[4].broadcastable);
  EXPECT_EQ(s.dims[4].name, "foo");
  EXPECT_EQ(text_of(s, s.dims[4].range), "#foo");
  EXPECT_EQ(s.dims[5].kind, DimKind::fixed);
  EXPECT_TRUE(s.dims[5].broadcastable);
  EXPECT_EQ(s.dims[6].kind, DimKind::fixed);
  EXPECT_EQ(s.dims[6].doc_name, "rows");
  EXPECT_EQ(s.dims[6].size, 3);
  EXPECT_EQ(text_of(s, s.dims[6].range), "rows=3");
  // `#a=b`: the size is the named dim b; `a` only documents it.
  EXPECT_EQ(s.dims[7].kind, DimKind::named);
  EXPECT_EQ(s.dims[7].name, "b");
  EXPECT_EQ(s.dims[7].doc_name, "a");
  EXPECT_TRUE(s.dims[7].broadcastable);
}

TEST(ShapeSpecParser, Variadics) {
  EXPECT_EQ(parse_shape_spec("*batch c").dims[0].kind, DimKind::named_variadic);
  EXPECT_EQ(parse_shape_spec("*batch c").dims[0].name, "batch");
  EXPECT_FALSE(parse_shape_spec("*batch c").dims[0].broadcastable);
  for (const char* text : {"*#batch", "#*batch"}) {
    const Dim d = parse_shape_spec(text).dims[0];
    EXPECT_EQ(d.kind, DimKind::named_variadic) << text;
    EXPECT_TRUE(d.broadcastable) << text;
    EXPECT_EQ(d.name, "batch") << text;
  }
  EXPECT_EQ(parse_shape_spec("*_").dims[0].kind, DimKind::anonymous_variadic);
  EXPECT_EQ(parse_shape_spec("*_rest").dims[0].name, "rest");
  EXPECT_EQ(parse_shape_spec("... c").dims[0].range, (SourceRange{0, 3}));
}

TEST(ShapeSpecParser, SymbolicExpressions) {
  const ShapeSpec s = parse_shape_spec("f32[seq-1 2*d bar+qux]");
  ASSERT_EQ(s.dims.size(), 3u);
  const SizeExpr& e = s.dims[0].expr;
  EXPECT_EQ(s.dims[0].kind, DimKind::symbolic);
  EXPECT_EQ(e.kind, SizeExpr::Kind::binary);
  EXPECT_EQ(e.op, SizeOp::sub);
  EXPECT_EQ(e.args[0].name, "seq");
  EXPECT_EQ(e.args[0].range, (SourceRange{4, 7}));
  EXPECT_EQ(e.args[1].value, 1);
  EXPECT_EQ(e.range, (SourceRange{4, 9}));
  EXPECT_EQ(s.dims[1].expr.op, SizeOp::mul);
  EXPECT_EQ(s.dims[1].expr.args[0].value, 2);
  EXPECT_EQ(s.dims[2].expr.op, SizeOp::add);
}

TEST(ShapeSpecParser, PrecedenceAndAssociativity) {
  // a-b*c//d parses as a - ((b*c)//d); a-b-c as (a-b)-c.
  const SizeExpr e = parse_shape_spec("a-b*c//d").dims[0].expr;
  EXPECT_EQ(e.op, SizeOp::sub);
  EXPECT_EQ(e.args[1].op, SizeOp::floordiv);
  EXPECT_EQ(e.args[1].args[0].op, SizeOp::mul);
  const SizeExpr l = parse_shape_spec("a-b-c").dims[0].expr;
  EXPECT_EQ(l.args[0].kind, SizeExpr::Kind::binary);
  EXPECT_EQ(l.args[1].name, "c");
  const ShapeSpec p = parse_shape_spec("(h+1)//2");
  EXPECT_EQ(p.dims[0].expr.op, SizeOp::floordiv);
  EXPECT_EQ(text_of(p, p.dims[0].expr.args[0].range), "(h+1)");
}

TEST(ShapeSpecParser, FunctionsAndSpacesInsideParentheses) {
  const ShapeSpec s = parse_shape_spec("f32[min(foo,bar) max( a , b , c ) ( n - 1 )]");
  ASSERT_EQ(s.dims.size(), 3u);
  EXPECT_EQ(s.dims[0].expr.kind, SizeExpr::Kind::call);
  EXPECT_EQ(s.dims[0].expr.fn, SizeFn::min);
  EXPECT_EQ(s.dims[0].expr.args.size(), 2u);
  EXPECT_EQ(text_of(s, s.dims[0].expr.range), "min(foo,bar)");
  EXPECT_EQ(s.dims[1].expr.fn, SizeFn::max);
  EXPECT_EQ(s.dims[1].expr.args.size(), 3u);
  EXPECT_EQ(s.dims[2].expr.op, SizeOp::sub);
}

TEST(ShapeSpecParser, ParenthesisedNameIsSymbolicNotNamed) {
  // jaxtyping treats `(a)` as an expression: it is evaluated, and never binds.
  const Dim d = parse_shape_spec("(a)").dims[0];
  EXPECT_EQ(d.kind, DimKind::symbolic);
  EXPECT_EQ(d.expr.kind, SizeExpr::Kind::name);
  EXPECT_EQ(parse_shape_spec("foo=bar+qux").dims[0].kind, DimKind::symbolic);
  EXPECT_EQ(parse_shape_spec("foo=bar+qux").dims[0].doc_name, "foo");
}

// One rejected spec: the text, a fragment of the message, and the caret column.
struct BadSpec {
  const char* text;
  const char* message;
  uint32_t column;
};

class ShapeSpecErrors : public ::testing::TestWithParam<BadSpec> {};

TEST_P(ShapeSpecErrors, MessageAndCaret) {
  const BadSpec& bad = GetParam();
  try {
    parse_shape_spec(bad.text);
    FAIL() << "accepted: " << bad.text;
  } catch (const UserError& e) {
    EXPECT_NE(e.message().find(bad.message), std::string::npos) << e.what();
    EXPECT_EQ(e.column(), bad.column) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Jaxtyping, ShapeSpecErrors,
    ::testing::Values(
        BadSpec{"Float[foo, bar]", "unexpected ',': axes are separated by spaces, not commas", 10},
        BadSpec{"Float[foo#]", "unexpected '#': '#' goes first", 10},
        BadSpec{"Float[*a *b]", "only one variadic dim ('*name' or '...'), but '*b'", 10},
        BadSpec{"Float[... *a]", "but '*a' is a second one", 11},
        BadSpec{"Float[##a]", "'#' used twice", 8},
        BadSpec{"Float[*4]", "a fixed size cannot match several dims", 7},
        BadSpec{"Float[_4]", "a fixed size cannot be anonymous", 7},
        BadSpec{"Float[#_]", "both anonymous and broadcastable", 7},
        BadSpec{"Float[*a+b]", "a symbolic size cannot match several dims", 7},
        BadSpec{"Float[_a+b]", "a symbolic size cannot be anonymous", 7},
        BadSpec{"Float[**a]", "'*' used twice", 8}, BadSpec{"x __a", "'_' used twice", 4},
        BadSpec{"x #...", "'...' must be used on its own", 3},
        BadSpec{"n=...", "'...' must be used on its own", 1},
        BadSpec{"x ?a", "'?' (a dim that depends on the pytree path) is not supported", 3}));

INSTANTIATE_TEST_SUITE_P(
    Syntax, ShapeSpecErrors,
    ::testing::Values(
        BadSpec{"Complex[a]", "unknown dtype 'Complex'", 1},
        BadSpec{"f32[a #]", "'#' is missing its dim name or size", 7},
        BadSpec{"f32[*]", "'*' is missing its dim name or size", 5},
        BadSpec{"rows=", "'rows=' is missing its dim name or size", 1},
        BadSpec{"f32[a b", "unexpected end of the spec: expected a dim or ']'", 8},
        BadSpec{"f32[a b) c]", "unexpected ')': expected a space before the next dim", 8},
        BadSpec{"f32[a b]x", "unexpected 'x': nothing may follow the closing ']'", 9},
        BadSpec{"a b]", "unexpected ']': expected a dim", 4},
        BadSpec{"[a b]", "unexpected '[': expected a dim", 1},
        BadSpec{"a+", "unexpected end of the spec: expected a name, an integer or '('", 3},
        BadSpec{"a+ b", "unexpected whitespace: expected a name, an integer or '('", 3},
        BadSpec{"a**2", "unexpected '*': expected a name", 3},
        BadSpec{"x a/2", "unexpected '/': sizes use '//'", 4},
        BadSpec{"(a", "expected ')' to close the '('", 3},
        BadSpec{"x ()", "expected a size expression after '('", 4},
        BadSpec{"min(a", "expected ',' or ')' in the function call", 6},
        BadSpec{"min()", "expected a function argument", 5},
        BadSpec{"min(a,)", "expected a function argument", 7},
        BadSpec{"x foo(a,b)", "unknown function 'foo'", 3},
        BadSpec{"min(a)", "min() needs at least two arguments", 1},
        BadSpec{"99999999999999999999", "integer 99999999999999999999 is too large", 1},
        BadSpec{"n-99999999999999999999", "is too large for a size", 3},
        BadSpec{"a.b", "unexpected '.': expected a space before the next dim", 2},
        BadSpec{"a=b=c", "unexpected '=': expected a space before the next dim", 4},
        BadSpec{"4a", "unexpected 'a': expected a space before the next dim", 2},
        BadSpec{"f32[b×s]", "unexpected '×': expected a space before the next dim", 6}));

TEST(ShapeSpecParser, DeepNestingIsRefusedNotOverflowed) {
  const std::string ok = std::string(32, '(') + "a" + std::string(32, ')');
  EXPECT_EQ(parse_shape_spec(ok).dims[0].kind, DimKind::symbolic);
  const std::string deep = "n " + std::string(100000, '(') + "a";
  try {
    parse_shape_spec(deep);
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(e.message(), "parentheses are nested more than 32 deep");
    EXPECT_EQ(e.column(), 35u);  // the 33rd '('
  }
}

TEST(ShapeSpecParser, ErrorRendersCaretUnderTheOffendingDim) {
  try {
    parse_shape_spec("f32[a *b c *d]");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()),
              "shape spec:1:12: error: a spec may have only one variadic dim ('*name' or '...'), "
              "but '*d' is a second one\n"
              " f32[a *b c *d]\n"
              "            ^~\n"
              "shape spec:1:7: note: the first variadic dim is here\n"
              " f32[a *b c *d]\n"
              "       ^~");
  }
}

TEST(ShapeSpecParser, UnknownDTypeListsTheKnownOnes) {
  try {
    parse_shape_spec("float[a]");
    FAIL();
  } catch (const UserError& e) {
    ASSERT_EQ(e.notes().size(), 1u);
    EXPECT_NE(e.notes()[0].text.find("known dtypes: Shaped, Float,"), std::string::npos);
    EXPECT_NE(e.notes()[0].text.find("f32"), std::string::npos);
  }
}

TEST(ShapeSpecParser, ParseFromNamedSource) {
  const SourcePtr src = make_source("model.ein", "f32[a, b]");
  try {
    parse_shape_spec(src);
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(e.source(), src);
    EXPECT_EQ(std::string(e.what()).rfind("model.ein:1:6: error:", 0), 0u) << e.what();
  }
}

TEST(ShapeSpecPrinter, CanonicalForms) {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {"f32[ batch  seq ]", "f32[batch seq]"},
      {"  a   b ", "a b"},
      {"#*foo", "*#foo"},
      {"*_", "..."},
      {"*_rest c", "*_rest c"},
      {"min( a , b )", "min(a,b)"},
      {"((a))", "(a)"},
      {"(4)", "(4)"},
      {"(a-b)-c", "a-b-c"},
      {"a-(b-c)", "a-(b-c)"},
      {"(a+b)*c", "(a+b)*c"},
      {"a+(b*c)", "a+b*c"},
      {"a*(b//c)", "a*(b//c)"},
      {"x=_", "_x="},
      {"#foo=bar", "#foo=bar"},
      {"f32[]", "f32[]"},
      {"", ""},
  };
  for (const auto& [in, out] : cases)
    EXPECT_EQ(print(parse_shape_spec(in)), out) << in;
}

TEST(ShapeSpecPrinter, RoundTrips) {
  const char* specs[] = {
      "f32[batch seq hidden]",
      "Float[b c1 c2]",
      "Float32[*batch foo]",
      "i64[n]",
      "batch seq hidden",
      "f32[]",
      "Shaped[4 _ _label ... #foo #4 rows=3 #a=b]",
      "*#foo c",
      "#*foo c",
      "*_ c",
      "foo=*bar 3",
      "seq-1 2*d bar+qux min(foo,bar) max(a,b,c)",
      "(h+1)//2 a-(b-c) (a-b)-c a*(b*c) ((a)) (7)",
      "bar qux foo=bar+qux",
      "#n-1 _x=y",
      "Bool[min( a , max(b , c) )]",
  };
  for (const char* text : specs) {
    const ShapeSpec first = parse_shape_spec(text);
    const std::string printed = print(first);
    const ShapeSpec second = parse_shape_spec(printed);
    EXPECT_TRUE(same_structure(first, second)) << text << " -> " << printed;
    EXPECT_EQ(print(second), printed) << text;
  }
}

TEST(ShapeSpecAst, SameStructureIgnoresRangesOnly) {
  EXPECT_TRUE(same_structure(parse_shape_spec("f32[a  b]"), parse_shape_spec(" f32[a b]")));
  EXPECT_FALSE(same_structure(parse_shape_spec("f32[a b]"), parse_shape_spec("f32[a c]")));
  EXPECT_FALSE(same_structure(parse_shape_spec("f32[a]"), parse_shape_spec("Float32[a]")));
  EXPECT_FALSE(same_structure(parse_shape_spec("a"), parse_shape_spec("#a")));
  EXPECT_FALSE(same_structure(parse_shape_spec("a"), parse_shape_spec("(a)")));
  EXPECT_FALSE(same_structure(parse_shape_spec("a-1"), parse_shape_spec("a+1")));
  EXPECT_FALSE(same_structure(parse_shape_spec("rows=4"), parse_shape_spec("4")));
  EXPECT_FALSE(same_structure(parse_shape_spec("a b"), parse_shape_spec("f32[a b]")));
}

TEST(DType, NamesSizesAndParsing) {
  EXPECT_EQ(dtype_name(DType::f32), "f32");
  EXPECT_EQ(dtype_name(DType::boolean), "bool");
  EXPECT_EQ(element_size(DType::f64), 8u);
  EXPECT_EQ(element_size(DType::bf16), 2u);
  EXPECT_EQ(element_size(DType::f8e5m2), 1u);
  EXPECT_EQ(element_size(DType::boolean), 1u);
  for (DType d : kAllDTypes)
    EXPECT_EQ(parse_dtype_name(dtype_name(d)), d);
  EXPECT_EQ(parse_dtype_name("float32"), DType::f32);
  EXPECT_EQ(parse_dtype_name("int64"), DType::i64);
  EXPECT_EQ(parse_dtype_name("uint8"), DType::u8);
  EXPECT_EQ(parse_dtype_name("bool_"), DType::boolean);
  EXPECT_EQ(parse_dtype_name("float8_e4m3fn"), DType::f8e4m3);
  EXPECT_EQ(parse_dtype_name("complex64"), std::nullopt);
}

TEST(DType, CategoriesFollowJaxtyping) {
  EXPECT_TRUE(dtype_category("Float")->contains(DType::bf16));
  EXPECT_TRUE(dtype_category("Float")->contains(DType::f8e4m3));
  EXPECT_FALSE(dtype_category("Float")->contains(DType::i32));
  EXPECT_FALSE(dtype_category("Int")->contains(DType::u8));
  EXPECT_TRUE(dtype_category("UInt")->contains(DType::u8));
  EXPECT_TRUE(dtype_category("Integer")->contains(DType::u8));
  EXPECT_TRUE(dtype_category("Integer")->contains(DType::i8));
  EXPECT_FALSE(dtype_category("Num")->contains(DType::boolean));
  EXPECT_TRUE(dtype_category("Num")->contains(DType::u8));
  EXPECT_EQ(*dtype_category("Inexact"), kFloatDTypes);
  EXPECT_EQ(*dtype_category("Bool"), DTypeSet{DType::boolean});
  EXPECT_EQ(*dtype_category("Shaped"), DTypeSet::all());
  EXPECT_EQ(*dtype_category("BFloat16"), DTypeSet{DType::bf16});
  EXPECT_EQ(*dtype_category("f8e5m2"), DTypeSet{DType::f8e5m2});
  EXPECT_EQ(dtype_category("Complex"), std::nullopt);
  EXPECT_EQ(describe(kIntDTypes), "i64, i32, i8");
  EXPECT_EQ(describe(DTypeSet{}), "nothing");
}

}  // namespace
}  // namespace ein
