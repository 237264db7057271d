// ein — einops-style tensor patterns, checked statically.
//
//   #include <ein/ein.h>
//
//   // Resolve a pattern against input shapes (and sizes you know), like einops would:
//   ein::ResolveRequest req;
//   req.op = ein::PatternOp::rearrange;
//   req.shapes = {{8, 1024, 768}};
//   req.sizes = {{"h", 12}};
//   auto recipe = ein::resolve_cached("b s (h d) -> b h s d", req);  // cached after the first call
//   // recipe->output_shape() == {8, 12, 1024, 64}
//
//   // Mistakes are ein::UserError; what() is a compiler-style diagnostic with a caret:
//   try {
//     req.sizes = {{"h", 5}};
//     ein::resolve_cached("b s (h d) -> b h s d", req);
//   } catch (const ein::UserError& e) {
//     std::cerr << e.what();  // pattern:1:5: error: cannot split an axis of length 768 ...
//   }
//
//   // jaxtyping-style specs bind dims across tensors:
//   ein::DimMemo memo;
//   const ein::Shape x = {8, 1024, 768};
//   ein::check_shape(ein::parse_shape_spec("f32[b s d]"), ein::DType::f32, x, memo);  // binds b,
//   s, d
//
// This header is the public API; everything it includes is usable, everything in
// ein::detail is not.
#pragma once

#include <ein/dtype.h>

#include "compiler/pattern_cache.h"
#include "compiler/pattern_sema.h"
#include "compiler/shape_check.h"
#include "dsl/diagnostic.h"
#include "dsl/pattern_parser.h"
#include "dsl/pattern_printer.h"
#include "dsl/shape_spec_parser.h"
#include "dsl/shape_spec_printer.h"
