// Runs a Graph IR on CPU tensors, node by node: views stay views, a reshape copies only when
// the strides cannot express it, and compute nodes launch Kernel IR kernels (tensor_kernels.h)
// or BLAS contractions (runtime/blas). Fusion happens before: a fused node of fuse()'s output
// runs its one kernel (run_fused.h), a result node picks another of its outputs.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include <ein/flop_counter.h>

#include "compiler/cost/charges.h"
#include "compiler/graph/graph.h"
#include <ein/tensor.h>

namespace ein {

/// The graph's outputs for `inputs` (one tensor per input node, in InputAttr order; their
/// shapes and dtypes must be those the graph was lowered for). While a FlopCounter is alive on
/// this thread each node is charged to it under `phases[node]` (default, or past the end: the
/// current detail::CountingPhase, else forward); the tape may pass backward_phases().
/// Every value, inputs included, is released after its last reader: an input handed over with
/// std::move is freed as soon as the graph is done with it (the liveness that
/// compiler/cost/step_memory.h predicts), not when the graph ends.
std::vector<Tensor> execute(const Graph& graph, std::vector<Tensor> inputs,
                            std::span<const CostPhase> phases = {});

/// The same, charging a FlopCounter `charges[node]` (compiler/cost/charges.h: the unfused work
/// a fused node stands for) instead of each node's own cost, so the counts are the unfused
/// graph's, the numbers ein report gives.
std::vector<Tensor> execute(const Graph& graph, std::vector<Tensor> inputs,
                            const GraphCharges& charges);

/// execute() writing graph output k straight into into[k] (undefined: no wish) where a fused
/// node makes it and run_fused() finds that safe (run_fused.h); the returned tensor is then
/// into[k] itself, else a fresh one the caller copies. An optimizer's update writes the
/// parameter and its state in place this way, not into fresh tensors copied back.
/// `charges`, when given, as in execute() with charges.
std::vector<Tensor> execute_into(const Graph& graph, std::vector<Tensor> inputs,
                                 const std::vector<Tensor>& into,
                                 const GraphCharges* charges = nullptr);

/// Called during execute() once per graph output, as soon as its value is final: the node that
/// makes it has run and no later node reads it. Returning true takes the value (the callee may
/// move from `value`); execute() then returns an undefined tensor in its place. A backward
/// graph hands each parameter's gradient over this way while it computes the others.
using OutputReady = std::function<bool(size_t output, Tensor& value)>;

/// execute() with charges, handing outputs over as they become final (`ready`).
std::vector<Tensor> execute(const Graph& graph, std::vector<Tensor> inputs,
                            const GraphCharges& charges, const OutputReady& ready);

}  // namespace ein
