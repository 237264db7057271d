// The cost of a backward graph, from the nodes autodiff actually built (an operand that needs
// no gradient has no VJP nodes, so it costs nothing), split into the work that yields input
// (activation) gradients, weight gradients and forward recomputation; and the bytes of the
// forward values the VJPs read (saved for backward). It classifies; node costs come from
// cost_model.h.
#pragma once

#include <cstdint>
#include <vector>

#include <ein/flop_counter.h>

#include "compiler/autodiff/autodiff.h"
#include "compiler/cost/cost_model.h"

namespace ein {

/// A backward graph's cost by phase, and what it keeps alive from the forward pass.
struct BackwardCost {
  NodeCost input_grad;   ///< VJP work for operands that are not weights (activations, inputs)
  NodeCost weight_grad;  ///< VJP work for operands that trace back to a weight input
  NodeCost recompute;    ///< forward values the backward rebuilds (Backward's replicas)
  /// The part of `recompute` done inside fused backward kernels, whatever the plan: a fused
  /// attention's or cross-entropy's backward rebuilds its logits tile by tile instead of
  /// reading them saved (FlashAttention's trade). The rest is the plan's replicas.
  NodeCost kernel_recompute;
  NodeCost total;        ///< the sum of the three
  std::vector<CostPhase> phases;     ///< per backward node (for execute()'s phase vector)
  std::vector<int64_t> saved_bytes;  ///< per forward node: bytes of its value the VJPs read
  int64_t saved_total = 0;           ///< sum of saved_bytes
  /// The part of saved_total that is not graph inputs, nor a cross-entropy head's dw made in
  /// the forward (graph.h's CrossEntropyAttr: a weight's gradient, made early).
  int64_t saved_activations = 0;
};

/// The phase of every node of `backward` (a Backward of `forward`; `weight_inputs` flags the
/// forward inputs that are weights). Steps:
///   1. the forward side (Backward::forward_of >= 0) is recompute (forward values rebuilt for
///      the VJPs; the inputs and saved values among them cost nothing);
///   2. a VJP node of forward node f is weight_grad when every operand of f whose gradient it
///      helps compute (origin.operand; for untagged nodes, found by following the node
///      downstream to the VJP or graph output of an operand), followed through
///      view/permute/reshape/slice/cast, is a weight input; otherwise input_grad;
///   3. glue that serves no known operand (zeros, cotangents) is weight_grad when every
///      gradient output it feeds belongs to a weight, otherwise input_grad.
std::vector<CostPhase> backward_phases(const Backward& backward, const Graph& forward,
                                       const std::vector<bool>& weight_inputs);

/// Per node of `backward`: the forward node it keeps or rebuilds (Backward::forward_of), or -1
/// for VJP work; checked against `forward` (shape and dtype).
std::vector<int> replica_sources(const Backward& backward, const Graph& forward);

/// The cost of `backward` split by backward_phases(), and the saved-for-backward bytes: each
/// forward value the backward reads as an input (a forward input or a saved value; rebuilt
/// values are recompute, not saved), at the forward node that holds the memory, counted once
/// at that node's size.
BackwardCost backward_cost(const Backward& backward, const Graph& forward,
                           const std::vector<bool>& weight_inputs);

}  // namespace ein
