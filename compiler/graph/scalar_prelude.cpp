// split_scalar_prelude (scalar_prelude.h). Steps:
//   1. in topological order, a node is the prelude's when it holds at most one element and is
//      a given input, or is no input and reads only the prelude's nodes (a fused node: every
//      output at most one element);
//   2. the prelude's outputs are its nodes, inputs aside, that the rest reads or the graph
//      returns;
//   3. the rest keeps every input node, and in place of each prelude output an input node
//      numbered after the graph's own; the prelude keeps its nodes, input nodes numbered as
//      in the graph.
#include "compiler/graph/scalar_prelude.h"

#include <algorithm>

namespace ein {
namespace {

bool at_most_one_element(const Shape& shape) {
  return std::all_of(shape.begin(), shape.end(), [](int64_t s) { return s <= 1; });
}

bool scalar_node(const GraphNode& n) {
  if (!at_most_one_element(n.shape)) return false;
  if (const auto* f = std::get_if<FusedAttr>(&n.attr))
    for (const FusedOutput& o : f->outputs)
      if (!at_most_one_element(o.shape)) return false;
  return true;
}

/// The number of inputs `g` takes: one more than its largest input index.
int input_count(const Graph& g) {
  int count = 0;
  for (const GraphNode& n : g.nodes)
    if (n.op == GraphOp::input) count = std::max(count, std::get<InputAttr>(n.attr).index + 1);
  return count;
}

}  // namespace

std::optional<ScalarPrelude> split_scalar_prelude(const Graph& g, const std::vector<int>& given) {
  const size_t n = g.nodes.size();
  std::vector<char> in_prelude(n, 0);
  bool computes = false;
  for (size_t i = 0; i < n; ++i) {
    const GraphNode& node = g.nodes[i];
    if (!scalar_node(node)) continue;
    if (node.op == GraphOp::input) {
      const int index = std::get<InputAttr>(node.attr).index;
      in_prelude[i] = std::find(given.begin(), given.end(), index) != given.end();
      continue;
    }
    in_prelude[i] = std::all_of(node.inputs.begin(), node.inputs.end(),
                                [&](int in) { return in_prelude[static_cast<size_t>(in)]; });
    computes = computes || (in_prelude[i] && node.op == GraphOp::fused);
  }
  if (!computes) return std::nullopt;

  std::vector<char> exported(n, 0);  // a prelude output
  const auto exports = [&](int id) {
    const auto i = static_cast<size_t>(id);
    if (in_prelude[i] && g.nodes[i].op != GraphOp::input) exported[i] = 1;
  };
  for (size_t i = 0; i < n; ++i)
    if (!in_prelude[i])
      for (int in : g.nodes[i].inputs)
        exports(in);
  for (int o : g.outputs)
    exports(o);

  ScalarPrelude split;
  split.prelude.origin = g.origin + " (scalar prelude)";
  split.rest.origin = g.origin;
  std::vector<int> in_prelude_graph(n, -1), in_rest(n, -1);
  int next_input = input_count(g);
  for (size_t i = 0; i < n; ++i) {
    const GraphNode& node = g.nodes[i];
    if (in_prelude[i]) {
      GraphNode copy = node;
      for (int& in : copy.inputs)
        in = in_prelude_graph[static_cast<size_t>(in)];
      in_prelude_graph[i] = split.prelude.add(std::move(copy));
      if (exported[i]) {
        split.prelude.outputs.push_back(in_prelude_graph[i]);
        GraphNode input;
        input.op = GraphOp::input;
        input.attr = InputAttr{next_input++};
        input.shape = node.shape;
        input.dtype = node.dtype;
        in_rest[i] = split.rest.add(std::move(input));
      }
      if (node.op != GraphOp::input) continue;  // the rest keeps every input node
    }
    GraphNode copy = node;
    for (int& in : copy.inputs)
      in = in_rest[static_cast<size_t>(in)];
    in_rest[i] = split.rest.add(std::move(copy));
  }
  for (int o : g.outputs)
    split.rest.outputs.push_back(in_rest[static_cast<size_t>(o)]);
  return split;
}

}  // namespace ein
