// The one entry that runs a Kernel IR launch. It dispatches by the buffers' device to the CPU
// executor (cpu_executor.h: MLIR through the CPU JIT) or the CUDA executor (cuda_executor.h:
// CUDA C++ through NVRTC), which are peers; a kernel with total stores first takes a
// device-neutral detour (per-point scratch rows, combined on the host in double).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include <ein/tensor.h>

#include "compiler/kernel/kernel_ir.h"

namespace ein {

/// Runs `kernel` with `buffers` (one tensor per kernel buffer: the inputs in order, then the
/// outputs), all on one device. The kernel's strides must describe these tensors (element
/// strides from their data_ptr()). An output may be the same tensor as an input with the same
/// strides (an in-place update; see kernel_ir.h). Kernel::params travel with the launch.
void run_kernel(const Kernel& kernel, std::span<const Tensor> buffers);

/// What an executor remembers of one kernel between launches with the same code and exact
/// layout (only the params may change), so that they skip its code key and the memo lookup
/// of its prepared launch: a fused node's repeated launches (run_fused.cpp) keep one each.
struct KernelMemo {
  std::string key;  ///< kernel_code_key(kernel, exact_layout); empty until first made
  /// The executor's prepared launch (its own type), for the executor state `stamp` names (the
  /// CPU's thread count; the CUDA device and installed execution); null until then.
  std::shared_ptr<const void> prepared;
  uint64_t stamp = 0;
};

/// run_kernel() for a kernel that `memo` has seen before with this code and exact layout, or
/// never (a fresh memo); the executors fill it.
void run_kernel(const Kernel& kernel, std::span<const Tensor> buffers, KernelMemo& memo);

}  // namespace ein
