// Canonical text of a pattern AST: single spaces between terms, ", " between inputs,
// " -> " before the output, `...` for either ellipsis spelling. parse(print(p)) == p.
#pragma once

#include <string>

#include <ein/pattern_ast.h>

namespace ein {

/// Canonical text of a whole pattern.
std::string print(const Pattern& pattern);
/// Canonical text of one side.
std::string print(const PatternSide& side);
/// Canonical text of one term (`b`, `(h d)`, `()`).
std::string print(const AxisTerm& term);

}  // namespace ein
