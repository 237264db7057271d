// Map expressions and reduce patterns → Graph IR for tools, through the same lowering as the
// running ops (compiler/graph/map_program.h, pattern sema).
#include "compiler/graph/expression_graphs.h"

#include "compiler/graph/lower_patterns.h"
#include "compiler/graph/map_program.h"
#include <ein/pattern_parser.h>

namespace ein {

Graph map_expression_graph(std::string_view text, const std::vector<Shape>& shapes, DType dtype) {
  const auto p = map_program(text);
  const Shape sizes = bind_map_sizes(*p, shapes);
  std::vector<TensorType> types;
  for (const Shape& s : shapes)
    types.push_back({s, dtype});
  return lower_map(p->body, p->axes, types, sizes, dtype, std::string(text));
}

Graph reduce_pattern_graph(std::string_view pattern, Reduction reduction,
                           std::optional<int64_t> ddof, const Shape& shape, DType dtype,
                           const std::vector<AxisSize>& sizes) {
  ResolveRequest req;
  req.op = PatternOp::reduce;
  req.reduction = reduction;
  req.ddof = ddof;
  req.dtype = dtype;
  req.shapes = {shape};
  req.sizes = sizes;
  const Recipe recipe = resolve_pattern(parse_pattern(pattern), req);
  return lower_pattern(recipe, {{shape, dtype}}, ddof, 0, std::string(pattern));
}

}  // namespace ein
