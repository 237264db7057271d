// Map expressions and reduce patterns → Graph IR for tools, through the same lowering as the
// running ops (compiler/graph/map_program.h, pattern sema).
#include "compiler/graph/expression_graphs.h"

#include <algorithm>

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
  return pattern_graph(pattern, {shape}, dtype, reduction, ddof, sizes);
}

namespace {

/// The named axes of one side of a pattern.
std::vector<std::string> names_of(const PatternSide& side) {
  std::vector<std::string> out;
  for (const auto& term : side.terms)
    for (const AxisToken& tok : term.tokens)
      if (tok.kind == AxisToken::Kind::named) out.push_back(tok.name);
  return out;
}

}  // namespace

PatternOp pattern_op_of(const Pattern& p, bool reduction) {
  if (reduction) return PatternOp::reduce;
  if (p.inputs.size() > 1) return PatternOp::einsum;
  const auto left = names_of(p.inputs.front()), right = p.output ? names_of(*p.output) : left;
  const auto has = [](const std::vector<std::string>& v, const std::string& s) {
    return std::find(v.begin(), v.end(), s) != v.end();
  };
  bool drops = false, adds = false;
  for (const auto& n : left) drops = drops || !has(right, n);
  for (const auto& n : right) adds = adds || !has(left, n);
  return drops ? PatternOp::einsum : adds ? PatternOp::repeat : PatternOp::rearrange;
}

Graph pattern_graph(std::string_view pattern, const std::vector<Shape>& shapes, DType dtype,
                    std::optional<Reduction> reduction, std::optional<int64_t> ddof,
                    const std::vector<AxisSize>& sizes) {
  const Pattern parsed = parse_pattern(pattern);
  ResolveRequest req;
  req.op = pattern_op_of(parsed, reduction.has_value());
  req.reduction = reduction.value_or(Reduction::none);
  req.ddof = ddof;
  req.dtype = dtype;
  req.shapes = shapes;
  req.sizes = sizes;
  const Recipe recipe = resolve_pattern(parsed, req);
  std::vector<TensorType> types;
  for (const Shape& s : shapes)
    types.push_back({s, dtype});
  return lower_pattern(recipe, types, ddof, 0, std::string(pattern));
}

}  // namespace ein
