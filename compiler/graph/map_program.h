// Map expressions (docs/map_expressions.md) checked and lowered once: the parsed expression,
// the output's axes (the union of the inputs' axes) and the scalar DAG of the map node. ein::map
// runs them; `ein emit` shows their graphs.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <ein/shape.h>

#include "compiler/kernel/kernel_ir.h"
#include "dsl/map_ast.h"

namespace ein {

/// A checked map expression: its inputs, the output's axes and the scalar DAG (buffers are
/// the inputs in order; the output buffer is added per call).
struct MapProgram {
  MapExpr expr;
  std::vector<std::string> out_axes;   ///< union of the inputs' axes, first appearance order
  std::vector<std::vector<int>> axes;  ///< per input, per dim: its position in out_axes
  Kernel kernel;                       ///< nodes and body; domain and buffers per call
  std::shared_ptr<const Kernel> body;  ///< the same, shared with the graphs
};

/// The program of `text`, parsed, checked (names, functions, arities) and lowered once per
/// text (cached). Throws UserError with a caret at the mistake.
std::shared_ptr<const MapProgram> map_program(std::string_view text);

/// The most programs map_program() keeps: at this many, the next new text empties its cache
/// first (programs handed out stay valid), so map texts made on the fly do not grow a process.
inline constexpr size_t kMapProgramCapacity = 4096;
/// How many programs map_program() holds now.
size_t map_program_cache_size();

/// The size of each of p.out_axes for inputs of these shapes: sizes bind by name, 1 broadcasts.
/// Throws UserError at the input or axis that disagrees.
Shape bind_map_sizes(const MapProgram& p, const std::vector<Shape>& shapes);

}  // namespace ein
