// Derivatives of Kernel IR scalar DAGs: the VJP of a map node is a map whose body is the
// cotangent times the body's partial derivative by one input. One rule per scalar op
// (scalar_grad.cpp's table, keyed by ScalarOp like emit_mlir's).
#pragma once

#include "compiler/kernel/kernel_ir.h"

namespace ein {

/// Appends to `kernel` the nodes of ∂(node `of`)/∂(loads of buffer `wrt`) and returns the
/// node, or -1 when the derivative is identically zero. Existing nodes are reused (the value
/// of exp(x) serves its own derivative). Comparisons, sign and other piecewise-constant ops
/// have derivative 0; relu, abs, maximum and minimum take the one-sided value at their kinks.
int differentiate_scalar(Kernel& kernel, int of, int wrt);

}  // namespace ein
