// Evaluation of symbolic sizes (`seq-1`, `2*d`, `min(a,b)`) against the sizes bound so far.
// Arithmetic follows Python's integers, as jaxtyping's eval does (`//` floors toward minus
// infinity), but is checked: overflow and division by zero are user errors, never UB.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <ein/shape_spec_ast.h>
#include <ein/source.h>

namespace ein {

/// The size bound to a single dim, or nullopt when `name` is not bound.
using SizeLookup = std::function<std::optional<int64_t>(std::string_view name)>;

/// Evaluates `expr`, reading names through `lookup`. Throws UserError with a caret (into
/// `source`) on the first unbound name, a division by zero, or an overflowing operation.
int64_t evaluate_size(const SizeExpr& expr, const SizeLookup& lookup, const SourcePtr& source);

/// The names `expr` reads, in first-use order, each once.
std::vector<std::string> size_names(const SizeExpr& expr);

}  // namespace ein
