// The Graph-aware half of the runtime counters: what a node that just ran costs, charged to the
// FlopCounter scopes alive on this thread (runtime/counters.h holds the scopes). execute() calls
// it after each node only while a scope is alive.
#pragma once

#include <ein/flop_counter.h>

#include "compiler/graph.h"
#include "runtime/tensor.h"

namespace ein {

/// Charges node `id` of `graph`, which produced `result` (its first result) from `input` (its
/// first input's value; undefined for an input node), to every live FlopCounter under the
/// graph's origin and `phase`. Costs follow node_cost(), except that a reshape the executor
/// expressed as a view moves no bytes.
void count_executed_node(const Graph& graph, int id, CostPhase phase, const Tensor& result,
                         const Tensor& input);

}  // namespace ein
