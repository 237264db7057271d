// What a FlopCounter is charged while a fused graph runs: the work of the unfused graph it came
// from, node by node, each under its own phase. So the runtime counts exactly what ein report
// predicts from the unfused graph (docs/cost_model.md: one definition of model FLOPs), however
// fusion regrouped, inlined or shared the work; what the kernels really executed is their
// business, not the model's. It decides nothing about execution.
#pragma once

#include <optional>
#include <span>
#include <vector>

#include <ein/flop_counter.h>

#include "compiler/graph/graph.h"

namespace ein {

/// One unfused node's cost, under its phase (nullopt: the phase current when it runs).
struct NodeCharge {
  std::optional<CostPhase> phase;
  CostTotals cost;
};
/// Per node of a fused graph, what running it is charged.
using GraphCharges = std::vector<std::vector<NodeCharge>>;

/// The charges of `fused` (fuse(unfused), with `source` its fuse source map: per fused node the
/// unfused node it copies, -1 for a kernel or a result node): a kernel is charged its members'
/// costs summed per phase, a copied node itself, a result node nothing. `phases` gives each unfused node's
/// phase; empty: the phase current at run time for all.
GraphCharges fused_charges(const Graph& fused, const Graph& unfused, const std::vector<int>& source,
                           std::span<const CostPhase> phases = {});

}  // namespace ein
