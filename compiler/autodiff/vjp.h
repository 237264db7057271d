// What the VJP rules share (autodiff.cpp's differentiate and vjp_rules.cpp's rules): the
// builder that appends to the backward graph, the view a rule gets of one forward node, and
// the rule table's lookup. Internal to compiler/autodiff/.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "compiler/autodiff/autodiff.h"
#include "compiler/graph/graph_builder.h"

namespace ein {

/// The shared GraphBuilder appending to the backward graph, each node tagged (in
/// Backward::origin) with the VJP it serves, plus the few shapes VJP rules share.
class VjpBuilder : public GraphBuilder {
 public:
  VjpBuilder(Backward& b, std::string origin) : GraphBuilder(std::move(origin)) {
    observe([&b, this](int) { b.origin.push_back(at); });
  }
  VjpBuilder(const VjpBuilder&) = delete;
  VjpBuilder& operator=(const VjpBuilder&) = delete;

  GradOrigin at;  ///< the origin given to nodes added now

  /// A map node: `body(k)` builds the scalar DAG (loads read `inputs` in order); input i's
  /// dim d is output dim axes[i][d].
  template <class F>
  int map(std::vector<int> inputs, std::vector<std::vector<int>> axes, Shape shape, DType dtype,
          const char* name, F&& body) {
    auto k = map_kernel(name);
    k->body = k->result = body(*k);
    return GraphBuilder::map(std::move(inputs), std::move(axes), std::move(shape), dtype,
                             std::move(k));
  }

  /// Sums x over the dims flagged in `reduced` (kept dims stay in order); x when none is.
  int reduce_sum(int x, const std::vector<bool>& reduced) {
    if (std::none_of(reduced.begin(), reduced.end(), [](bool r) { return r; })) return x;
    return reduce(x, Reduction::sum, reduced);
  }

  /// A tensor of zeros (the gradient of an input no output depends on).
  int zeros(const Shape& shape, DType dtype) {
    const int z = map({}, {}, shape, dtype, "zeros", [](Kernel& k) { return k.constant(0); });
    zero_nodes_.insert(z);
    return z;
  }

  /// a + b elementwise: two contributions to one value's gradient. Contributions that are
  /// zero-padded pieces along one dim with pieces that do not overlap (the gradients of
  /// slices, vjp_slice) are put side by side instead: a weight read as three column slices (a
  /// fused q|k|v projection) gets one concat of the three gradients, not three padded copies
  /// summed.
  int sum(int a, int b);

  /// The nonzero pieces of `x` along `dim`, as (start, node): a concat along `dim` of whole
  /// dims whose zero parts are zeros() nodes, or x itself as one piece.
  std::vector<std::pair<int64_t, int>> nonzero_pieces(int x, int64_t dim);

  /// a + b as one concat of their nonzero pieces (zeros between), when a or b is a concat
  /// with zero parts and no piece of one overlaps a piece of the other; else nullopt.
  std::optional<int> disjoint_sum(int a, int b);

  /// x (dtype and shape of node `like`): reshaped and cast when they differ.
  int conform(int x, const GraphNode& like) {
    if (node(x).dtype != like.dtype) x = cast(x, like.dtype);
    if (node(x).shape != like.shape) x = reshape(x, like.shape);
    return x;
  }

 private:
  std::set<int> zero_nodes_;  ///< the nodes zeros() made
};

/// What a VJP rule sees: the forward node (replicated at the same id in the backward graph),
/// its cotangent, and which operands need a gradient.
struct Vjp {
  VjpBuilder& b;
  const Graph& forward;
  int id;                    ///< the forward node, also its replica
  const GraphNode& n;        ///< the forward node
  int g;                     ///< its cotangent
  std::vector<bool> needed;  ///< per operand
  std::vector<int> grads;    ///< per operand: the gradient node, or -1

  /// Operand i's forward node (stable: the backward graph's node vector grows as rules run).
  const GraphNode& in(size_t i) const { return forward.nodes[n.inputs[i]]; }
  void set(size_t operand, int grad) { grads[operand] = grad; }
};

/// A VJP rule: sets the gradient of each operand `v.needed` flags (or leaves it -1).
using Rule = void (*)(Vjp&);

/// The rule of `op`; std::logic_error for ops that only the fusion pass makes.
Rule rule_for(GraphOp op);

}  // namespace ein
