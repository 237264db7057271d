// The typed AST of map expressions: fused elementwise computations over named axes,
// `x[b s d], m[b s], w[d] -> (x - m)**2 * w`. The parser builds it without semantic checks
// (which names are functions, their arity, the output's axes are sema's); every node carries
// a SourceRange. The syntax is documented in docs/map_expressions.md.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <ein/source.h>

namespace ein {

/// The one prefix operator.
enum class UnaryOp : uint8_t {
  neg,  ///< `-x`
};

/// Infix operators, loosest-binding last in each group (see docs/map_expressions.md).
enum class BinaryOp : uint8_t {
  add,  ///< `+`
  sub,  ///< `-`
  mul,  ///< `*`
  div,  ///< `/`
  pow,  ///< `**`, right-associative
  lt,   ///< `<`
  le,   ///< `<=`
  gt,   ///< `>`
  ge,   ///< `>=`
  eq,   ///< `==`
  ne,   ///< `!=`
};

/// How an operator is written (`"-"`, `"**"`, `"<="`).
std::string_view spelling(UnaryOp op);
/// How an operator is written (`"-"`, `"**"`, `"<="`).
std::string_view spelling(BinaryOp op);
/// True for `< <= > >= == !=`.
bool is_comparison(BinaryOp op);

struct Expr;
/// Children are owned; an AST is moved, never copied.
using ExprPtr = std::unique_ptr<Expr>;

/// A numeric literal: `2`, `0.5`, `1e-5`, `.5`, or `inf`.
struct Number {
  double value = 0;  ///< the value, rounded to the nearest double
  std::string text;  ///< as written, kept so printing does not change the literal
};

/// A reference to an input by name (`x`).
struct Name {
  std::string name;  ///< the identifier
};

/// `-operand`.
struct Unary {
  UnaryOp op = UnaryOp::neg;  ///< the operator
  SourceRange op_range;       ///< the operator token
  ExprPtr operand;            ///< never null
};

/// `lhs op rhs`.
struct Binary {
  BinaryOp op = BinaryOp::add;  ///< the operator
  SourceRange op_range;         ///< the operator token, for errors about the operation
  ExprPtr lhs;                  ///< never null
  ExprPtr rhs;                  ///< never null
};

/// `name(args...)`; the name is not checked by the parser.
struct Call {
  std::string name;           ///< the function name, e.g. `tanh`, `where`
  SourceRange name_range;     ///< the name token
  std::vector<ExprPtr> args;  ///< possibly empty; none null
};

/// One expression node. Walk it with std::visit or std::get_if on `node`.
struct Expr {
  std::variant<Number, Name, Unary, Binary, Call> node;  ///< what the node is
  SourceRange range;  ///< the whole subexpression, with its parentheses when it had any
};

/// One axis of an input: `b` in `x[b s d]`.
struct MapAxis {
  std::string name;   ///< the identifier
  SourceRange range;  ///< the token
};

/// One input: `x[b s d]`, or `s[]` for a scalar.
struct MapInput {
  std::string name;           ///< the input's name, as the expression refers to it
  SourceRange name_range;     ///< the name token
  std::vector<MapAxis> axes;  ///< in order; no name twice (checked by the parser)
  SourceRange range;          ///< from the name to the `]`
};

/// A whole map expression: `inputs -> body`.
struct MapExpr {
  SourcePtr source;              ///< the text, for diagnostics
  std::vector<MapInput> inputs;  ///< at least one; names distinct (checked by the parser)
  SourceRange arrow;             ///< the `->`
  Expr body;                     ///< the expression
};

/// Structural equality, ignoring source ranges and number spelling (what a round trip keeps).
bool same_structure(const Expr& a, const Expr& b);
/// Structural equality of whole map expressions, ignoring source ranges.
bool same_structure(const MapExpr& a, const MapExpr& b);

}  // namespace ein
