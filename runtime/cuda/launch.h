// Launching compiled kernels: NVRTC's image (runtime/cuda/nvrtc.h) of a compiler/emit_cuda kernel,
// loaded once per device (cuModuleLoadData; the driver JIT-compiles a PTX image) and launched
// with the ABI of docs/cuda.md: one device pointer per Kernel IR buffer, then one double per
// run-time parameter, on a 1-D grid of 1-D blocks. It knows nothing of Kernel IR (the runtime
// never includes compiler headers): the caller passes CudaKernel::entry and ::launch's numbers.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "runtime/cuda/stream.h"
#include "runtime/cuda/nvrtc.h"

namespace ein {

/// A launch of `entry` from `binary` on `stream`'s device: `grid` blocks of `block` threads
/// (grid 0: an empty domain, nothing is launched; a grid beyond the device's gridDim.x limit is
/// lowered to it, which the emitted grid-stride loops allow). `buffers` are device addresses
/// in the kernel's buffer order, `params` its run-time scalars. Static shared memory needs
/// nothing at launch (dynamic: launch_cuda_function). The module is loaded on first use and kept
/// for the process, per device and image. DeviceError with the driver's message when loading or
/// launching fails.
void launch_cuda_kernel(const CudaBinary& binary, std::string_view entry, int64_t grid, int block,
                        std::span<void* const> buffers, std::span<const double> params,
                        const Stream& stream);

/// The function `entry` of `binary` loaded on cuda:`device` (once per device and image; kept
/// for the process). DeviceError with the driver's message when loading fails.
CuFunction load_cuda_function(const CudaBinary& binary, std::string_view entry, int device);

/// launch_cuda_kernel() for a function already loaded on `stream`'s device (no lookup), with
/// `shared_bytes` of dynamic shared memory (extern __shared__; above 48 KB the function is
/// first allowed that much).
void launch_cuda_function(CuFunction function, std::string_view entry, int64_t grid, int block,
                          std::span<void* const> buffers, std::span<const double> params,
                          const Stream& stream, int shared_bytes = 0);

}  // namespace ein
