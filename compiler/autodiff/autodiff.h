// Reverse-mode autodiff on the Graph IR. One vector-Jacobian-product rule per op, kept in a
// table keyed by GraphOp (vjp_rules.cpp), and one derivative rule per scalar op for the bodies
// of map nodes (scalar_grad.cpp). The result is an ordinary Graph: the executor runs it, the
// cost model counts it, the fusion pass fuses it.
#pragma once

#include <vector>

#include <ein/autograd.h>

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
///  - then, unless the policy is Recompute::full, one input per saved forward value (index
///    `saved_base + k` for saved[k]): the forward returns these besides its outputs.
/// The forward side of the graph (`forward_of[j] >= 0`) is the inputs the VJPs read, the saved
/// values, and the forward values rebuilt from them (views, constants, and under
/// Recompute::automatic cheap elementwise maps; under Recompute::full every forward value the
/// VJPs read). Inputs come first; each rebuilt value sits just before its first reader, so it
/// lives only while the VJPs that need it run. The other nodes are the VJPs, with `origin`
/// telling which forward node and operand each serves.
struct Backward {
  /// The forward graph the ids here refer to (forward_of, saved): the one differentiate() was
  /// given, except that a fused cross-entropy head it differentiates computes its gradients
  /// in the forward (graph.h's CrossEntropyAttr), their two `result` nodes appended. Run
  /// this one, with `saved` as extra outputs, to feed the backward.
  Graph forward;
  Graph graph;
  std::vector<int> wrt;            ///< forward input indices, in output order
  std::vector<GradOrigin> origin;  ///< one per node of `graph`
  std::vector<int> forward_of;     ///< per node: the forward node it keeps or rebuilds, or -1
  int replicated = 0;              ///< how many nodes have forward_of >= 0
  Recompute recompute = Recompute::full;  ///< the policy that chose `saved`
  std::vector<int> saved;  ///< forward node ids the backward reads as inputs, in forward order
  int saved_base = 0;      ///< the input index of saved[0]: forward inputs + forward outputs
};

/// The backward graph of `forward` for the inputs flagged in `needs_grad` (one flag per forward
/// input). Inputs that need no gradient cost nothing: no VJP is built for an operand whose
/// gradient nobody needs. Integer and bool inputs get no gradient. Throws RuntimeError for an op
/// that has no derivative (e.g. reduce[any]). `recompute` decides which forward values become
/// saved inputs (include/ein/autograd.h's Recompute); contractions, reductions, gathers and
/// concats are saved under `none` and `automatic`. Under `blocks`, `blocks` gives per forward
/// node the block (a module of a list, e.g. a GPT's `blocks[i]`) it belongs to, -1 for none:
/// a block saves only the values other code reads and is recomputed in its backward.
/// `save_parameter_casts`: under automatic (and outside blocks), a parameter's cast to the
/// compute dtype (an input that gets a gradient, read as bf16 or f16) is saved rather than
/// cast again in the backward; false under ZeRO 3, whose backward fetches a sharded parameter
/// again instead of holding the whole model's casts through the step.
/// `activation_budget` (0 to 1; 1: off), under automatic: the fraction of the plan's saved
/// bytes the forward may save; contractions rebuild the rest in the backward, the fewest FLOPs
/// per byte first (autodiff.cpp's save_forward_values, 3.).
Backward differentiate(const Graph& forward, const std::vector<bool>& needs_grad,
                       Recompute recompute = Recompute::full, const std::vector<int>& blocks = {},
                       bool save_parameter_casts = true, double activation_budget = 1);

}  // namespace ein
