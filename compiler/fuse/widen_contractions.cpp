// Step 0 of the fusion pass (fuse_internal.h's widen_contractions): 16-bit contractions whose
// only reader is a cast to f32 return f32 themselves.
#include <functional>

#include "compiler/fuse/fuse_internal.h"

namespace ein::detail {

Graph widen_contractions(Graph g) {
  std::vector<int> readers(g.nodes.size(), 0);
  for (const GraphNode& n : g.nodes)
    for (int in : n.inputs) ++readers[in];
  for (int o : g.outputs) ++readers[o];
  // The nodes that become f32 when node x, of dtype `from`, is read as f32 by its one reader:
  // a contraction, or views and concats of such, each read by nothing else.
  const std::function<bool(int, DType, std::vector<int>&)> widens = [&](int x, DType from,
                                                                      std::vector<int>& nodes) {
    const GraphNode& n = g.nodes[x];
    if (readers[x] != 1 || n.dtype != from) return false;
    nodes.push_back(x);
    switch (n.op) {
      case GraphOp::contract:
        return true;
      case GraphOp::view:
      case GraphOp::reshape:
      case GraphOp::permute:
        return widens(n.inputs[0], from, nodes);
      case GraphOp::concat:  // the weight gradients of a fused q|k|v projection
        for (int in : n.inputs)
          if (!widens(in, from, nodes)) return false;
        return true;
      default:
        return false;
    }
  };
  for (GraphNode& cast : g.nodes) {
    if (cast.op != GraphOp::cast || cast.dtype != DType::f32) continue;
    const DType from = g.nodes[cast.inputs[0]].dtype;
    if (from != DType::bf16 && from != DType::f16) continue;
    std::vector<int> nodes;
    if (!widens(cast.inputs[0], from, nodes)) continue;
    for (int x : nodes) g.nodes[x].dtype = DType::f32;
    cast.op = GraphOp::reshape;  // to its own shape: a view of the f32 result
    cast.attr = std::monostate{};
  }
  return g;
}

}  // namespace ein::detail
