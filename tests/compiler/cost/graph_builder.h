// Whole graphs for the cost tests: the shared GraphBuilder plus patterns lowered by the real
// lowering (lower_pattern) and inlined, and map nodes with hand-built scalar bodies, so a model
// such as the lecture's x → w1 → h1 → w2 → h2 → loss is one graph to cost and differentiate.
#pragma once

#include <string>
#include <vector>

#include "compiler/graph/graph_builder.h"
#include "compiler/graph/lower_patterns.h"
#include <ein/pattern_cache.h>

namespace ein::testing {

/// ein::GraphBuilder with lowered patterns; ids are node ids of graph().
class GraphBuilder : public ein::GraphBuilder {
 public:
  using ein::GraphBuilder::GraphBuilder;

  /// The pattern op applied to `args` (lowered as ein::einsum/reduce/repeat would).
  int pattern(const std::string& text, PatternOp op, const std::vector<int>& args,
              std::vector<AxisSize> sizes = {}, Reduction r = Reduction::none) {
    ResolveRequest req;
    req.op = op;
    req.reduction = r;
    if (r == Reduction::var || r == Reduction::std) req.ddof = 1;  // torch's default
    req.sizes = std::move(sizes);
    std::vector<TensorType> types;
    for (int a : args) {
      req.shapes.push_back(node(a).shape);
      types.push_back({node(a).shape, node(a).dtype});
    }
    req.dtype = types.front().dtype;
    const auto recipe = resolve_cached(text, req);
    return inline_graph(lower_pattern(*recipe, types, req.ddof, 0, text), args).front();
  }
  /// einsum over `args`.
  int einsum(const std::string& text, const std::vector<int>& args) {
    return pattern(text, PatternOp::einsum, args);
  }
  /// reduce of `arg`.
  int reduce(const std::string& text, Reduction r, int arg) {
    return pattern(text, PatternOp::reduce, {arg}, {}, r);
  }

  /// A map named "map" of args[0]'s dtype: `body(kernel, loads)` returns the result node;
  /// input i's dim d is output dim axes[i][d]; the output has `shape`.
  int map(const std::vector<int>& args, std::vector<std::vector<int>> axes, Shape shape,
          const MapBody& body) {
    return ein::GraphBuilder::map(args, std::move(axes), std::move(shape), node(args[0]).dtype,
                                  "map", body);
  }
};

}  // namespace ein::testing
