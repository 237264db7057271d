// Runs a fused node (graph.h's FusedAttr, made by fuse.h) on CPU tensors: fills the kernel's
// buffer strides from the inputs' actual strides through each read's affine map, allocates the
// outputs contiguous and launches the one kernel. It builds no kernels; fuse() did.
#pragma once

#include <vector>

#include "compiler/graph/graph.h"
#include <ein/tensor.h>

namespace ein {

/// The outputs of `fused` (in FusedAttr::outputs order) for the fused node's `inputs`, on
/// their device (on `device` for a node without inputs). With `into` (one tensor per output,
/// or undefined), output j is written into into[j] itself where that is safe: into[j] has the
/// output's shape and dtype, is contiguous and on the device, overlaps no other output, and
/// every input it overlaps is the same elements in the same dtype and layout, read by a
/// pointwise kernel (each point loads before it stores: an in-place update). Elsewhere the
/// output is a fresh tensor, as without `into`.
std::vector<Tensor> run_fused(const FusedAttr& fused, const std::vector<Tensor>& inputs,
                              Device device = cpu(), const std::vector<Tensor>* into = nullptr);

/// The kernel of `fused` with every buffer's strides bound: inputs of these shapes and element
/// strides (one per fused-node input), outputs contiguous. `offsets`, when given, receives
/// each read's offset in elements from its input's first element.
Kernel bind_fused(const FusedAttr& fused, const std::vector<Shape>& shapes,
                  const std::vector<Shape>& strides, std::vector<int64_t>* offsets = nullptr);

}  // namespace ein
