// Runs a Graph IR on CPU tensors, node by node: views stay views, a reshape copies only when
// the strides cannot express it, and compute nodes launch Kernel IR kernels (tensor_kernels.h)
// or BLAS contractions (runtime/blas). No fusion across nodes yet.
#pragma once

#include <vector>

#include "compiler/graph.h"
#include "runtime/tensor.h"

namespace ein {

/// The graph's outputs for `inputs` (one tensor per input node, in InputAttr order; their
/// shapes and dtypes must be those the graph was lowered for).
std::vector<Tensor> execute(const Graph& graph, const std::vector<Tensor>& inputs);

}  // namespace ein
