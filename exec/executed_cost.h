// The Graph- and Kernel-aware half of the runtime counters: what a node that just ran costs, or
// a kernel launched outside any node, charged to the FlopCounter scopes alive on this thread
// (runtime/counters.h holds the scopes). Called only while a scope is alive, or cheaply.
#pragma once

#include <span>

#include <ein/flop_counter.h>

#include "compiler/graph/graph.h"
#include <ein/tensor.h>

namespace ein {

/// Charges node `id` of `graph`, which produced `result` (its first result) from `input` (its
/// first input's value; undefined for an input node), to every live FlopCounter under the
/// graph's origin and `phase`. Costs follow node_cost(), except that a reshape the executor
/// expressed as a view moves no bytes.
void count_executed_node(const Graph& graph, int id, CostPhase phase, const Tensor& result,
                         const Tensor& input);

/// Counts one launch of `kernel` on `buffers` (run_kernel's arguments) in the live
/// FlopCounters. Inside a node execute() is counting, only the launch; otherwise (a kernel run
/// directly, e.g. by an nn function or an optimizer) also its FLOPs (kernel_flops()) and the
/// bytes of its buffers (inputs read, outputs written, each once), under the kernel's name.
void count_kernel_launch(const Kernel& kernel, std::span<const Tensor> buffers);

}  // namespace ein
