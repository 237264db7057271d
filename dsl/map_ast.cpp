// Operator spellings and structural comparison of map-expression ASTs (ranges ignored).
#include "dsl/map_ast.h"

#include <algorithm>
#include <cmath>

namespace ein {

std::string_view spelling(UnaryOp op) {
  switch (op) {
    case UnaryOp::neg:
      return "-";
  }
  return "?";
}

std::string_view spelling(BinaryOp op) {
  switch (op) {
    case BinaryOp::add:
      return "+";
    case BinaryOp::sub:
      return "-";
    case BinaryOp::mul:
      return "*";
    case BinaryOp::div:
      return "/";
    case BinaryOp::pow:
      return "**";
    case BinaryOp::lt:
      return "<";
    case BinaryOp::le:
      return "<=";
    case BinaryOp::gt:
      return ">";
    case BinaryOp::ge:
      return ">=";
    case BinaryOp::eq:
      return "==";
    case BinaryOp::ne:
      return "!=";
  }
  return "?";
}

bool is_comparison(BinaryOp op) {
  switch (op) {
    case BinaryOp::lt:
    case BinaryOp::le:
    case BinaryOp::gt:
    case BinaryOp::ge:
    case BinaryOp::eq:
    case BinaryOp::ne:
      return true;
    default:
      return false;
  }
}

namespace {

bool same_node(const Number& a, const Number& b) {
  return a.value == b.value || (std::isnan(a.value) && std::isnan(b.value));
}
bool same_node(const Name& a, const Name& b) {
  return a.name == b.name;
}
bool same_node(const Unary& a, const Unary& b) {
  return a.op == b.op && same_structure(*a.operand, *b.operand);
}
bool same_node(const Binary& a, const Binary& b) {
  return a.op == b.op && same_structure(*a.lhs, *b.lhs) && same_structure(*a.rhs, *b.rhs);
}
bool same_node(const Call& a, const Call& b) {
  return a.name == b.name &&
         std::equal(a.args.begin(), a.args.end(), b.args.begin(), b.args.end(),
                    [](const ExprPtr& x, const ExprPtr& y) { return same_structure(*x, *y); });
}

bool same_input(const MapInput& a, const MapInput& b) {
  return a.name == b.name &&
         std::equal(a.axes.begin(), a.axes.end(), b.axes.begin(), b.axes.end(),
                    [](const MapAxis& x, const MapAxis& y) { return x.name == y.name; });
}

}  // namespace

bool same_structure(const Expr& a, const Expr& b) {
  if (a.node.index() != b.node.index()) return false;
  return std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        return same_node(x, std::get<T>(b.node));
      },
      a.node);
}

bool same_structure(const MapExpr& a, const MapExpr& b) {
  return std::equal(a.inputs.begin(), a.inputs.end(), b.inputs.begin(), b.inputs.end(),
                    same_input) &&
         same_structure(a.body, b.body);
}

}  // namespace ein
