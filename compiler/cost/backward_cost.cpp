// backward_phases() and backward_cost(). Backward::forward_of names the forward node of each
// node of the backward's forward side (inputs, saved values, rebuilt values).
#include "compiler/cost/backward_cost.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>

#include <fmt/format.h>

namespace ein {
namespace {

bool is_layout(GraphOp op) {
  return op == GraphOp::view || op == GraphOp::permute || op == GraphOp::reshape ||
         op == GraphOp::slice;
}

/// Follows layout ops (and casts, when `through_casts`) back to the node they start from.
int source(const Graph& g, int id, bool through_casts) {
  while (is_layout(g.nodes[id].op) || (through_casts && g.nodes[id].op == GraphOp::cast))
    id = g.nodes[id].inputs[0];
  return id;
}

bool is_weight(const Graph& forward, int id, const std::vector<bool>& weight_inputs) {
  const GraphNode& n = forward.nodes[source(forward, id, true)];
  if (n.op != GraphOp::input) return false;
  const int index = std::get<InputAttr>(n.attr).index;
  return index >= 0 && index < static_cast<int>(weight_inputs.size()) && weight_inputs[index];
}


/// Per backward node, a bit mask of the operands of its forward node (origin.forward) whose
/// gradient it helps compute. A node tagged with origin.operand has that bit. An untagged
/// node of VJP(i) that ends it (no consumer in VJP(i)) is the gradient of the operand whose
/// own VJP (or graph output) it reaches first, going downstream (within 64 nodes); other
/// untagged nodes inherit the bits of their consumers in VJP(i). 0: unknown (glue).
std::vector<uint64_t> operand_masks(const Backward& b, const Graph& forward) {
  const Graph& g = b.graph;
  const size_t n = g.nodes.size();
  const auto origin = [&](size_t i) { return i < b.origin.size() ? b.origin[i] : GradOrigin{}; };
  std::vector<std::vector<int>> consumers(n);
  for (size_t i = 0; i < n; ++i)
    for (int in : g.nodes[i].inputs)
      consumers[in].push_back(static_cast<int>(i));
  std::vector<int> input_node;  // per forward input index, its node (the last, if several)
  for (size_t f = 0; f < forward.nodes.size(); ++f) {
    if (forward.nodes[f].op != GraphOp::input) continue;
    const int index = std::get<InputAttr>(forward.nodes[f].attr).index;
    if (index < 0) continue;
    if (index >= static_cast<int>(input_node.size())) input_node.resize(index + 1, -1);
    input_node[index] = static_cast<int>(f);
  }
  std::vector<int> output_input(n, -1);  // the forward input node whose gradient node i is
  for (size_t k = 0; k < g.outputs.size() && k < b.wrt.size(); ++k)
    if (b.wrt[k] >= 0 && b.wrt[k] < static_cast<int>(input_node.size()) &&
        input_node[b.wrt[k]] >= 0)
      output_input[g.outputs[k]] = input_node[b.wrt[k]];
  // The operands of forward node `fwd` that forward node `target` is.
  const auto bits_of = [&](int fwd, int target) {
    uint64_t bits = 0;
    const auto& ins = forward.nodes[fwd].inputs;
    for (size_t j = 0; j < ins.size() && j < 64; ++j)
      if (ins[j] == target) bits |= uint64_t{1} << j;
    return bits;
  };
  std::vector<uint64_t> mask(n, 0);
  std::vector<int> frontier;
  std::vector<uint32_t> seen(n, 0);
  uint32_t stamp = 0;
  for (size_t i = n; i-- > 0;) {
    if (i < b.forward_of.size() && b.forward_of[i] >= 0) continue;  // the forward side
    const GradOrigin o = origin(i);
    if (o.forward < 0) continue;
    if (o.operand >= 0) {
      mask[i] = uint64_t{1} << std::min(o.operand, 63);
      continue;
    }
    bool terminal = true;
    for (int c : consumers[i])
      if (origin(c).forward == o.forward) terminal = false, mask[i] |= mask[c];
    if (!terminal) continue;
    // Downstream, breadth first, to the first VJP of one of this node's operands, within
    // kSearch nodes. A gradient meets its operand's VJP a few nodes on (at most 6 in the
    // examples, the 7 B LLaMA's 32 layers included); a search that finds none (an operand
    // whose VJP adds no node of its own, as a residual add's) would otherwise walk the rest
    // of the backward, once per layer: quadratic in depth. (`seen` is stamped per search,
    // not cleared: a graph has a terminal node or more per layer.)
    constexpr size_t kSearch = 64;
    frontier.assign(1, static_cast<int>(i));
    ++stamp;
    for (size_t at = 0; at < frontier.size() && at < kSearch && mask[i] == 0; ++at) {
      const int x = frontier[at];
      if (output_input[x] >= 0) mask[i] |= bits_of(o.forward, output_input[x]);
      for (int c : consumers[x]) {
        if (origin(c).forward >= 0) mask[i] |= bits_of(o.forward, origin(c).forward);
        if (seen[c] != stamp) seen[c] = stamp, frontier.push_back(c);
      }
    }
  }
  return mask;
}

}  // namespace

std::vector<int> replica_sources(const Backward& b, const Graph& forward) {
  std::vector<int> fwd_of(b.graph.nodes.size(), -1);
  for (size_t j = 0; j < b.graph.nodes.size() && j < b.forward_of.size(); ++j) {
    const int f = b.forward_of[j];
    if (f < 0) continue;
    if (f >= static_cast<int>(forward.nodes.size()) || forward.nodes[f].shape != b.graph.nodes[j].shape ||
        forward.nodes[f].dtype != b.graph.nodes[j].dtype)
      throw std::logic_error(fmt::format(
          "backward_cost: backward node %{} does not match forward node %{} (not a Backward of "
          "this graph)",
          j, f));
    fwd_of[j] = f;
  }
  return fwd_of;
}

std::vector<CostPhase> backward_phases(const Backward& b, const Graph& forward,
                                       const std::vector<bool>& weight_inputs) {
  const Graph& g = b.graph;
  const size_t n = g.nodes.size();
  // Which kinds of gradient output each node feeds (bit 1: a weight's, bit 2: another's).
  std::vector<uint8_t> feeds(n, 0);
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    const int input = k < b.wrt.size() ? b.wrt[k] : -1;
    const bool weight =
        input >= 0 && input < static_cast<int>(weight_inputs.size()) && weight_inputs[input];
    feeds[g.outputs[k]] |= weight ? 1 : 2;
  }
  for (size_t i = n; i-- > 0;)
    for (int in : g.nodes[i].inputs)
      feeds[in] |= feeds[i];

