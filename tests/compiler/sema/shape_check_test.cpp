// Tests of static shape checking against shape specs: binding, the transactional memo,
// broadcasting (single and variadic), symbolic sizes, dtype categories, multi-tensor checks,
// static result shapes, and the error messages with their caret columns and notes.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <ein/shape_check.h>
#include "compiler/sema/symbolic.h"
#include <ein/diagnostic.h>
#include <ein/shape_spec_parser.h>

namespace ein {
namespace {

using Shape = std::vector<int64_t>;

// Runs check_shape and returns the error it throws; fails the test when it does not throw.
UserError check_error(const ShapeSpec& spec, DType dtype, const Shape& shape, DimMemo& memo) {
  try {
    check_shape(spec, dtype, shape, memo);
  } catch (const UserError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted a shape of rank " << shape.size() << " for " << spec.source->text();
  return UserError("no error");
}

// Whether any note of `e` contains `text`.
bool has_note(const UserError& e, const std::string& text) {
  for (const DiagnosticNote& n : e.notes())
    if (n.text.find(text) != std::string::npos) return true;
  return false;
}

TEST(DimMemo, PrintsInFirstBoundOrder) {
  DimMemo memo;
  EXPECT_EQ(memo.to_string(), "(none)");
  memo.bind_single("b", 4);
  memo.bind_single("c1", 3);
  memo.bind_variadic("batch", {{3}, false});
  memo.bind_variadic("e", {{}, true});
  memo.bind_variadic("batch", {{5, 3}, true});  // rebinding keeps its place
  EXPECT_EQ(memo.to_string(), "b=4, c1=3, batch=(5,3), e=()");
  EXPECT_EQ(memo.single("b"), 4);
  EXPECT_EQ(memo.single("batch"), std::nullopt);  // single and variadic names are separate
  ASSERT_NE(memo.variadic("batch"), nullptr);
  EXPECT_TRUE(memo.variadic("batch")->broadcastable);
  EXPECT_EQ(memo.variadic("b"), nullptr);
}

TEST(ShapeCheck, NamedDimsBindThenMustBeEqual) {
  DimMemo memo;
  check_shape(parse_shape_spec("f32[b c1]"), DType::f32, Shape{4, 3}, memo);
  check_shape(parse_shape_spec("f32[b c2]"), DType::f32, Shape{4, 5}, memo);
  EXPECT_EQ(memo.to_string(), "b=4, c1=3, c2=5");
  const UserError e = check_error(parse_shape_spec("f32[c2 b]"), DType::f32, Shape{5, 2}, memo);
  EXPECT_EQ(e.message(), "dim 'b' received size 2, but b is bound to 4");
  EXPECT_EQ(e.column(), 8u);
  EXPECT_TRUE(has_note(e, "the tensor is f32 with shape (5,2)"));
  EXPECT_TRUE(has_note(e, "sizes bound so far: b=4, c1=3, c2=5"));
}

TEST(ShapeCheck, RepeatedNameInOneSpec) {
  DimMemo memo;
  check_shape(parse_shape_spec("a a"), DType::f64, Shape{3, 3}, memo);
  DimMemo fresh;
  const UserError e = check_error(parse_shape_spec("a a"), DType::f64, Shape{3, 4}, fresh);
  EXPECT_EQ(e.column(), 3u);
  EXPECT_TRUE(has_note(e, "sizes bound so far: a=3"));  // what this tensor had bound
  EXPECT_TRUE(fresh.empty());
}

TEST(ShapeCheck, FailingCheckLeavesMemoUnchanged) {
  DimMemo memo;
  check_shape(parse_shape_spec("n"), DType::f32, Shape{7}, memo);
  const DimMemo before = memo;
  // x and y would bind before z fails; none of it may stick.
  check_error(parse_shape_spec("x y *batch 4"), DType::f32, Shape{1, 2, 3, 5}, memo);
  EXPECT_EQ(memo, before);
  check_error(parse_shape_spec("x n-1"), DType::f32, Shape{1, 7}, memo);
  EXPECT_EQ(memo, before);
  EXPECT_FALSE(matches(parse_shape_spec("x y n"), DType::f32, Shape{1, 2, 3}, memo));
  EXPECT_EQ(memo, before);
  EXPECT_TRUE(matches(parse_shape_spec("x y n"), DType::f32, Shape{1, 2, 7}, memo));
  EXPECT_EQ(memo.to_string(), "n=7, x=1, y=2");
}

TEST(ShapeCheck, FixedAnonymousAndEllipsis) {
  DimMemo memo;
  EXPECT_TRUE(matches(parse_shape_spec("4 _ ..."), DType::f32, Shape{4, 9}, memo));
  EXPECT_TRUE(matches(parse_shape_spec("4 _ ..."), DType::f32, Shape{4, 9, 1, 2}, memo));
  EXPECT_TRUE(matches(parse_shape_spec("_ _"), DType::f32, Shape{7, 8}, memo));
  EXPECT_TRUE(memo.empty());
  const UserError e = check_error(parse_shape_spec("f32[_ 4]"), DType::f32, Shape{2, 3}, memo);
  EXPECT_EQ(e.message(), "dim '4' received size 3, but the spec requires 4");
  EXPECT_EQ(e.column(), 7u);
}

TEST(ShapeCheck, BroadcastableSingleDims) {
  DimMemo memo;
  EXPECT_TRUE(matches(parse_shape_spec("#4"), DType::f32, Shape{4}, memo));
  EXPECT_TRUE(matches(parse_shape_spec("#4"), DType::f32, Shape{1}, memo));
  const UserError e = check_error(parse_shape_spec("#4"), DType::f32, Shape{3}, memo);
  EXPECT_EQ(
      e.message(),
      "dim '#4' received size 3, but the spec requires 4 (or 1, as the dim is broadcastable)");
  // Size 1 matches `#foo` without binding it; the next use binds.
  EXPECT_TRUE(matches(parse_shape_spec("#foo"), DType::f32, Shape{1}, memo));
  EXPECT_TRUE(memo.empty());
  EXPECT_TRUE(matches(parse_shape_spec("#foo"), DType::f32, Shape{4}, memo));
  EXPECT_TRUE(matches(parse_shape_spec("#foo"), DType::f32, Shape{1}, memo));
  EXPECT_FALSE(matches(parse_shape_spec("#foo"), DType::f32, Shape{3}, memo));
  EXPECT_EQ(memo.to_string(), "foo=4");
}

TEST(ShapeCheck, NamedVariadicBindsATuple) {
  DimMemo memo;
  check_shape(parse_shape_spec("*batch foo"), DType::f32, Shape{5}, memo);
  EXPECT_EQ(memo.to_string(), "foo=5, batch=()");
  const UserError e = check_error(parse_shape_spec("f32[*batch]"), DType::f32, Shape{3}, memo);
  EXPECT_EQ(e.message(), "variadic dim '*batch' received dims (3,), but *batch is bound to ()");
  EXPECT_EQ(e.column(), 5u);
  check_shape(parse_shape_spec("*batch"), DType::f32, Shape{}, memo);
  // A single dim may share a variadic's name: they live apart.
  check_shape(parse_shape_spec("batch"), DType::f32, Shape{9}, memo);
  EXPECT_EQ(memo.to_string(), "foo=5, batch=(), batch=9");
}

TEST(ShapeCheck, VariadicInTheMiddleAlignsTheSuffix) {
  DimMemo memo;
  check_shape(parse_shape_spec("a *mid b c"), DType::f32, Shape{1, 2, 3, 4, 5}, memo);
  EXPECT_EQ(memo.to_string(), "a=1, b=4, c=5, mid=(2,3)");
  const UserError e =
      check_error(parse_shape_spec("Float[a *mid b c]"), DType::f32, Shape{1, 2}, memo);
  EXPECT_EQ(e.message(), "rank mismatch: expected at least 3 dims, received 2");
  EXPECT_EQ(e.column(), 7u);
}

TEST(ShapeCheck, BroadcastableVariadicsFollowJaxtyping) {
  const ShapeSpec bcast = parse_shape_spec("*#foo");
  const ShapeSpec plain = parse_shape_spec("*foo");
  {  // both broadcastable: the memo stores the broadcast result
    DimMemo memo;
    check_shape(bcast, DType::f32, Shape{4}, memo);
    check_shape(bcast, DType::f32, Shape{4, 4}, memo);
    EXPECT_EQ(memo.to_string(), "foo=(4,4)");
    const UserError e = check_error(bcast, DType::f32, Shape{2, 1}, memo);
    EXPECT_EQ(e.message(),
              "variadic dim '*#foo' received dims (2,1), which cannot be broadcast with (4,4) "
              "bound earlier to *foo");
  }
  {  // stored plain, used broadcastable: must broadcast into the stored sizes; memo unchanged
    DimMemo memo;
    check_shape(plain, DType::f32, Shape{7, 3, 2}, memo);
    check_shape(parse_shape_spec("#*foo"), DType::f32, Shape{1, 2}, memo);
    EXPECT_EQ(memo.to_string(), "foo=(7,3,2)");
    EXPECT_FALSE(memo.variadic("foo")->broadcastable);
    DimMemo small;
    check_shape(plain, DType::f32, Shape{3}, small);
    const UserError e = check_error(bcast, DType::f32, Shape{4, 3}, small);
    EXPECT_EQ(e.message(),
              "variadic dim '*#foo' received dims (4,3), which cannot be broadcast to (3,) bound "
              "earlier to *foo");
  }
  {  // stored broadcastable, used plain: the stored sizes must broadcast to the new ones
    DimMemo memo;
    check_shape(bcast, DType::f32, Shape{1, 3}, memo);
    check_shape(plain, DType::f32, Shape{4, 3}, memo);
    EXPECT_EQ(memo.to_string(), "foo=(4,3)");
    EXPECT_FALSE(memo.variadic("foo")->broadcastable);
    DimMemo other;
    check_shape(bcast, DType::f32, Shape{4, 3}, other);
    const UserError e = check_error(plain, DType::f32, Shape{1, 3}, other);
    EXPECT_NE(e.message().find("cannot be broadcast to them"), std::string::npos) << e.what();
  }
}

TEST(ShapeCheck, SymbolicDimsAreEvaluatedAfterPlainDims) {
  DimMemo memo;
  check_shape(parse_shape_spec("dim"), DType::f32, Shape{5}, memo);
  check_shape(parse_shape_spec("dim-1 2*dim"), DType::f32, Shape{4, 10}, memo);
  const UserError e = check_error(parse_shape_spec("f32[dim-1]"), DType::f32, Shape{5}, memo);
  EXPECT_EQ(e.message(), "dim 'dim-1' received size 5, but dim-1 evaluates to 4");
  EXPECT_EQ(e.column(), 5u);
  EXPECT_EQ(memo.to_string(), "dim=5");  // symbolic dims never bind
  // ein evaluates symbolic dims last, so they may read names bound later in the same spec.
  DimMemo fresh;
  check_shape(parse_shape_spec("min(foo,bar) foo bar"), DType::f32, Shape{2, 2, 3}, fresh);
  check_shape(parse_shape_spec("bar qux foo=bar+qux"), DType::f64, Shape{3, 2, 5}, fresh);
  EXPECT_EQ(fresh.to_string(), "foo=2, bar=3, qux=2");
}

TEST(ShapeCheck, SymbolicDimReadingAnUnboundNameIsAnError) {
  DimMemo memo;
  const UserError e = check_error(parse_shape_spec("Float32[2*dim]"), DType::f32, Shape{4}, memo);
  EXPECT_EQ(e.message(), "symbolic size '2*dim' reads dim 'dim', which is not bound");
  EXPECT_EQ(e.column(), 11u);  // under `dim`
  EXPECT_TRUE(has_note(e, "sizes bound so far: (none)"));
  EXPECT_FALSE(matches(parse_shape_spec("2*dim"), DType::f32, Shape{4}, memo));
  // A broadcastable symbolic dim of size 1 is not evaluated at all (as in jaxtyping).
  EXPECT_TRUE(matches(parse_shape_spec("#2*dim"), DType::f32, Shape{1}, memo));
}

TEST(ShapeCheck, DTypeCategories) {
  DimMemo memo;
  const UserError e = check_error(parse_shape_spec("Float[a b]"), DType::i64, Shape{2, 3}, memo);
  EXPECT_EQ(e.message(),
            "dtype i64 is not accepted by 'Float', which accepts f64, f32, f16, bf16, f8e4m3, "
            "f8e5m2");
  EXPECT_EQ(e.column(), 1u);
  EXPECT_TRUE(memo.empty());
  EXPECT_FALSE(matches(parse_shape_spec("Float32[n]"), DType::f64, Shape{3}, memo));
  EXPECT_FALSE(matches(parse_shape_spec("Int[n]"), DType::u8, Shape{3}, memo));
  EXPECT_TRUE(matches(parse_shape_spec("Integer[n]"), DType::u8, Shape{3}, memo));
  EXPECT_FALSE(matches(parse_shape_spec("Num[n]"), DType::boolean, Shape{3}, memo));
  EXPECT_TRUE(matches(parse_shape_spec("Bool[n]"), DType::boolean, Shape{3}, memo));
  EXPECT_TRUE(matches(parse_shape_spec("bf16[n]"), DType::bf16, Shape{3}, memo));
  EXPECT_TRUE(matches(parse_shape_spec("n"), DType::u8, Shape{3}, memo));  // bare: any dtype
}

TEST(ShapeCheck, RankMismatchNamesExpectedAndReceived) {
  DimMemo memo;
  const UserError e = check_error(parse_shape_spec("Float[a b]"), DType::f32, Shape{2, 3, 4}, memo);
  EXPECT_EQ(e.message(), "rank mismatch: expected 2 dims, received 3");
  EXPECT_EQ(e.column(), 7u);
  EXPECT_TRUE(has_note(e, "the tensor is f32 with shape (2,3,4)"));
  const UserError s = check_error(parse_shape_spec("f32[]"), DType::f32, Shape{1}, memo);
  EXPECT_EQ(s.message(), "rank mismatch: expected 0 dims, received 1");
  EXPECT_EQ(s.column(), 5u);  // under the `]` of the empty list
  EXPECT_TRUE(matches(parse_shape_spec("f32[]"), DType::f32, Shape{}, memo));
}

TEST(ShapeCheck, MultiTensorCheckIsOneCall) {
  const ShapeSpec x = parse_shape_spec("Float[b c1]");
  const ShapeSpec y = parse_shape_spec("Float[b c2]");
  const ShapeSpec out = parse_shape_spec("Float[b c1 c2]");
  const Shape xs{4, 3}, ys{4, 5}, outs{4, 3, 5}, bad{2, 5};
  DimMemo memo;
  const std::vector<TensorCheck> ok = {{"parameter 'x'", &x, DType::f32, xs},
                                       {"parameter 'y'", &y, DType::f32, ys},
                                       {"the return value", &out, DType::f32, outs}};
  check_shapes(ok, memo);
  EXPECT_EQ(memo.to_string(), "b=4, c1=3, c2=5");

  DimMemo fresh;
  const std::vector<TensorCheck> wrong = {{"parameter 'x'", &x, DType::f32, xs},
                                          {"parameter 'y'", &y, DType::f32, bad}};
  try {
    check_shapes(wrong, fresh);
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(e.message(), "dim 'b' received size 2, but b is bound to 4");
    EXPECT_TRUE(has_note(e, "sizes bound so far: b=4, c1=3"));
    EXPECT_TRUE(has_note(e, "while checking parameter 'y' (2 of 2)"));
  }
  EXPECT_TRUE(fresh.empty());  // x's bindings are dropped with the failed call
}

TEST(ShapeCheck, ResolveShapeComputesResultsStatically) {
  DimMemo memo;
  check_shape(parse_shape_spec("*batch b c"), DType::f32, Shape{7, 2, 3}, memo);
  EXPECT_EQ(resolve_shape(parse_shape_spec("c b"), memo), (Shape{3, 2}));
  EXPECT_EQ(resolve_shape(parse_shape_spec("*batch 4 c-1 max(b,c)*2"), memo), (Shape{7, 4, 2, 6}));
  auto error_of = [&](const char* text) {
    try {
      resolve_shape(parse_shape_spec(text), memo);
    } catch (const UserError& e) {
      return e;
    }
    return UserError("no error");
  };
  const UserError unbound = error_of("b d");
  EXPECT_EQ(unbound.message(), "cannot compute the shape: dim 'd' is not bound");
  EXPECT_EQ(unbound.column(), 3u);
  EXPECT_TRUE(has_note(unbound, "sizes bound so far: b=2, c=3, batch=(7,)"));
  EXPECT_EQ(error_of("b _").message(),
            "cannot compute the shape: dim '_' is anonymous, so no size is known for it");
  EXPECT_EQ(error_of("... b").column(), 1u);
  EXPECT_EQ(error_of("b c-4").message(),
            "symbolic size 'c-4' evaluates to -1, which is not a valid size");
  EXPECT_EQ(error_of("*other").message(), "cannot compute the shape: dim '*other' is not bound");
}

TEST(ShapeCheck, HandBuiltSpecsWithoutSourceStillExplain) {
  ShapeSpec spec = parse_shape_spec("n n-1");
  spec.source = nullptr;  // as if built by code, not parsed
  DimMemo memo;
  try {
    check_shape(spec, DType::f32, Shape{5, 5}, memo);
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(e.message(), "dim 'n-1' received size 5, but n-1 evaluates to 4");
    EXPECT_EQ(e.column(), 0u);
  }
}

// --- symbolic.h ----------------------------------------------------------------------------

// Evaluates the last dim of `text` (a symbolic one) with the single dims of `memo`.
int64_t eval(const std::string& text, const DimMemo& memo) {
  const ShapeSpec s = parse_shape_spec(text);
  return evaluate_size(
      s.dims.back().expr, [&](std::string_view name) { return memo.single(name); }, s.source);
}

TEST(Symbolic, PythonIntegerSemantics) {
  DimMemo memo;
  memo.bind_single("n", 2);
  memo.bind_single("m", 7);
  EXPECT_EQ(eval("(n-9)//2", memo), -4);  // floors toward minus infinity, like Python
  EXPECT_EQ(eval("m//2", memo), 3);
  EXPECT_EQ(eval("m//(0-2)", memo), -4);
  EXPECT_EQ(eval("min(m,n,5)*m-n", memo), 12);
  EXPECT_EQ(eval("max(m,n+10)", memo), 12);
  EXPECT_EQ(eval("(7)", memo), 7);
}

TEST(Symbolic, ErrorsPointAtTheCulprit) {
  DimMemo memo;
  memo.bind_single("n", 0);
  memo.bind_single("big", int64_t{1} << 62);
  auto error_of = [&](const char* text) {
    try {
      eval(text, memo);
    } catch (const UserError& e) {
      return e;
    }
    return UserError("no error");
  };
  const UserError div = error_of("x 1+5//n");
  EXPECT_EQ(div.message(), "division by zero in symbolic size '1+5//n'");
  EXPECT_EQ(div.column(), 5u);
  const UserError ovf = error_of("big*4");
  EXPECT_EQ(ovf.message(), "symbolic size 'big*4' overflows a 64-bit integer");
  const UserError unbound = error_of("n+seq");
  EXPECT_EQ(unbound.message(), "symbolic size 'n+seq' reads dim 'seq', which is not bound");
  EXPECT_EQ(unbound.column(), 3u);
  EXPECT_EQ(size_names(parse_shape_spec("min(a,b)*a+c").dims[0].expr),
            (std::vector<std::string>{"a", "b", "c"}));
}

}  // namespace
}  // namespace ein
