// The cost model on the Graph IR: per node FLOPs (2 per multiply-add), bytes read and written,
// arithmetic intensity, one rule per GraphOp in a table keyed by the op (cost_model.cpp). It
// counts what the graph asks for, statically, from shapes and dtypes (assuming contiguous graph
// inputs where a reshape's view-or-copy depends on strides); it times nothing. The runtime
// counters (executed_cost.h) charge what actually ran. Conventions: docs/cost_model.md.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "compiler/graph/graph.h"

namespace ein {

/// The cost of one node, or a sum of them. FLOPs follow kFlopConvention ("2 per multiply-add");
/// matmul_flops is the contractions' part of `flops` (what torch's FlopCounterMode counts).
/// Bytes count every tensor a node reads once and the tensor it writes once.
struct NodeCost {
  int64_t flops = 0;          ///< all FLOPs of the node
  int64_t matmul_flops = 0;   ///< FLOPs of contractions (a subset of flops)
  int64_t bytes_read = 0;     ///< bytes of the inputs the node reads
  int64_t bytes_written = 0;  ///< bytes of the result the node writes (0 for views)
  /// The part of `flops` (and of `matmul_flops`) that rebuilds forward values inside a backward
  /// kernel: a fused attention's or cross-entropy's backward recomputes its logits tile by
  /// tile. Costs by phase (backward_cost.h, charges.h) count it as recomputation, not as
  /// gradient work, as they count a rebuilt forward node.
  int64_t recompute_flops = 0;
  int64_t recompute_matmul_flops = 0;
  /// The part of `flops` (and of `matmul_flops`) that a forward kernel spends on gradients: a
  /// cross-entropy head computing dh and dw from the logits it makes anyway (graph.h's
  /// CrossEntropyAttr). Costs by phase count it as input-gradient work, as they count the
  /// backward kernel that did it before, so the forward/backward split is the model's.
  int64_t gradient_flops = 0;
  int64_t gradient_matmul_flops = 0;

  /// FLOPs per byte moved; 0 when nothing moves.
  double intensity() const;
  /// Adds another cost.
  NodeCost& operator+=(const NodeCost& other);
  /// Equal when every count is.
  bool operator==(const NodeCost&) const = default;
};

/// How node_cost() charges a reshape, which is a view or a copy depending on its input's strides.
enum class ReshapeLayout : uint8_t {
  analyse,  ///< a view when it provably is one with contiguous graph inputs, else a copy
  view,     ///< free (the executor returned a view)
  copy,     ///< its bytes (the executor copied)
};

/// The cost of node `id` of `graph` (ReshapeLayout::analyse walks the graph up to `id`).
NodeCost node_cost(const Graph& graph, int id, ReshapeLayout reshape = ReshapeLayout::analyse);

/// The strides (in elements) of each node's value up to node `last` as the executor makes it
/// (mirrors execute.cpp's rules), when graph input i has the strides `input_strides[i]`
/// (nullopt: unknown), contiguous past the span's end; nullopt where they depend on run-time
/// choices (a contraction may return a permuted view; a cast keeps its input's layout).
std::vector<std::optional<Shape>> static_strides(
    const Graph& graph, int last, std::span<const std::optional<Shape>> input_strides = {});

/// FLOPs of one Kernel IR kernel over `domain` (the map and fused rules): each arithmetic
/// scalar node once per point it is evaluated at, plus one per point per reduction stage.
int64_t kernel_flops(const Kernel& kernel, const Shape& domain);

/// Per-node costs and their sum.
struct GraphCost {
  std::vector<NodeCost> nodes;  ///< one per graph node
  NodeCost total;               ///< the sum over nodes
};

/// The cost of every node of `graph` and the total.
GraphCost cost(const Graph& graph);

/// A text table: the convention, then one row per node (id, op, shape, FLOPs, matmul FLOPs,
/// bytes read, written, intensity), then the total.
std::string format_cost(const Graph& graph, const GraphCost& cost);

}  // namespace ein
