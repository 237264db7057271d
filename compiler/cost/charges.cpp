// fused_charges(): node_cost() of every unfused node, handed to the fused node that runs it.
#include "compiler/cost/charges.h"

#include <algorithm>
#include <stdexcept>

#include "compiler/cost/cost_model.h"

namespace ein {

GraphCharges fused_charges(const Graph& fused, const Graph& unfused, const std::vector<int>& source,
                           std::span<const CostPhase> phases) {
  if (source.size() != fused.nodes.size())
    throw std::logic_error("fused_charges: the source map does not match the fused graph");
  const GraphCost costs = cost(unfused);
  // Unfused node `id`'s charges, merged by phase into `into`: its cost under its phase, less
  // the part that rebuilds forward values (cost_model.h's recompute_flops), charged as
  // recomputation when phases are given, and less a forward kernel's gradients
  // (gradient_flops), charged as input-gradient work.
  const auto charge = [&](int id, std::vector<NodeCharge>& into) {
    const NodeCost& c = costs.nodes[id];
    const auto add = [&](std::optional<CostPhase> phase, const CostTotals& cost) {
      auto same = std::find_if(into.begin(), into.end(),
                               [&](const NodeCharge& o) { return o.phase == phase; });
      if (same == into.end())
        into.push_back({phase, cost});
      else
        same->cost += cost;
    };
    std::optional<CostPhase> phase;
    if (!phases.empty()) phase = phases[id];
    CostTotals own;
    own.flops = c.flops;
    own.matmul_flops = c.matmul_flops;
    own.bytes_read = c.bytes_read;
    own.bytes_written = c.bytes_written;
    // Moves `flops` (`matmul` of them contractions') from the node's own charge to `to`'s.
    const auto split_off = [&](int64_t flops, int64_t matmul, CostPhase to) {
      CostTotals part;
      part.flops = flops;
      part.matmul_flops = matmul;
      own.flops -= flops;
      own.matmul_flops -= matmul;
      add(to, part);
    };
    if (c.gradient_flops > 0)  // a forward kernel's gradients: the backward's work
      split_off(c.gradient_flops, c.gradient_matmul_flops, CostPhase::input_grad);
    if (c.recompute_flops > 0 && phase && *phase != CostPhase::recompute)
      split_off(c.recompute_flops, c.recompute_matmul_flops, CostPhase::recompute);
    add(phase, own);
  };
  GraphCharges out(fused.nodes.size());
  for (size_t i = 0; i < fused.nodes.size(); ++i) {
    const GraphNode& n = fused.nodes[i];
    if (n.op == GraphOp::fused) {
      // One charge per phase: a kernel of hundreds of members costs a few counter updates.
      for (int m : std::get<FusedAttr>(n.attr).members) charge(m, out[i]);
    } else if (source[i] >= 0) {
      charge(source[i], out[i]);
    }
  }
  return out;
}

}  // namespace ein
