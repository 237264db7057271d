// Canonical text of a map-expression AST: `x[b s d], w[d] -> (x - m)**2 * w + c`. Single
// spaces around binary operators except `**`, ", " between inputs and call arguments, the
// fewest parentheses that keep the tree (never reassociated: float `+` and `*` are not
// associative), numbers as written. parse(print(m)) == m.
#pragma once

#include <string>

#include "dsl/map_ast.h"

namespace ein {

/// Canonical text of a whole map expression.
std::string print(const MapExpr& map);
/// Canonical text of one input (`x[b s d]`, `s[]`).
std::string print(const MapInput& input);
/// Canonical text of one expression.
std::string print(const Expr& expr);

}  // namespace ein
