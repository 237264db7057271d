// Parsing of einops pattern text into the pattern AST (include/ein/pattern_ast.h). Syntax only:
// which constructs an op accepts is checked by sema.
#pragma once

#include <string_view>

#include <ein/pattern_ast.h>

namespace ein {

/// Parses `source`'s text as a pattern; throws UserError pointing at the first bad character.
Pattern parse_pattern(SourcePtr source);
/// Convenience: parses `text` under the source name "pattern".
Pattern parse_pattern(std::string_view text);

}  // namespace ein
