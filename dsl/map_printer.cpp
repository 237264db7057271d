// Map-expression AST → canonical text. Parentheses come from precedence, not from the
// source: a child is parenthesized when it binds looser than its position allows.
#include "dsl/map_printer.h"

namespace ein {
namespace {

// Binding strength, loosest first, as in the grammar (dsl/map_grammar.h).
enum Level : int { kCompare = 1, kSum, kProduct, kUnary, kPower, kPrimary };

Level level(BinaryOp op) {
  if (is_comparison(op)) return kCompare;
  switch (op) {
    case BinaryOp::add:
    case BinaryOp::sub:
      return kSum;
    case BinaryOp::mul:
    case BinaryOp::div:
      return kProduct;
    default:
      return kPower;
  }
}

Level level(const Expr& e) {
  if (const auto* b = std::get_if<Binary>(&e.node)) return level(b->op);
  if (std::holds_alternative<Unary>(e.node)) return kUnary;
  return kPrimary;
}

// `e`, parenthesized unless it binds at least as tightly as `min`.
std::string operand(const Expr& e, int min) {
  std::string text = print(e);
  return level(e) >= min ? text : "(" + text + ")";
}

std::string print_binary(const Binary& b) {
  const Level l = level(b.op);
  // Left-associative levels take an equal level on the left only; comparisons do not chain,
  // and `**` is right-associative with a unary operand on its right (2**-x), as in Python.
  int left = l, right = l + 1;
  if (l == kCompare) left = kSum;
  if (l == kPower) left = kPrimary, right = kUnary;
  const std::string_view op = spelling(b.op);
  const std::string sep = l == kPower ? "" : " ";
  return operand(*b.lhs, left) + sep + std::string(op) + sep + operand(*b.rhs, right);
}

}  // namespace

std::string print(const Expr& expr) {
  if (const auto* n = std::get_if<Number>(&expr.node)) return n->text;
  if (const auto* n = std::get_if<Name>(&expr.node)) return n->name;
  if (const auto* u = std::get_if<Unary>(&expr.node))
    return std::string(spelling(u->op)) + operand(*u->operand, kUnary);
  if (const auto* b = std::get_if<Binary>(&expr.node)) return print_binary(*b);
  const Call& c = std::get<Call>(expr.node);
  std::string out = c.name + "(";
  for (size_t i = 0; i < c.args.size(); ++i) {
    if (i) out += ", ";
    out += print(*c.args[i]);
  }
  return out + ")";
}

std::string print(const MapInput& input) {
  std::string out = input.name + "[";
  for (size_t i = 0; i < input.axes.size(); ++i) {
    if (i) out += ' ';
    out += input.axes[i].name;
  }
  return out + "]";
}

std::string print(const MapExpr& map) {
  std::string out;
  for (size_t i = 0; i < map.inputs.size(); ++i) {
    if (i) out += ", ";
    out += print(map.inputs[i]);
  }
  return out + " -> " + print(map.body);
}

}  // namespace ein
