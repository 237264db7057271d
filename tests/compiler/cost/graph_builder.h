// Whole graphs for the cost tests: patterns lowered by the real lowering (lower_pattern) and
// spliced into one Graph, plus map nodes with hand-built scalar bodies, so a model such as the
// lecture's x → w1 → h1 → w2 → h2 → loss is one graph to cost and differentiate.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "compiler/graph/graph.h"
#include "compiler/graph/lower_patterns.h"
#include <ein/pattern_cache.h>

namespace ein::testing {

/// Appends lowered patterns and maps to one graph; ids are node ids of `graph`.
class GraphBuilder {
 public:
  Graph graph;

  /// A new graph input (InputAttr index in call order).
  int input(Shape shape, DType dtype = DType::f32) {
    GraphNode n;
    n.op = GraphOp::input;
    n.shape = std::move(shape);
    n.dtype = dtype;
    n.attr = InputAttr{inputs_++};
    return graph.add(std::move(n));
  }

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
      req.shapes.push_back(graph.nodes[a].shape);
      types.push_back({graph.nodes[a].shape, graph.nodes[a].dtype});
    }
    req.dtype = types.front().dtype;
    const auto recipe = resolve_cached(text, req);
    return splice(lower_pattern(*recipe, types, req.ddof, 0, text), args);
  }
  /// einsum over `args`.
  int einsum(const std::string& text, const std::vector<int>& args) {
    return pattern(text, PatternOp::einsum, args);
  }
  /// reduce of `arg`.
  int reduce(const std::string& text, Reduction r, int arg) {
    return pattern(text, PatternOp::reduce, {arg}, {}, r);
  }

  /// A map: `body(kernel, loads)` returns the result node; input i's dim d is output dim
  /// axes[i][d]; the output has `shape`.
  template <class F>
  int map(const std::vector<int>& args, std::vector<std::vector<int>> axes, Shape shape, F&& body) {
    auto k = std::make_shared<Kernel>();
    std::vector<int> loads;
    for (size_t i = 0; i < args.size(); ++i)
      loads.push_back(k->load(static_cast<int>(i)));
    k->body = k->result = body(*k, loads);
    k->name = "map";
    std::vector<TensorType> types;
    for (int a : args)
      types.push_back({graph.nodes[a].shape, graph.nodes[a].dtype});
    return splice(lower_map(k, axes, types, shape, graph.nodes[args[0]].dtype, "map"), args);
  }

  /// Marks `id` as an output.
  void output(int id) { graph.outputs.push_back(id); }

 private:
  /// Appends `sub`'s nodes, its input k replaced by args[k]; returns its (first) output.
  int splice(const Graph& sub, const std::vector<int>& args) {
    std::vector<int> id(sub.nodes.size(), -1);
    for (size_t i = 0; i < sub.nodes.size(); ++i) {
      const GraphNode& n = sub.nodes[i];
      if (n.op == GraphOp::input) {
        id[i] = args[std::get<InputAttr>(n.attr).index];
        continue;
      }
      GraphNode copy = n;
      for (int& in : copy.inputs)
        in = id[in];
      id[i] = graph.add(std::move(copy));
    }
    return id[sub.outputs.front()];
  }

  int inputs_ = 0;
};

}  // namespace ein::testing
