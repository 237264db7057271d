// Reverse-mode autodiff on the Graph IR. The backward graph starts as a replica of the forward
// graph (so VJPs can read any forward value), gains one cotangent input per forward output, and
// then, walking the forward nodes in reverse, each node's cotangent goes through its op's VJP
// rule (vjp_rules.cpp, one rule per op of ops.def). Contributions to one value are summed.
// Then the recompute policy turns the replicas the forward should save into inputs
// (save_forward_values), and dead replica nodes are dropped: only the forward values some VJP
// reads stay, saved or rebuilt.
#include "compiler/autodiff/autodiff.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "compiler/autodiff/vjp.h"

namespace ein {
namespace {

/// Under Recompute::automatic, at most this many elementwise values nobody saves are rebuilt
/// on the way to one saved value that is rebuilt instead of saved (save_forward_values, 2.).
constexpr int kMaxRebuiltChain = 8;

/// Per forward node: whether it is a block's checkpoint, a value of block k (`blocks[i] == k`,
/// k >= 0) that a node outside block k reads or the graph returns. A view or reshape that is a
/// checkpoint makes its operand one too (the memory is the operand's).
std::vector<char> block_checkpoints(const Graph& forward, const std::vector<int>& blocks) {
  const int nf = static_cast<int>(forward.nodes.size());
  const auto block = [&](int i) { return i < static_cast<int>(blocks.size()) ? blocks[i] : -1; };
  std::vector<char> checkpoint(nf, 0);
  for (int o : forward.outputs)
    checkpoint[o] = 1;
  for (int i = nf; i-- > 0;) {  // a node's readers come after it: its flag is final here
    const GraphNode& n = forward.nodes[i];
    const bool alias = n.op == GraphOp::view || n.op == GraphOp::reshape ||
                       n.op == GraphOp::permute || n.op == GraphOp::slice;
    for (int in : n.inputs)
      if (block(in) >= 0 && (block(in) != block(i) || (alias && checkpoint[i])))
        checkpoint[in] = 1;
  }
  return checkpoint;
}

bool rebuilt_free(const GraphNode& n) {
  // Views cost nothing, and a map of no input is a constant (zeros, a mask from indices).
  return n.op == GraphOp::view || n.op == GraphOp::reshape || n.op == GraphOp::permute ||
         n.op == GraphOp::slice || (n.op == GraphOp::map && n.inputs.empty());
}

/// Decides, for each forward value the VJPs read, whether the forward saves it or the backward
/// rebuilds it, and turns each saved replica into an input of the backward graph (in forward
/// order, so Backward::saved is sorted). The replicas nobody reads any more die in remove_dead.
///  1. Demand, in reverse: a replica read by a live VJP node is demanded; a demanded input is
///     kept (it is an input anyway), a demanded view or constant is rebuilt and demands its
///     operand, anything else is saved.
///     Under Recompute::blocks a demanded value of a block (`blocks[i] >= 0`) that no other
///     block and no code outside the blocks reads is rebuilt too, whatever its op: each block
///     keeps only the values it hands on (its checkpoints, as torch.utils.checkpoint keeps a
///     block's inputs) and is recomputed from them when its backward runs.
///  2. Recompute::automatic and blocks, in forward order: a saved map or cast whose operands
///     are all available (inputs, saved, or rebuilt from those through views), or are maps and
///     casts of at least 32 bits computable from available values (at most kMaxRebuiltChain of
///     them), is rebuilt instead, with that chain. That drops its bytes from the saved set and
///     saves nothing new, so the saved bytes and the step's peak can only go down; the price
///     is its elementwise work, which the fusion pass folds into the gradient kernels that
///     read it. A parameter's cast to the compute dtype (bf16, f16) stays saved: its readers
///     are contractions, which no fusion folds it into (unless `save_parameter_casts` is
///     false: ZeRO 3 fetches the parameter again instead).
///  3. Recompute::automatic with an `activation_budget` below 1 (the fraction of 2.'s saved
///     bytes the forward may save, as torch.compile's activation_memory_budget): a saved value
///     that contractions rebuild from available values (a matmul's output, or the maps after
///     it: a bias added, a residual summed), through at most kMaxRebuiltChain nodes, is
///     rebuilt instead, the fewest contraction FLOPs per saved byte first, until the rest fits
///     or no such value is left. Attention and cross-entropy outputs and reductions stay
///     saved. Unlike 2., 16-bit values may be on the way or read (a bf16 step's activations
///     are all 16-bit): no statistic is rebuilt, so nothing cancels, and a rebuilt value
///     differs from the forward's at most by the 16-bit rounding the forward saved it with.
void save_forward_values(Backward& b, const Graph& forward, int n_inputs, Recompute policy,
                         const std::vector<int>& blocks, bool save_parameter_casts,
                         double activation_budget) {
  Graph& g = b.graph;
  const int nf = static_cast<int>(forward.nodes.size());
  const std::vector<char> live = read_by_outputs(g);
  enum Fate : uint8_t { unused, kept, saved, rebuilt };
  std::vector<Fate> fate(nf, unused);
  std::vector<char> demanded(nf, 0);
  for (size_t i = nf; i < g.nodes.size(); ++i)
    if (live[i])
      for (int in : g.nodes[i].inputs)
        if (in < nf) demanded[in] = 1;
  const std::vector<char> checkpoint = block_checkpoints(forward, blocks);
  const auto inside_block = [&](int i) {
    return policy == Recompute::blocks && i < static_cast<int>(blocks.size()) && blocks[i] >= 0 &&
           !checkpoint[i];
  };
  for (int i = nf; i-- > 0;) {
    if (!demanded[i]) continue;
    const GraphNode& n = g.nodes[i];
    if (n.op == GraphOp::input) {
      fate[i] = kept;
    } else if (rebuilt_free(n) || inside_block(i)) {
      fate[i] = rebuilt;
      for (int in : n.inputs)
        demanded[in] = 1;
    } else {
      fate[i] = saved;
    }
  }
  if (policy == Recompute::automatic || policy == Recompute::blocks) {
    // Whether node x is there in the backward without saving anything new; a view chain down
    // to an available node is rebuilt on the way.
    const auto available = [&](int x) {
      std::vector<int> chain;
      while (fate[x] == unused && rebuilt_free(g.nodes[x]) && !g.nodes[x].inputs.empty()) {
        chain.push_back(x);
        x = g.nodes[x].inputs[0];
      }
      const bool ok = fate[x] != unused || (g.nodes[x].op == GraphOp::input) ||
                      (g.nodes[x].op == GraphOp::map && g.nodes[x].inputs.empty());
      if (ok) {
        if (fate[x] == unused) fate[x] = g.nodes[x].op == GraphOp::input ? kept : rebuilt;
        for (int c : chain)
          fate[c] = rebuilt;
      }
      return ok;
    };
    // An operand the backward reads as the forward did: a graph input, a constant, or a saved
    // value of at least 32 bits. A 16-bit saved value may have been an f32 value inside a
    // forward kernel, rounded only for saving: rebuilding from it would not reproduce the
    // forward (LayerNorm's variance E[x²] - E[x]² from f16 moments cancels to 0 or below).
    const auto exact = [&](int x) {
      if (!available(x)) return false;
      while (rebuilt_free(g.nodes[x]) && !g.nodes[x].inputs.empty())
        x = g.nodes[x].inputs[0];
      return fate[x] != saved || element_size(g.nodes[x].dtype) >= 4 ||
             !kFloatDTypes.contains(g.nodes[x].dtype);
    };
    // Per forward node: rebuilt through a contraction (3.), or from such a value.
    std::vector<char> heavy(nf, 0);
    // Whether x is there exactly, or is an elementwise value nobody saves (a map or cast of at
    // least 32 bits) computable from such values through at most `budget` more of them; the
    // nodes that would be rebuilt for it go to `chain`. A LayerNorm's output
    // ((x - mu) * rsqrt(var + eps) * weight + bias) is four maps from x and two saved row
    // statistics: x is saved anyway (the LayerNorm's VJP reads it), so the output need not be.
    // With `contractions` (3.), contractions and 16-bit values may be on the way too, and any
    // available value read, but not a value a contraction rebuilds: one rebuilt from another
    // would live from the first's readers to the last's (rebuilding a residual stream from the
    // first block's input holds it all).
    const auto rebuildable = [&](auto&& self, int x, int& budget, std::vector<int>& chain,
                                 bool contractions) -> bool {
      if (contractions && heavy[x]) return false;
      if (contractions ? available(x) : exact(x)) return true;
      const GraphNode& n = g.nodes[x];
      if (contractions && fate[x] == unused && rebuilt_free(n) && !n.inputs.empty()) {
        chain.push_back(x);  // a view of a value rebuilt on the way (a contraction's operand)
        return self(self, n.inputs[0], budget, chain, contractions);
      }
      const bool op_ok = n.op == GraphOp::map || n.op == GraphOp::cast ||
                         (contractions && n.op == GraphOp::contract);
      if (fate[x] != unused || !op_ok ||
          (!contractions && kFloatDTypes.contains(n.dtype) && element_size(n.dtype) < 4) ||
          --budget < 0)
        return false;
      chain.push_back(x);
      return std::all_of(n.inputs.begin(), n.inputs.end(),
                         [&](int in) { return self(self, in, budget, chain, contractions); });
    };
    // A parameter read in the compute dtype (a cast of an input that gets a gradient, e.g. an
    // f32 weight read as bf16) stays saved: the contractions of the backward read it
    // materialised, so rebuilding it would be one more pass over the f32 weight every step,
    // to spare 2 bytes per weight element (PyTorch's autocast caches these casts too).
    const auto parameter_cast = [&](const GraphNode& n) {
      if (!save_parameter_casts || n.op != GraphOp::cast || n.inputs.size() != 1) return false;
      const GraphNode& in = g.nodes[n.inputs[0]];
      if (in.op != GraphOp::input) return false;
      const int index = std::get<InputAttr>(in.attr).index;
      return std::find(b.wrt.begin(), b.wrt.end(), index) != b.wrt.end();
    };
    for (int i = 0; i < nf; ++i) {
      const GraphNode& n = g.nodes[i];
      if (fate[i] != saved || (n.op != GraphOp::map && n.op != GraphOp::cast)) continue;
      if (parameter_cast(n)) continue;
      int budget = kMaxRebuiltChain;
      std::vector<int> chain;
      if (!std::all_of(n.inputs.begin(), n.inputs.end(),
                       [&](int in) { return rebuildable(rebuildable, in, budget, chain, false); }))
        continue;
      fate[i] = rebuilt;
      for (int c : chain)
        fate[c] = rebuilt;
    }
    if (policy == Recompute::automatic && activation_budget < 1) {
      // 3. The contractions that rebuild a saved value (with the maps between), the fewest
      // FLOPs per byte first, until the saved bytes fit the budget.
      const auto bytes = [&](int i) {
        const Shape& shape = g.nodes[i].shape;
        return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>()) *
               static_cast<int64_t>(element_size(g.nodes[i].dtype));
      };
      // The contraction FLOPs that rebuild saved value i from what the backward has, or -1.
      const auto rebuild_flops = [&](int i, std::vector<int>& chain) -> int64_t {
        const GraphNode& n = g.nodes[i];
        const bool op_ok =
            n.op == GraphOp::map || n.op == GraphOp::cast || n.op == GraphOp::contract;
        if (fate[i] != saved || !op_ok || parameter_cast(n)) return -1;
        int budget = kMaxRebuiltChain;
        chain = {i};
        if (!std::all_of(n.inputs.begin(), n.inputs.end(),
                         [&](int in) { return rebuildable(rebuildable, in, budget, chain, true); }))
          return -1;
        std::sort(chain.begin(), chain.end());
        chain.erase(std::unique(chain.begin(), chain.end()), chain.end());
        int64_t flops = 0;
        for (int c : chain)
          if (g.nodes[c].op == GraphOp::contract) flops += contract_flops(g, g.nodes[c]);
        return flops;
      };
      struct Candidate {
        int node;
        int64_t flops, bytes;
      };
      std::vector<Candidate> candidates;
      int64_t kept_bytes = 0;
      for (int i = 0; i < nf; ++i) {
        if (fate[i] != saved) continue;
        kept_bytes += bytes(i);
        std::vector<int> chain;
        if (const int64_t flops = rebuild_flops(i, chain); flops > 0)
          candidates.push_back({i, flops, bytes(i)});
      }
      // Fewest FLOPs per byte; of equals the larger value, then the later one.
      std::sort(candidates.begin(), candidates.end(), [](const Candidate& x, const Candidate& y) {
        const double xy = static_cast<double>(x.flops) * static_cast<double>(y.bytes);
        const double yx = static_cast<double>(y.flops) * static_cast<double>(x.bytes);
        if (xy != yx) return xy < yx;
        return x.bytes != y.bytes ? x.bytes > y.bytes : x.node > y.node;
      });
      const double allowed = activation_budget * static_cast<double>(kept_bytes);
      for (const Candidate& c : candidates) {
        if (static_cast<double>(kept_bytes) <= allowed) break;
        std::vector<int> chain;  // again: values rebuilt since may have changed it
        if (rebuild_flops(c.node, chain) < 0) continue;
        for (int x : chain)
          fate[x] = rebuilt, heavy[x] = 1;
        for (int j = c.node + 1; j < nf; ++j)  // values rebuilt from it (2.) are heavy too
          if (fate[j] == rebuilt && !heavy[j])
            for (int in : g.nodes[j].inputs)
              if (heavy[in]) heavy[j] = 1;
        kept_bytes -= c.bytes;
      }
    }
  }
  b.recompute = policy;
  b.saved_base = n_inputs + static_cast<int>(forward.outputs.size());
  for (int i = 0; i < nf; ++i) {
    if (fate[i] != saved) continue;
    GraphNode n;
    n.op = GraphOp::input;
    n.shape = g.nodes[i].shape;
    n.dtype = g.nodes[i].dtype;
    n.attr = InputAttr{b.saved_base + static_cast<int>(b.saved.size())};
    g.nodes[i] = std::move(n);
    b.saved.push_back(i);
  }
}

/// Renumbers `b`'s nodes into the order `order` (new position -> old id).
void reorder(Backward& b, const std::vector<int>& order) {
  std::vector<int> id(b.graph.nodes.size(), -1);
  for (size_t k = 0; k < order.size(); ++k)
    id[order[k]] = static_cast<int>(k);
  Graph out;
  out.origin = b.graph.origin;
  std::vector<GradOrigin> origin;
  std::vector<int> forward_of;
  for (int old : order) {
    GraphNode n = std::move(b.graph.nodes[old]);
    for (int& in : n.inputs)
      in = id[in];
    out.add(std::move(n));
    origin.push_back(b.origin[old]);
    forward_of.push_back(b.forward_of[old]);
  }
  for (int o : b.graph.outputs)
    out.outputs.push_back(id[o]);
  b.graph = std::move(out);
  b.origin = std::move(origin);
  b.forward_of = std::move(forward_of);
}

/// Moves each rebuilt forward value to just before its first reader (inputs stay in front):
/// the executor runs nodes in order, so a value rebuilt at the start of the backward would
/// live through all of it. Order: by (anchor, old id), where a node's anchor is its own id
/// for VJP nodes and inputs, and the least anchor of its readers for a rebuilt value; inputs
/// of a node have smaller anchors or equal anchors and smaller ids, so the order stays
/// topological.
void sink_rebuilt(Backward& b) {
  const Graph& g = b.graph;
  const int n = static_cast<int>(g.nodes.size());
  std::vector<std::vector<int>> readers(n);
  for (int j = 0; j < n; ++j)
    for (int in : g.nodes[j].inputs)
      readers[in].push_back(j);
  std::vector<int> anchor(n);
  std::iota(anchor.begin(), anchor.end(), 0);
  for (int i = n; i-- > 0;) {
    if (b.forward_of[i] < 0 || g.nodes[i].op == GraphOp::input) continue;
    int first = n;
    for (int j : readers[i])
      first = std::min(first, anchor[j]);
    if (first < n) anchor[i] = first;
  }
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int x, int y) { return anchor[x] < anchor[y]; });
  reorder(b, order);
}

