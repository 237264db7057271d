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
  NodeCost recompute;    ///< replicated forward nodes (the values the VJPs read, recomputed)
  NodeCost total;        ///< the sum of the three
  std::vector<CostPhase> phases;     ///< per backward node (for execute()'s phase vector)
  std::vector<int64_t> saved_bytes;  ///< per forward node: bytes of its value the VJPs read
  int64_t saved_total = 0;           ///< sum of saved_bytes
  int64_t saved_activations = 0;     ///< the part of saved_total that is not graph inputs
};

/// The phase of every node of `backward` (a Backward of `forward`; `weight_inputs` flags the
/// forward inputs that are weights). Steps:
///   1. nodes [0, replicated) are recompute (forward values replicated for the VJPs);
///   2. a VJP node of forward node f is weight_grad when every operand of f whose gradient it
///      helps compute (origin.operand; for untagged nodes, found by following the node
///      downstream to the VJP or graph output of an operand), followed through
///      view/permute/reshape/slice/cast, is a weight input; otherwise input_grad;
///   3. glue that serves no known operand (zeros, cotangents) is weight_grad when every
///      gradient output it feeds belongs to a weight, otherwise input_grad.
std::vector<CostPhase> backward_phases(const Backward& backward, const Graph& forward,
                                       const std::vector<bool>& weight_inputs);

/// The forward node each replica of `backward` (its nodes [0, replicated)) recomputes.
std::vector<int> replica_sources(const Backward& backward, const Graph& forward);

/// The cost of `backward` split by backward_phases(), and the saved-for-backward bytes: each
/// forward value a VJP node reads, followed through views (view/permute/slice/reshape) to the
/// forward node that holds the memory, counted once at that node's size.
BackwardCost backward_cost(const Backward& backward, const Graph& forward,
                           const std::vector<bool>& weight_inputs);

}  // namespace ein
