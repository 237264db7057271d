// Parses jaxtyping-style shape specs (`f32[*batch seq d]`, `Float[b c1]`, or a bare dims
// string `batch seq hidden`) into a ShapeSpec AST. It rejects every annotation jaxtyping
// 0.3.11 rejects (`a, b`, `foo#`, `*a *b`, `##a`, `*4`, `_4`, `#_`, ...) with a UserError
// under the offending text; it does not look at any tensor (compiler/shape_check does).
#pragma once

#include <string_view>

#include <ein/shape_spec_ast.h>
#include <ein/source.h>

namespace ein {

/// Parses and validates the whole text of `source`; throws UserError on any mistake.
ShapeSpec parse_shape_spec(SourcePtr source);

/// Parses `text` as a source named "shape spec".
ShapeSpec parse_shape_spec(std::string_view text);

}  // namespace ein
