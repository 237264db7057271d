// Kernel IR → CUDA C++ (one NVRTC translation unit per kernel). It picks how the kernel maps
// onto threads (see CudaStrategy), writes readable source with the kernel's origin, shapes and
// launch in a comment header, and computes the launch configuration; it does not compile
// (runtime/cuda/nvrtc.h does) or launch anything.
//
// ## The kernel ABI (what a runtime launching these kernels relies on)
//
// The source defines one `extern "C" __global__` function, CudaKernel::entry, whose parameters
// are, in order:
//   1. one pointer per Kernel IR buffer, in the kernel's buffer order (inputs, then outputs):
//      `const T*` for an input, `T*` for an output, pointing at the element the Kernel IR
//      strides count from (element 0 of the view), T the buffer's storage type (float, double,
//      __half, __nv_bfloat16, __nv_fp8_e4m3, __nv_fp8_e5m2, long long, int, signed char,
//      unsigned char, bool). No pointer is __restrict__: an output may alias an input with the
//      same strides (an in-place update, kernel_ir.h);
//   2. one `double` per Kernel::params slot (run-time scalars such as AdamW's step-dependent
//      corrections), converted to the compute type inside the kernel.
// Sizes and strides are compile-time constants of the source: a kernel is specialised to its
// shapes and stride pattern (the index arithmetic divides by constants, and alignment and
// vector widths are decided here). The launch is a 1-D grid of 1-D blocks, CudaKernel::launch;
// every strategy loops over its work (grid-stride), so any grid ≥ 1 is correct and the runtime
// may lower launch.grid (e.g. to a multiple of the SM count). grid == 0 means the domain is
// empty: do not launch. Shared memory is static (declared in the source); there is none to
// pass at launch.
//
// A store with Kernel IR's `total` combine (a mean of per-row losses) is emitted as a row
// store into a scratch buffer of the compute type holding one value per point of the parallel
// dims (row-major): the runtime passes that scratch buffer in the output's slot and combines
// its values afterwards, as run_kernel() does on the CPU (exec/cpu_executor.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/kernel/kernel_ir.h"

namespace ein {

/// How a kernel's domain maps onto CUDA threads.
enum class CudaStrategy : uint8_t {
  elementwise,    ///< pointwise; grid-stride over points, 16-byte vectors along the last dim
  tiled_permute,  ///< pointwise with a transposed input: 32×32 tiles through shared memory
  row_warp,       ///< rows of ≤ 1024 points: one warp per row, reduced with warp shuffles
  row_block,      ///< longer rows: one 512-thread block per row, warp shuffles + shared memory
  column,         ///< rows along a strided dim: one thread per row, adjacent rows coalesced
};

/// The strategy's name as comments and `ein emit` print it ("row_warp").
std::string_view cuda_strategy_name(CudaStrategy strategy);

/// The launch of an emitted kernel: a 1-D grid of 1-D blocks (see the ABI above).
struct CudaLaunch {
  int64_t grid = 0;      ///< blocks; 0: the domain is empty, nothing to launch
  int block = 0;         ///< threads per block (the entry's __launch_bounds__)
  int shared_bytes = 0;  ///< static shared memory the entry declares (not passed at launch)
};

/// One emitted kernel.
struct CudaKernel {
  std::string source;                   ///< a complete NVRTC translation unit
  std::string entry;                    ///< the extern "C" __global__ function's name
  CudaStrategy strategy = CudaStrategy::elementwise;
  CudaLaunch launch;                    ///< grid and block for the kernel's bound domain
  std::vector<std::string> parameters;  ///< the entry's parameters, as C declarations
  int vector_width = 1;  ///< elementwise: elements per vector access (1: scalar only)
  bool row_on_chip = false;  ///< row strategies: the row's inputs are kept in registers
};

/// The CUDA C++ of `kernel` (either Kernel IR form; it is put in the general form, its totals
/// rewritten as described above, and coalesced). Arithmetic is in the kernel's compute type
/// (f32, or f64 for f64 kernels): 16-bit and fp8 buffers are widened on load and rounded to
/// nearest even (fp8: saturating to the finite range) on store, through cuda_fp16.h,
/// cuda_bf16.h and cuda_fp8.h. Throws std::logic_error for a kernel that does not verify.
CudaKernel emit_cuda(const Kernel& kernel);

}  // namespace ein
