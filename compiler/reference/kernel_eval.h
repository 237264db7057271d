// The float64 semantics of Kernel IR (compiler/kernel/kernel_ir.h): the oracle the emitter and
// executor tests compare generated code with. A direct loop-by-loop reading of the semantics
// at the top of kernel_ir.h, every value in double; never used for speed.
#pragma once

#include <vector>

#include "compiler/kernel/kernel_ir.h"

namespace ein {

/// The float64 semantics of `kernel` (the oracle for emitter tests): runs it with every value
/// in double. `data[i]` holds buffer i's elements, indexed by Σ i_d · stride_d from element 0
/// (outputs are written in place). Loads read the double as is (no rounding to the buffer's
/// dtype). Slow; for tests only.
void evaluate(const Kernel& kernel, std::vector<std::vector<double>>& data);

}  // namespace ein