/// Drops nodes no output needs and renumbers the rest (origins follow).
void remove_dead(Backward& b, int forward_nodes) {
  Graph& g = b.graph;
  const std::vector<char> live = read_by_outputs(g);
  std::vector<int> id(g.nodes.size(), -1);
  Graph out;
  out.origin = g.origin;
  std::vector<GradOrigin> origin;
  b.replicated = 0;
  b.forward_of.clear();
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!live[i]) continue;
    GraphNode n = std::move(g.nodes[i]);
    for (int& in : n.inputs)
      in = id[in];
    id[i] = out.add(std::move(n));
    origin.push_back(b.origin[i]);
    const bool forward_side = static_cast<int>(i) < forward_nodes;
    b.forward_of.push_back(forward_side ? static_cast<int>(i) : -1);
    if (forward_side) ++b.replicated;
  }
  for (int o : g.outputs)
    out.outputs.push_back(id[o]);
  b.graph = std::move(out);
  b.origin = std::move(origin);
}

/// Which forward values carry a gradient: float values depending on a flagged input.
std::vector<bool> active_values(const Graph& forward, const std::vector<bool>& needs_grad) {
  std::vector<bool> active(forward.nodes.size(), false);
  for (size_t i = 0; i < forward.nodes.size(); ++i) {
    const GraphNode& n = forward.nodes[i];
    const int index = n.op == GraphOp::input ? std::get<InputAttr>(n.attr).index : -1;
    if (n.op == GraphOp::input && (index < 0 || index >= static_cast<int>(needs_grad.size())))
      throw std::logic_error("differentiate: needs_grad has fewer flags than the graph has inputs");
    if (!kFloatDTypes.contains(n.dtype)) continue;
    if (n.op == GraphOp::input) active[i] = needs_grad[index];
    for (int in : n.inputs)
      active[i] = active[i] || active[in];
  }
  return active;
}

