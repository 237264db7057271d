// Prints a ShapeSpec back to canonical text: one space between dims, `*#name` for broadcastable
// variadics, `...` for a plain anonymous variadic, and the fewest parentheses that keep each
// expression's tree. Parsing the output gives a spec equal to the input (same_structure).
#pragma once

#include <string>

#include <ein/shape_spec_ast.h>

namespace ein {

/// The canonical text of a symbolic size, e.g. `min(a,b)*2`, `(h+1)//2`.
std::string print(const SizeExpr& expr);

/// The canonical text of one dim, e.g. `#foo`, `*#batch`, `rows=4`, `_label`.
std::string print(const Dim& dim);

/// The canonical text of a spec: `f32[batch seq]`, or `batch seq` without a dtype part.
std::string print(const ShapeSpec& spec);

}  // namespace ein