  const std::vector<uint64_t> masks = operand_masks(b, forward);
  std::vector<CostPhase> phases(n, CostPhase::input_grad);
  for (size_t i = 0; i < n; ++i) {
    const GradOrigin o = i < b.origin.size() ? b.origin[i] : GradOrigin{};
    if (i < b.forward_of.size() && b.forward_of[i] >= 0) {
      phases[i] = CostPhase::recompute;
    } else if (o.forward >= 0 && masks[i] != 0) {
      bool weight = true;
      const auto& ins = forward.nodes[o.forward].inputs;
      for (size_t j = 0; j < ins.size() && j < 64; ++j)
        if (masks[i] >> j & 1) weight = weight && is_weight(forward, ins[j], weight_inputs);
      phases[i] = weight ? CostPhase::weight_grad : CostPhase::input_grad;
    } else {
      phases[i] = feeds[i] == 1 ? CostPhase::weight_grad : CostPhase::input_grad;
    }
  }
  return phases;
}

BackwardCost backward_cost(const Backward& b, const Graph& forward,
                           const std::vector<bool>& weight_inputs) {
  BackwardCost c;
  c.phases = backward_phases(b, forward, weight_inputs);
  const GraphCost costs = cost(b.graph);
  for (size_t i = 0; i < b.graph.nodes.size(); ++i) {
    NodeCost nc = costs.nodes[i];
    if (nc.recompute_flops > 0 && c.phases[i] != CostPhase::recompute) {
      // A backward kernel that rebuilds forward values: that part is recomputation.
      NodeCost rebuilt;
      rebuilt.flops = rebuilt.recompute_flops = nc.recompute_flops;
      rebuilt.matmul_flops = rebuilt.recompute_matmul_flops = nc.recompute_matmul_flops;
      c.recompute += rebuilt;
      c.kernel_recompute += rebuilt;
      c.total += rebuilt;
      nc.flops -= nc.recompute_flops;
      nc.matmul_flops -= nc.recompute_matmul_flops;
      nc.recompute_flops = nc.recompute_matmul_flops = 0;
    }
    switch (c.phases[i]) {
      case CostPhase::recompute:
        c.recompute += nc;
        break;
      case CostPhase::weight_grad:
        c.weight_grad += nc;
        break;
      default:
        c.input_grad += nc;
        break;
    }
    c.total += nc;
  }
  // A cross-entropy head computing its gradients in the forward did this backward's work there.
  for (size_t f = 0; f < forward.nodes.size(); ++f) {
    const auto* a = std::get_if<CrossEntropyAttr>(&forward.nodes[f].attr);
    if (!a || !a->unit_grads) continue;
    const NodeCost nc = node_cost(forward, static_cast<int>(f));
    NodeCost grads;
    grads.flops = nc.gradient_flops;
    grads.matmul_flops = nc.gradient_matmul_flops;
    c.input_grad += grads;
    c.total += grads;
  }
  // Saved for backward: what the backward reads of the forward without rebuilding it (the
  // forward inputs it reads and the saved values), at the node that owns the memory.
  const std::vector<int> fwd_of = replica_sources(b, forward);
  std::vector<bool> saved(forward.nodes.size(), false);
  for (size_t j = 0; j < fwd_of.size(); ++j)
    if (fwd_of[j] >= 0 && b.graph.nodes[j].op == GraphOp::input)
      saved[source(forward, fwd_of[j], false)] = true;
  c.saved_bytes.assign(forward.nodes.size(), 0);
  for (size_t f = 0; f < forward.nodes.size(); ++f) {
    if (!saved[f]) continue;
    const GraphNode& n = forward.nodes[f];
    int64_t elements = 1;
    for (int64_t d : n.shape)
      elements *= d;
    c.saved_bytes[f] = elements * static_cast<int64_t>(element_size(n.dtype));
    c.saved_total += c.saved_bytes[f];
    // A head's dw made in the forward is w's gradient early, the ledger's gradients line.
    const auto* r = std::get_if<ResultAttr>(&n.attr);
    const bool early_dw = r && r->index == 2 &&
                          forward.nodes[n.inputs[0]].op == GraphOp::linear_cross_entropy;
    if (n.op != GraphOp::input && !early_dw) c.saved_activations += c.saved_bytes[f];
  }
  return c;
}

}  // namespace ein