/// Makes each fused cross-entropy head that carries a gradient compute its gradients in the
/// forward, from the logits it makes anyway (graph.h's CrossEntropyAttr): its unit_grads set
/// and its results dh (1) and dw (2) appended, for its VJP to hand to the grad node. Extends
/// `active` over the new nodes. Not where the backward would rebuild the head rather than
/// read what the forward saved (Recompute::full, or a head inside a checkpointed block): the
/// forward's products would be wasted there.
void heads_with_gradients(Graph& forward, std::vector<bool>& active, Recompute recompute,
                          const std::vector<int>& blocks) {
  if (recompute == Recompute::full) return;
  const size_t n = forward.nodes.size();
  for (size_t i = 0; i < n; ++i) {
    if (forward.nodes[i].op != GraphOp::linear_cross_entropy || !active[i]) continue;
    if (recompute == Recompute::blocks && i < blocks.size() && blocks[i] >= 0) continue;
    forward.nodes[i].attr = CrossEntropyAttr{true};
    for (int index : {1, 2}) {
      GraphNode r;
      r.op = GraphOp::result;
      r.inputs = {static_cast<int>(i)};
      r.shape = forward.nodes[forward.nodes[i].inputs[index - 1]].shape;
      r.dtype = forward.nodes[i].dtype;
      r.attr = ResultAttr{index};
      forward.nodes.push_back(std::move(r));
      active.push_back(true);
    }
  }
}

}  // namespace

