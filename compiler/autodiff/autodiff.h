// Reverse-mode autodiff on the Graph IR. One vector-Jacobian-product rule per op, kept in a
// table keyed by GraphOp (autodiff.cpp), and one derivative rule per scalar op for the bodies
// of map nodes (scalar_grad.cpp). The result is an ordinary Graph: the executor runs it, the
// cost model counts it, the fusion pass fuses it.
#pragma once

#include <vector>

#include "compiler/graph/graph.h"

namespace ein {

/// Where a node of a backward graph came from.
struct GradOrigin {
  int forward = -1;  ///< the forward node whose VJP made it (-1: a forward node's replica)
  int operand = -1;  ///< which operand's gradient it helps compute (-1: glue, e.g. accumulation)
};

/// The backward of a forward graph.
///  - inputs: the forward graph's inputs (same indices), then one cotangent per forward output
///    (index `forward inputs + k` for output k; same shape and dtype as that output);
///  - outputs: one gradient per entry of `wrt`, shaped and typed like that forward input.
/// Nodes [0, replicated) recompute the forward values the VJPs read (dead ones removed);
/// later nodes are the VJPs, with `origin` telling which forward node and operand each serves.
struct Backward {
  Graph graph;
  std::vector<int> wrt;            ///< forward input indices, in output order
  std::vector<GradOrigin> origin;  ///< one per node of `graph`
  int replicated = 0;
};

/// The backward graph of `forward` for the inputs flagged in `needs_grad` (one flag per forward
/// input). Inputs that need no gradient cost nothing: no VJP is built for an operand whose
/// gradient nobody needs. Integer and bool inputs get no gradient. Throws RuntimeError for an op
/// that has no derivative (e.g. reduce[any]).
Backward differentiate(const Graph& forward, const std::vector<bool>& needs_grad);

}  // namespace ein
