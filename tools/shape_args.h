// Parsing of `ein shape`'s arguments: shapes `(2,3,4)`, axis sizes `h=8`, packed shapes
// `[[2],[1],[2]]` and reductions `var(ddof=1)`. Bad text is a UserError pointing into the
// argument, as for patterns.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <ein/patterns.h>

namespace ein::cli {

/// True when the argument looks like `name=size` rather than a shape.
bool is_axis_size(const std::string& arg);
/// Parses `(2,3,4)`, `(5,)`, `()` (also `[2,3]` or `2,3`); `label` names it in errors.
Shape parse_shape_arg(const std::string& text, const std::string& label);
/// Parses `name=size`.
AxisSize parse_axis_size(const std::string& text, const std::string& label);
/// Parses a list of shapes: `[[2],[1],[2]]`, `[(2,);(1,);(2,)]`, `[[2,-1],[1,5]]`.
std::vector<std::vector<int64_t>> parse_shape_list(const std::string& text,
                                                   const std::string& label);

/// A reduction with its optional ddof, from `sum`, `var(ddof=1)`, `std`.
struct ReductionArg {
  Reduction reduction = Reduction::none;  ///< the reduction
  std::optional<int64_t> ddof;            ///< from `(ddof=N)`, when written
};
/// Parses a reduction argument; unknown names are a UserError listing the known ones.
ReductionArg parse_reduction_arg(const std::string& text);

}  // namespace ein::cli
