// Kernel IR → MLIR text (func, scf, arith, math, memref, vector and the llvm dialect's pointer
// ops) for the CPU JIT in runtime/jit. It chooses the loop schedule (which dim is vectorized,
// how the outer parallel range is chunked) and writes text; it does not compile or run.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/kernel/kernel_ir.h"

namespace ein {

/// How a kernel's loops map onto the CPU: the range [0, outer_iterations) is what the
/// runtime splits across threads (the kernel ABI's begin/end).
struct CpuSchedule {
  int vector_dim = -1;           ///< domain dim walked with SIMD vectors; -1: scalar code
  int vector_width = 1;          ///< lanes per vector (64 bytes of the compute type)
  /// Mode B: vectors of points walked together along the row (each row step then reads
  /// group · 64 contiguous bytes of every buffer, not one cache line per page).
  int group = 1;
  /// Mode B when the stages and the full stores share one pass (a bias gradient's column sum
  /// beside the values it stores): each outer iteration is a panel of `chunk` points walked
  /// row by row, every row step reading `chunk` contiguous elements of each buffer, with the
  /// accumulators in a stack array of `panel` elements per stage (0: not this schedule).
  int64_t panel = 0;
  /// Mode B in one pass over one parallel dim and one reduced dim, with at most
  /// kMaxBlockColumns points and 128 KB of accumulators: each outer iteration is a block of
  /// `row_block` whole rows, walked row by row (every buffer read and written in order, as a copy would), the block's
  /// sums kept in stack arrays and then written to the scratch area (scratch_elements()). One
  /// more iteration, number `outer_iterations`, run after all the others and alone, combines
  /// the blocks' sums in block order and writes the row stores. Blocks depend on the shape
  /// only, so the results do not depend on the thread count. 0: not this schedule.
  int64_t row_block = 0;
  int64_t chunk = 1;             ///< points of the innermost parallel dim per outer iteration
  int64_t outer_iterations = 1;  ///< product of the outer parallel dims × chunks of the last
  int64_t work_per_iteration = 1;  ///< elements one outer iteration touches (for grain sizes)
};

/// The widest row (in points) that the row-block schedule takes: 32 KB of f64 sums per stage.
constexpr int64_t kMaxBlockColumns = 4096;

/// The schedule emit_mlir() uses for `kernel` (which must be coalesced and verified), run on
/// `threads` threads: only the chunk depends on it (a panel per thread), never the code. The
/// code depends on the buffers' stride pattern (0, 1 or other) and on whether the column sums
/// run in row blocks (which depends on sizes) or in panels (kernels with rows 8 KB or more
/// apart that row blocks do not take): a cache of compiled kernels keys by all three.
CpuSchedule schedule_cpu(const Kernel& kernel, int threads = 1);

/// The run-time parameters of a kernel: domain sizes, every buffer's stride per dim (buffer
/// major), then the chunk and the number of chunks of the last parallel dim (with row
/// blocks: the rows per block and the number of blocks).
std::vector<int64_t> kernel_parameters(const Kernel& kernel, const CpuSchedule& schedule);

/// The element type of a row-block schedule's scratch area: f64 for a kernel computing in
/// f32, whose sums accumulate in f64 (emit_mlir.cpp, "Accumulators"), else the compute type.
DType scratch_dtype(const Kernel& kernel);

/// Elements of scratch_dtype() that a row-block schedule's blocks write their sums to
/// (blocks × stages × points; 0 for the other schedules): the caller passes them as
/// buffers[n + 2] (see emit_mlir()).
int64_t scratch_elements(const Kernel& kernel, const CpuSchedule& schedule);

/// An MLIR module holding `func.func @symbol(%buffers: !llvm.ptr, %begin: index, %end: index)`
/// that runs outer iterations [begin, end) of `schedule`; buffers[i] is element 0 of buffer i,
/// buffers[n] (n = the kernel's buffer count) holds kernel_parameters() as int64, and, when
/// the kernel has params, buffers[n + 1] holds Kernel::params as double; with row blocks,
/// buffers[n + 2] is the scratch area (scratch_elements()). Sizes, strides and
/// params are read from there at run time: the code depends only on the kernel's ops, dtypes,
/// rank, stages, stores and which strides are 0 or 1, so it is reused across shapes and steps.
/// `kernel` may be in either form (see kernel_ir.h); it should be coalesced and verified.
std::string emit_mlir(const Kernel& kernel, const CpuSchedule& schedule, std::string_view symbol);

}  // namespace ein
