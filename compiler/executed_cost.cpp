// count_executed_node(): node_cost() of a node that ran, adjusted by what the executor did.
#include "compiler/executed_cost.h"

#include "compiler/cost_model.h"
#include "runtime/counters.h"

namespace ein {

void count_executed_node(const Graph& graph, int id, CostPhase phase, const Tensor& result,
                         const Tensor& input) {
  const GraphNode& n = graph.nodes[id];
  // A reshape that folded into the strides returns a view of its input: nothing moved.
  const bool view = n.op == GraphOp::reshape && result.defined() && input.defined() &&
                    result.data_ptr() == input.data_ptr();
  const NodeCost c = node_cost(graph, id, view ? ReshapeLayout::view : ReshapeLayout::copy);
  CostTotals t;
  t.flops = c.flops;
  t.matmul_flops = c.matmul_flops;
  t.bytes_read = c.bytes_read;
  t.bytes_written = c.bytes_written;
  detail::count_cost(graph.origin, phase, t);
}

}  // namespace ein
