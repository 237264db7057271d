// The one entry that runs a Kernel IR launch. It dispatches by the buffers' device to the CPU
// executor (cpu_executor.h: MLIR through the CPU JIT) or the CUDA executor (cuda_executor.h:
// CUDA C++ through NVRTC), which are peers; a kernel with total stores first takes a
// device-neutral detour (per-point scratch rows, combined on the host in double).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

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
  /// The executor's prepared launch (its own type), for the executor state `stamp` names: the
  /// CPU's thread count (stamps 2n); the CUDA device and installed execution (stamps 2n + 1),
  /// so that one memo never hands one executor the other's launch. Null until then.
  std::shared_ptr<const void> prepared;
  uint64_t stamp = 0;
};

/// run_kernel() for a kernel that `memo` has seen before with this code and exact layout, or
/// never (a fresh memo); the executors fill it.
void run_kernel(const Kernel& kernel, std::span<const Tensor> buffers, KernelMemo& memo);

namespace detail {
struct BuiltKernel;
/// The kernel kept for (signature, origin) on this thread, or null; `hash` gets their hash.
std::shared_ptr<BuiltKernel> find_built(std::span<const int64_t> signature, std::string_view origin,
                                        uint64_t& hash);
/// Keeps `kernel` for (signature, origin) on this thread (at most 1,024 kernels: all are
/// dropped when full, as shapes vary) and returns it.
std::shared_ptr<BuiltKernel> keep_built(uint64_t hash, std::span<const int64_t> signature,
                                        std::string_view origin, Kernel kernel);
void run_built(BuiltKernel& built, std::span<const double> params, std::span<const Tensor> buffers);
}  // namespace detail

/// run_kernel() for the kernel that `build()` makes, which `signature` (dtypes, sizes,
/// strides: every number the kernel is built from, but its params) and `origin` determine:
/// built, keyed and prepared once per thread, so that a runtime helper called every step (a
/// fill, a copy, a reduction) only looks it up. `params` replace the kernel's params.
template <class Build>
void run_built_kernel(std::span<const int64_t> signature, std::string_view origin, Build&& build,
                      std::span<const double> params, std::span<const Tensor> buffers) {
  uint64_t hash = 0;
  std::shared_ptr<detail::BuiltKernel> built = detail::find_built(signature, origin, hash);
  if (!built) built = detail::keep_built(hash, signature, origin, build());
  detail::run_built(*built, params, buffers);
}

}  // namespace ein
