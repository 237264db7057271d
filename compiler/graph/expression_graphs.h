// Graphs of a map expression or a reduce pattern for given input shapes, without running them:
// what `ein emit` shows for expressions that are not standard functions. The running ops
// (ein::map, ein::reduce) build the same graphs on the fly.
#pragma once

#include <ein/pattern_ast.h>
#include <optional>
#include <string_view>
#include <vector>

#include "compiler/graph/graph.h"
#include <ein/patterns.h>

namespace ein {

/// The one-map graph of map expression `text` (docs/map_expressions.md) on inputs of these
/// shapes, all of `dtype`; axis sizes bind by name, 1 broadcasts. Throws UserError.
Graph map_expression_graph(std::string_view text, const std::vector<Shape>& shapes, DType dtype);

/// The graph of einops `reduce(x, pattern, reduction)` on an input of `shape`. Throws
/// UserError.
Graph reduce_pattern_graph(std::string_view pattern, Reduction reduction,
                           std::optional<int64_t> ddof, const Shape& shape, DType dtype,
                           const std::vector<AxisSize>& sizes = {});

/// Which einops op a pattern with '->' means without being told (ein::compile, ein emit): reduce
/// when a reduction is given; einsum for several inputs or a dropped axis; repeat when axes
/// are added; else rearrange.
PatternOp pattern_op_of(const Pattern& pattern, bool reduction);

/// The graph of any einops pattern with '->' on inputs of these shapes (the op as
/// pattern_op_of says). Throws UserError.
Graph pattern_graph(std::string_view pattern, const std::vector<Shape>& shapes, DType dtype,
                    std::optional<Reduction> reduction = std::nullopt,
                    std::optional<int64_t> ddof = std::nullopt,
                    const std::vector<AxisSize>& sizes = {});

}  // namespace ein