Backward differentiate(const Graph& given, const std::vector<bool>& needs_grad, Recompute recompute,
                       const std::vector<int>& blocks, bool save_parameter_casts,
                       double activation_budget) {
  Backward b;
  b.forward = given;
  std::vector<bool> active = active_values(given, needs_grad);
  heads_with_gradients(b.forward, active, recompute, blocks);
  const Graph& forward = b.forward;
  const int n_fwd = static_cast<int>(forward.nodes.size());
  // Inputs: the node of each forward input (active_values() checked their indices).
  std::vector<int> input_node(needs_grad.size(), -1);
  for (int i = 0; i < n_fwd; ++i)
    if (forward.nodes[i].op == GraphOp::input)
      input_node[std::get<InputAttr>(forward.nodes[i].attr).index] = i;

  VjpBuilder builder(b, forward.origin);
  for (const GraphNode& n : forward.nodes)
    builder.add(n.op, n.inputs, n.shape, n.dtype, n.attr);
  const int n_inputs = static_cast<int>(needs_grad.size());
  std::vector<int> grad(n_fwd, -1);
  auto accumulate = [&](int node, int g) {
    if (g < 0) return;
    builder.at = {builder.at.forward, -1};
    grad[node] = grad[node] < 0 ? g : builder.sum(grad[node], g);
  };
  for (size_t k = 0; k < forward.outputs.size(); ++k) {
    const GraphNode& out = forward.nodes[forward.outputs[k]];
    builder.at = {};
    const int cotangent = builder.input(out.shape, out.dtype, n_inputs + static_cast<int>(k));
    if (active[forward.outputs[k]]) accumulate(forward.outputs[k], cotangent);
  }
  for (int i = n_fwd; i-- > 0;) {
    const GraphNode& n = forward.nodes[i];
    if (grad[i] < 0 || !active[i] || n.op == GraphOp::input) continue;
    Vjp v{builder, forward, i, n, grad[i], {}, std::vector<int>(n.inputs.size(), -1)};
    for (int in : n.inputs)
      v.needed.push_back(active[in]);
    builder.at = {i, -1};
    rule_for(n.op)(v);
    for (size_t j = 0; j < n.inputs.size(); ++j) {
      if (v.grads[j] < 0) continue;
      builder.at = {i, static_cast<int>(j)};
      accumulate(n.inputs[j], builder.conform(v.grads[j], forward.nodes[n.inputs[j]]));
    }
  }
  for (int i = 0; i < n_inputs; ++i) {
    if (!needs_grad[i]) continue;
    const int node = input_node[i];
    if (node < 0) throw std::logic_error(fmt::format("differentiate: input {} has no node", i));
    if (!kFloatDTypes.contains(forward.nodes[node].dtype)) continue;
    builder.at = {};
    int g = grad[node];
    if (g < 0) g = builder.zeros(forward.nodes[node].shape, forward.nodes[node].dtype);
    b.wrt.push_back(i);
    builder.output(g);
  }
  b.graph = builder.take();
  if (recompute != Recompute::full)
    save_forward_values(b, forward, n_inputs, recompute, blocks, save_parameter_casts,
                        activation_budget);
  remove_dead(b, n_fwd);
  sink_rebuilt(b);
  verify(b.graph);
  return b;
}

}  // namespace ein
