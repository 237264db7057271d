// A column reduction split across its rows, for devices that need many threads: a kernel
// whose one reduced dim R is strided (rows far apart) and whose points are contiguous (a bias
// or LayerNorm weight gradient, 'n c -> c') maps one thread to each point, so a few hundred
// points over thousands of rows run on a few hundred GPU threads, each walking every row.
// split_rows() rewrites it as two kernels that compute the same values:
//   partial  over [chunks, P..., R / chunks]: the chunk is one more parallel dim, so every
//            (chunk, point) pair is a thread; the full stores are written as before, and each
//            stage's result over the chunk's rows goes to a scratch buffer [chunks, P...];
//   combine  over [P..., chunks]: each stage reduces its scratch over the chunks, in chunk
//            order, and the row stores are written from those results.
// The chunks depend on the shape only, so the results do not depend on the launch. Kernel IR
// in, Kernel IR out: either executor can run the two kernels (the CUDA executor does).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "compiler/kernel/kernel_ir.h"

namespace ein {

/// The two kernels of a split, and how their buffers relate to the original's.
struct RowSplit {
  Kernel partial;  ///< buffers: the original inputs, its full outputs, then one scratch per stage
  Kernel combine;  ///< buffers: the scratches, the original row inputs, then its row outputs
  int64_t chunks = 1;
  Shape scratch_shape;  ///< [chunks, P...], contiguous, of the compute type, one per stage
  /// Per buffer of `partial` / `combine`: the original buffer it is, or -1 - s for the
  /// scratch of stage s.
  std::vector<int> partial_buffers, combine_buffers;
};

/// `kernel` (prepared: general form, coalesced, no total stores) split into `chunks` blocks of
/// rows; nullopt when it is not a one-pass column reduction with one reduced dim (its stages
/// and full stores read no stage result, it reads no index leaf) or `chunks` does not divide
/// its rows.
std::optional<RowSplit> split_rows(const Kernel& kernel, int64_t chunks);

/// The chunk count worth splitting a prepared kernel into on a GPU (1: do not split): only a
/// column reduction (no full buffer walks R contiguously, some buffer walks the last parallel
/// dim contiguously) of 256 rows or more and fewer than 32K points, into at most 64K (chunk,
/// point) threads of at least 32 rows each; the largest such count that divides the rows.
int64_t gpu_row_chunks(const Kernel& kernel);

/// `kernel` (either form) as a GPU runs it: prepared, then split into gpu_row_chunks() chunks
/// when that is more than one; nullopt when it runs as it is.
std::optional<RowSplit> split_for_gpu(const Kernel& kernel);

}  // namespace ein
