// The scalar ops of Kernel IR (scalar_ops.def) on doubles, with the formulas the emitters use
// (and torch states): the float64 oracle (compiler/reference/kernel_eval.h) evaluates kernels
// with it, and the .ein interpreter folds constants with it.
#pragma once

#include "compiler/kernel/kernel_ir.h"

namespace ein {

/// One scalar op on doubles (leaves are not ops here: the caller reads them).
double apply_scalar_op(ScalarOp op, double x, double y = 0, double z = 0);

}  // namespace ein
