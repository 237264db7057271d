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
  const auto charge = [&](int id) {
    const NodeCost& c = costs.nodes[id];
    NodeCharge out;
    if (!phases.empty()) out.phase = phases[id];
    out.cost.flops = c.flops;
    out.cost.matmul_flops = c.matmul_flops;
    out.cost.bytes_read = c.bytes_read;
    out.cost.bytes_written = c.bytes_written;
    return out;
  };
  GraphCharges out(fused.nodes.size());
  for (size_t i = 0; i < fused.nodes.size(); ++i) {
    const GraphNode& n = fused.nodes[i];
    if (n.op == GraphOp::fused) {
      // One charge per phase: a kernel of hundreds of members costs a few counter updates.
      for (int m : std::get<FusedAttr>(n.attr).members) {
        const NodeCharge c = charge(m);
        auto same = std::find_if(out[i].begin(), out[i].end(),
                                 [&](const NodeCharge& o) { return o.phase == c.phase; });
        if (same == out[i].end())
          out[i].push_back(c);
        else
          same->cost += c.cost;
      }
    } else if (source[i] >= 0) {
      out[i].push_back(charge(source[i]));
    }
  }
  return out;
}

}  // namespace ein
