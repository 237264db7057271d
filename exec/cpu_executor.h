// Runs Kernel IR on CPU tensors, the CPU's peer of cuda_executor.h (run_kernel() in
// run_kernel.h picks between them): prepares the kernel (compiler/kernel/prepare.h), emits
// MLIR, compiles it through the process-wide CPU JIT (runtime/jit) on first use, and splits the
// outer range across oneTBB threads. Kernels are memoised by a binary key of their code, and
// each launch's plan (the prepared kernel's schedule, sizes and strides, and its compiled code)
// by its code and exact layout, so a repeated launch costs a key, a hash and a lookup.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "compiler/kernel/kernel_ir.h"
#include <ein/tensor.h>

namespace ein {

struct KernelMemo;

/// Launches `kernel` (either form, no total stores: run_kernel() rewrites those first) with
/// `buffers`, CPU tensors whose element strides from data_ptr() the kernel's strides describe.
/// With `memo` (run_kernel.h) its code key and launch plan are looked up once for it.
void run_kernel_cpu(const Kernel& kernel, std::span<const Tensor> buffers,
                    KernelMemo* memo = nullptr);

/// Counters of the executor since process start.
struct ExecutorStats {
  int64_t launches = 0;       ///< kernels run
  int64_t kernels_built = 0;  ///< kernels emitted and handed to the JIT
  int64_t launches_planned = 0;  ///< launch plans made (one per code, exact layout, threads)
};
/// The executor's counters.
ExecutorStats executor_stats();

}  // namespace ein
