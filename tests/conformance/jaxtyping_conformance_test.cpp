// Table-driven conformance with jaxtyping 0.3.11: every row of jaxtyping_cases.tsv is run
// through ein's shape-spec parser and checker. A row agrees when ein accepts where jaxtyping
// accepts and rejects where it rejects (and, for calls, fails on the same argument). The test
// prints every disagreeing row with its line and a summary of counts; it never skips a row.
#include <gtest/gtest.h>

#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <ein/shape_check.h>
#include <ein/diagnostic.h>
#include <ein/shape_spec_parser.h>
#include "tsv.h"

namespace ein {
namespace {

using Shape = std::vector<int64_t>;

// The one `note` row: a design fact about jaxtyped, covered by NestedCallsGetAFreshMemo below.
constexpr const char* kNestedMemoNote = "nested @jaxtyped calls push a fresh memo";

std::vector<std::string> split(const std::string& text, const std::string& sep) {
  std::vector<std::string> out;
  size_t begin = 0;
  for (size_t at; (at = text.find(sep, begin)) != std::string::npos; begin = at + sep.size())
    out.push_back(text.substr(begin, at - begin));
  out.push_back(text.substr(begin));
  return out;
}

// `Float[A, 'b c1']` -> `Float[b c1]`: the jaxtyping annotation as an ein spec.
std::string to_spec(const std::string& annotation) {
  const size_t open = annotation.find("[A, '");
  const size_t close = annotation.rfind("']");
  if (open == std::string::npos || close == std::string::npos || close < open)
    throw std::runtime_error("cannot read annotation " + annotation);
  return annotation.substr(0, open) + "[" + annotation.substr(open + 5, close - open - 5) + "]";
}

// `(4,3)`, `(5,)`, `()`.
Shape parse_tuple(const std::string& text) {
  Shape out;
  for (const std::string& part : split(text.substr(1, text.size() - 2), ","))
    if (!part.empty()) out.push_back(std::stoll(part));
  return out;
}

// One tensor of a row: `(4,3):f32`.
struct Arg {
  Shape shape;
  DType dtype = DType::f32;
};

Arg parse_arg(const std::string& text) {
  const size_t colon = text.rfind(':');
  const std::optional<DType> dtype = parse_dtype_name(text.substr(colon + 1));
  if (!dtype) throw std::runtime_error("unknown dtype in " + text);
  return {parse_tuple(text.substr(0, colon)), *dtype};
}

// jaxtyping's "Actual value: f32[5](numpy)" -> the tensor it checked.
std::optional<Arg> actual_value(const std::string& message) {
  const size_t at = message.find("Actual value: ");
  if (at == std::string::npos) return std::nullopt;
  const size_t open = message.find('[', at), close = message.find(']', at);
  const std::string dtype = message.substr(at + 14, open - at - 14);
  return Arg{parse_tuple("(" + message.substr(open + 1, close - open - 1) + ")"),
             *parse_dtype_name(dtype)};
}

std::vector<Arg> parse_args(const std::string& text) {
  std::vector<Arg> out;
  for (const std::string& a : split(text, "; "))
    out.push_back(parse_arg(a));
  return out;
}

// What ein did with a row: nullopt = accepted, otherwise the error and where it happened.
struct Rejection {
  std::string where;  // "parse", or the label of the tensor that failed
  UserError error;
};

// kind=call: a @jaxtyped function. Parameters are checked in order with one memo, then the
// return annotation. The return shape is the row's `=> returns` value; when a row has a return
// annotation but no value, an ERROR row takes the shape from jaxtyping's "Actual value: ...",
// and an OK row has ein compute it statically (resolve_shape: symbolic dims evaluated from the
// memo), which must give a valid shape that passes the check, with the first argument's dtype.
std::optional<Rejection> run_call(const ein::testing::TsvRow& row) {
  const std::vector<std::string> sides = split(row["annotation"], " -> ");
  const std::vector<std::string> params = split(sides[0], "; ");
  const std::vector<std::string> values = split(row["arguments"], " => returns ");
  std::vector<Arg> args = parse_args(values[0]);
  std::vector<ShapeSpec> specs;
  std::vector<std::string> labels;
  try {
    for (const std::string& p : params) {
      const size_t colon = p.find(": ");
      specs.push_back(parse_shape_spec(to_spec(p.substr(colon + 2))));
      labels.push_back("parameter '" + p.substr(0, colon) + "'");
    }
    if (sides.size() > 1) specs.push_back(parse_shape_spec(to_spec(sides[1])));
  } catch (const UserError& e) {
    return Rejection{"parse", e};
  }
  if (sides.size() > 1) {
    labels.push_back("the return value");
    if (values.size() > 1) {
      args.push_back(parse_arg(values[1]));
    } else if (const std::optional<Arg> actual = actual_value(row["message"]);
               actual && row["message"].find("the return value") != std::string::npos) {
      args.push_back(*actual);
    }
  }
  std::vector<TensorCheck> tensors;
  for (size_t i = 0; i < args.size(); ++i)
    tensors.push_back({labels[i], &specs[i], args[i].dtype, args[i].shape});
  DimMemo memo;
  try {
    check_shapes(tensors, memo);
    if (tensors.size() < specs.size()) {  // an OK row without a return value: compute it
      const Shape shape = resolve_shape(specs.back(), memo);
      check_shape(specs.back(), args[0].dtype, shape, memo);
    }
  } catch (const UserError& e) {
    for (const DiagnosticNote& n : e.notes())
      for (const std::string& label : labels)
        if (n.text.rfind("while checking " + label + " ", 0) == 0) return Rejection{label, e};
    return Rejection{labels.back(), e};
  }
  return std::nullopt;
}

// kind=isinstance (one annotation, fresh memo) and context-isinstance (one memo for all).
std::optional<Rejection> run_isinstance(const ein::testing::TsvRow& row) {
  const std::vector<std::string> annotations = split(row["annotation"], "; ");
  const std::vector<Arg> args = parse_args(row["arguments"]);
  std::vector<ShapeSpec> specs;
  try {
    for (const std::string& a : annotations)
      specs.push_back(parse_shape_spec(to_spec(a)));
  } catch (const UserError& e) {
    return Rejection{"parse", e};
  }
  DimMemo memo;
  for (size_t i = 0; i < specs.size(); ++i) {
    try {
      check_shape(specs[i], args[i].dtype, args[i].shape, memo);
    } catch (const UserError& e) {
      return Rejection{i + 1 == specs.size() ? "last check" : "check " + std::to_string(i + 1), e};
    }
  }
  return std::nullopt;
}

// Why ein disagrees with the row, or nullopt when it agrees.
std::optional<std::string> disagreement(const ein::testing::TsvRow& row) {
  const std::string& kind = row["kind"];
  const std::string& expected = row["result"];
  const std::string& message = row["message"];
  const std::optional<Rejection> got = kind == "call" ? run_call(row) : run_isinstance(row);
  if (expected == "OK")
    return got ? std::optional<std::string>("ein rejected (" + got->where +
                                            "): " + got->error.what())
               : std::nullopt;
  if (!got) return "ein accepted, jaxtyping says " + expected + ": " + message;
  if (got->error.column() == 0) return "ein's error has no caret: " + got->error.message();
  std::string want;
  if (expected == "ERROR" && message.rfind("ValueError", 0) == 0) {
    want = "parse";  // jaxtyping rejects the annotation itself
  } else if (expected == "FALSE") {
    want = "last check";
  } else if (message.find("the return value") != std::string::npos) {
    want = "the return value";
  } else if (const size_t at = message.find("typechecking parameter '"); at != std::string::npos) {
    want = "parameter '" + message.substr(at + 24, message.find('\'', at + 24) - at - 24) + "'";
  } else if (message.rfind("AnnotationError", 0) == 0) {
    // An unbound name in a symbolic dim: ein reports it while checking that argument.
    if (got->error.message().find("which is not bound") == std::string::npos)
      return "expected an unbound-name error, got: " + got->error.message();
    return std::nullopt;
  } else {
    return "cannot tell where jaxtyping failed: " + message;
  }
  if (got->where != want)
    return "ein failed at " + got->where + ", jaxtyping at " + want + ": " + got->error.what();
  return std::nullopt;
}

TEST(JaxtypingConformance, EveryRowAgrees) {
  const auto rows = ein::testing::read_tsv(ein::testing::conformance_file("jaxtyping_cases.tsv"));
  ASSERT_FALSE(rows.empty());
  std::map<std::string, int> agree, disagree;
  int notes = 0;
  for (const ein::testing::TsvRow& row : rows) {
    const std::string key = row["kind"] + " " + row["result"];
    if (row["kind"] == "note") {
      // Design notes are not runnable rows; each known one has a dedicated test.
      EXPECT_EQ(row["annotation"].rfind(kNestedMemoNote, 0), 0u)
          << "line " << row.line << ": a new design note needs a dedicated test";
      ++notes;
      continue;
    }
    if (row["kind"] != "call" && row["kind"] != "isinstance" &&
        row["kind"] != "context-isinstance") {
      ADD_FAILURE() << "line " << row.line << ": unknown kind '" << row["kind"] << "'";
      ++disagree[key];
      continue;
    }
    std::optional<std::string> why;
    try {
      why = disagreement(row);
    } catch (const std::exception& e) {  // a malformed row, not an ein answer
      why = std::string("could not run the row: ") + e.what();
    }
    if (why) {
      ADD_FAILURE() << "jaxtyping_cases.tsv line " << row.line << " (" << row["annotation"]
                    << " with " << row["arguments"] << "): " << *why;
      ++disagree[key];
    } else {
      ++agree[key];
    }
  }
  int total_agree = 0, total_disagree = 0;
  std::cout << "jaxtyping conformance (" << rows.size() << " rows):\n";
  for (const auto& [key, n] : agree) {
    std::cout << "  agree     " << key << ": " << n << "\n";
    total_agree += n;
  }
  for (const auto& [key, n] : disagree) {
    std::cout << "  DISAGREE  " << key << ": " << n << "\n";
    total_disagree += n;
  }
  std::cout << "  design notes covered by NestedCallsGetAFreshMemo: " << notes << "\n"
            << "  total: " << total_agree << " agree, " << total_disagree << " disagree\n";
  EXPECT_EQ(total_agree + total_disagree + notes, static_cast<int>(rows.size()));
  EXPECT_EQ(total_disagree, 0);
}

// The `note` row: a nested @jaxtyped call pushes a fresh memo, so the inner function's `b` may
// differ from the caller's; an undecorated inner function shares the caller's memo. In ein each
// top-level check set (one check_shapes call, or one DimMemo) is such a scope.
TEST(JaxtypingConformance, NestedCallsGetAFreshMemo) {
  const ShapeSpec spec = parse_shape_spec("Float[b]");
  const Shape outer_shape{4}, inner_shape{3};
  const std::vector<TensorCheck> outer = {{"parameter 'x'", &spec, DType::f32, outer_shape}};
  const std::vector<TensorCheck> inner = {{"parameter 'y'", &spec, DType::f32, inner_shape}};
  DimMemo outer_memo;
  check_shapes(outer, outer_memo);
  DimMemo inner_memo;  // decorated inner call: its own memo, b=3 is fine
  EXPECT_NO_THROW(check_shapes(inner, inner_memo));
  EXPECT_EQ(outer_memo.to_string(), "b=4");
  EXPECT_EQ(inner_memo.to_string(), "b=3");
  // Undecorated inner function: it shares the caller's memo, so b=3 clashes with b=4.
  EXPECT_THROW(check_shapes(inner, outer_memo), UserError);
  EXPECT_EQ(outer_memo.to_string(), "b=4");
}

}  // namespace
}  // namespace ein
