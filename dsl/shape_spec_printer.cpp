// Canonical text of shape specs. The output is valid for both ein and jaxtyping (no spaces
// inside expressions), and parse(print(spec)) is structurally equal to spec.
#include <ein/shape_spec_printer.h>

#include <string_view>

namespace ein {
namespace {

// Binding strength: operands bind tighter than `*` `//`, which bind tighter than `+` `-`.
int precedence(const SizeExpr& e) {
  if (e.kind != SizeExpr::Kind::binary) return 3;
  return (e.op == SizeOp::add || e.op == SizeOp::sub) ? 1 : 2;
}

std::string_view op_text(SizeOp op) {
  switch (op) {
    case SizeOp::add:
      return "+";
    case SizeOp::sub:
      return "-";
    case SizeOp::mul:
      return "*";
    case SizeOp::floordiv:
      return "//";
  }
  return "?";
}

// Operators are left-associative, so a right operand of equal strength needs parentheses
// to keep its tree (`a-(b-c)`); `a+(b+c)` keeps them too, so the round trip is exact.
std::string print_operand(const SizeExpr& child, int parent, bool right) {
  const int p = precedence(child);
  const bool parens = p < parent || (right && p == parent);
  return parens ? "(" + print(child) + ")" : print(child);
}

}  // namespace

std::string print(const SizeExpr& expr) {
  switch (expr.kind) {
    case SizeExpr::Kind::integer:
      return std::to_string(expr.value);
    case SizeExpr::Kind::name:
      return expr.name;
    case SizeExpr::Kind::binary: {
      const int p = precedence(expr);
      return print_operand(expr.args[0], p, false) + std::string(op_text(expr.op)) +
             print_operand(expr.args[1], p, true);
    }
    case SizeExpr::Kind::call: {
      std::string out = expr.fn == SizeFn::min ? "min(" : "max(";
      for (size_t i = 0; i < expr.args.size(); ++i)
        out += (i ? "," : "") + print(expr.args[i]);
      return out + ")";
    }
  }
  return "?";
}

std::string print(const Dim& dim) {
  const std::string doc = dim.doc_name.empty() ? "" : dim.doc_name + "=";
  const std::string hash = dim.broadcastable ? "#" : "";
  switch (dim.kind) {
    case DimKind::named:
      return hash + doc + dim.name;
    case DimKind::fixed:
      return hash + doc + std::to_string(dim.size);
    case DimKind::anonymous:
      return "_" + doc + dim.name;
    case DimKind::anonymous_variadic:
      return dim.name.empty() && doc.empty() ? "..." : "*_" + doc + dim.name;
    case DimKind::named_variadic:
      return "*" + hash + doc + dim.name;
    case DimKind::symbolic: {
      // A lone name or integer in parentheses is symbolic; without them it would be named/fixed.
      const bool lone =
          dim.expr.kind == SizeExpr::Kind::name || dim.expr.kind == SizeExpr::Kind::integer;
      return hash + doc + (lone ? "(" + print(dim.expr) + ")" : print(dim.expr));
    }
  }
  return "?";
}

std::string print(const ShapeSpec& spec) {
  std::string dims;
  for (const Dim& dim : spec.dims)
    dims += (dims.empty() ? "" : " ") + print(dim);
  return spec.dtype ? spec.dtype->name + "[" + dims + "]" : dims;
}

}  // namespace ein
