// The compiler's side of eager autograd: running a Graph on tensors and, when an input
// requires grad (and grad mode is on), recording a GradNode whose backward runs the graph's
// backward (compiler/autodiff/autodiff.h). Backward graphs are built once per (graph, which inputs need
// gradients) and cached, so a training loop differentiates each op once.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "compiler/cost/charges.h"
#include "compiler/graph/graph.h"
#include <ein/autograd.h>
#include <ein/tensor.h>

namespace ein {

/// Executes `graph` on `inputs` (execute.h) and attaches autograd records to the outputs
/// when any float input requires grad and grad_enabled(). The graph must outlive nothing:
/// the record holds it.
std::vector<Tensor> run_recorded(const std::shared_ptr<const Graph>& graph,
                                 const std::vector<Tensor>& inputs);
/// The same, computing the outputs with `fused` (fuse(*graph), cached by the caller) when
/// nothing is recorded; when something is, with the backward plan's own fusion of `graph`
/// (which also returns the values the backward reads). `blocks` (per node of `graph`, the module of a list
/// it belongs to, -1 none; empty: no blocks) is what Recompute::blocks checkpoints. `charges`
/// (fused_charges() of `fused`), when given, is what a FlopCounter counts while `fused` runs
/// unrecorded: the unfused graph's work, as ein report and a recorded run count it.
std::vector<Tensor> run_recorded(const std::shared_ptr<const Graph>& graph, const Graph& fused,
                                 const std::vector<Tensor>& inputs,
                                 const std::vector<int>& blocks = {},
                                 const GraphCharges* charges = nullptr);

/// A hand-written backward: the gradients of the op's inputs (one per input; undefined: none)
/// from its outputs' gradients (one per output; undefined: zero). Runs under NoGrad.
using BackwardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& grad_outputs)>;

/// Records an op computed by fused kernels rather than a graph (exec/fused_ops.h): when
/// grad mode is on and an input requires grad, `outputs` get autograd records whose backward
/// is `backward`. Returns `outputs`.
std::vector<Tensor> record(std::string name, const std::vector<Tensor>& inputs,
                           std::vector<Tensor> outputs, BackwardFn backward);

/// Gradients of tensors that the tape has not recorded yet are summed by this (a map kernel).
Tensor add_tensors(const Tensor& a, const Tensor& b);

}  // namespace ein
