// Parses `.ein` model scripts (imports, dims, lets, modules, optimizers, functions, the train
// block) into the AST of dsl/script_ast.h. Syntax only: names, types and arities are checked
// by sema (compiler/script_*.cpp). The grammar and its newline rule are described in
// dsl/script_grammar.h.
#pragma once

#include "dsl/script_ast.h"
#include <ein/source.h>

namespace ein::script {

/// Parses a whole .ein file; throws ein::UserError (file:line:col, caret) at the first mistake.
/// Type annotations are parsed with parse_shape_spec and their ranges point into `source`.
Script parse_script(SourcePtr source);

}  // namespace ein::script
