// The one entry that runs a Kernel IR launch. It dispatches by the buffers' device to the CPU
// executor (cpu_executor.h: MLIR through the CPU JIT) or the CUDA executor (cuda_executor.h:
// CUDA C++ through NVRTC), which are peers; a kernel with total stores first takes a
// device-neutral detour (per-point scratch rows, combined on the host in double).
#pragma once

#include <span>

#include <ein/tensor.h>

#include "compiler/kernel/kernel_ir.h"

namespace ein {

/// Runs `kernel` with `buffers` (one tensor per kernel buffer: the inputs in order, then the
/// outputs), all on one device. The kernel's strides must describe these tensors (element
/// strides from their data_ptr()). An output may be the same tensor as an input with the same
/// strides (an in-place update; see kernel_ir.h). Kernel::params travel with the launch.
void run_kernel(const Kernel& kernel, std::span<const Tensor> buffers);

}  // namespace ein
