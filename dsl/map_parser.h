// Parsing of map-expression text (`x[b s d], w[d] -> x * w`) into the AST of dsl/map_ast.h.
// Syntax only, plus the two checks that need no meaning: input names and the axes within
// one input are distinct. Function names, arity and output axes are sema's.
#pragma once

#include <string_view>

#include "dsl/map_ast.h"

namespace ein {

/// Parses `source`'s text as a map expression; throws UserError at the first mistake.
MapExpr parse_map(SourcePtr source);
/// Convenience: parses `text` under the source name "map".
MapExpr parse_map(std::string_view text);

}  // namespace ein
