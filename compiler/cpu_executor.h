// Runs Kernel IR on CPU tensors: coalesces the loop nest, emits MLIR, compiles it through the
// process-wide CPU JIT (runtime/jit) on first use, and splits the outer range across oneTBB
// threads. Kernels are memoised by a binary key, so a repeated call costs a hash and a lookup.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "compiler/kernel_ir.h"
#include "runtime/tensor.h"

namespace ein {

/// Runs `kernel` with `buffers` (one tensor per kernel buffer: the inputs in order, then the
/// outputs) on the CPU, or on their CUDA device when they live on one (cuda_executor.h). The kernel's strides must describe these tensors (element strides from
/// their data_ptr()). An output may be the same tensor as an input with the same strides (an
/// in-place update; see kernel_ir.h). Kernel::params travel with the launch.
void run_kernel(const Kernel& kernel, std::span<const Tensor> buffers);

/// The MLIR text run_kernel() would compile for `kernel` (for `ein emit --target mlir`).
std::string kernel_mlir(const Kernel& kernel);

/// Counters of the executor since process start.
struct ExecutorStats {
  int64_t launches = 0;       ///< kernels run
  int64_t kernels_built = 0;  ///< kernels emitted and handed to the JIT
};
/// The executor's counters.
ExecutorStats executor_stats();

}  // namespace ein
