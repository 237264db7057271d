// count_executed_node(): node_cost() of a node that ran, adjusted by what the executor did;
// count_kernel_launch(): a launch, and outside any node the kernel's own cost.
#include "exec/executed_cost.h"

#include "compiler/cost/cost_model.h"
#include "runtime/counters.h"

namespace ein {

void count_executed_node(const Graph& graph, int id, CostPhase phase, const Tensor& result,
                         const Tensor& input) {
  const GraphNode& n = graph.nodes[id];
  // A reshape that folded into the strides returns a view of its input: nothing moved.
  const bool view = n.op == GraphOp::reshape && result.defined() && input.defined() &&
                    result.device_ptr() == input.device_ptr();
  const NodeCost c = node_cost(graph, id, view ? ReshapeLayout::view : ReshapeLayout::copy);
  CostTotals t;
  t.flops = c.flops;
  t.matmul_flops = c.matmul_flops;
  t.bytes_read = c.bytes_read;
  t.bytes_written = c.bytes_written;
  detail::count_cost(graph.origin, phase, t);
}

void count_kernel_launch(const Kernel& kernel, std::span<const Tensor> buffers) {
  if (!detail::counting()) return;
  if (detail::in_counted_node()) return detail::count_launch({}, {});
  CostTotals t;
  t.flops = kernel_flops(kernel, kernel.domain);
  for (size_t i = 0; i < buffers.size() && i < kernel.buffers.size(); ++i) {
    const int64_t bytes =
        buffers[i].numel() * static_cast<int64_t>(element_size(buffers[i].dtype()));
    (kernel.buffers[i].output ? t.bytes_written : t.bytes_read) += bytes;
  }
  detail::count_launch(kernel.name, t);
}

}  // namespace ein
