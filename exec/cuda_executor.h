// Runs Kernel IR on CUDA tensors: run_kernel() (exec/run_kernel.h) hands a launch whose
// buffers live on a CUDA device here. The kernel is emitted as CUDA C++ (emit_cuda.h) for its
// exact sizes and strides, prepared once per device through runtime/cuda/execution.h (NVRTC,
// module load), memoised by its code key, and launched on the thread's current stream.
// The row gathers and scatter-adds of embeddings (exec/indexing.h) have their own small
// kernels here, and the runtime's strided copies on CUDA tensors come here too.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "compiler/kernel/kernel_ir.h"
#include "runtime/cuda/execution.h"
#include <ein/tensor.h>

namespace ein {

struct KernelMemo;

/// Launches `kernel` (either form, no total stores: run_kernel() rewrites those first) with
/// `buffers`, tensors of one CUDA device, on that device's current stream. The kernel as given
/// keys the memo, so a repeated launch neither re-forms nor re-emits it. With `memo` (run_kernel.h)
/// the key and the prepared launch are made once for it.
void run_kernel_cuda(const Kernel& kernel, std::span<const Tensor> buffers,
                     KernelMemo* memo = nullptr);

/// The row indices a gather or scatter-add kernel reads: `checked` ones (wrapped into [0,
/// rows) on the host), or `on_device`, an int64 or int32 tensor contiguous on the kernel's
/// device that the kernel wraps and checks where it is, storing the first bad flat position
/// into `bad` (a word of runtime/device_checks.h) instead of the host reading them first.
struct RowIndices {
  std::vector<int64_t> checked;
  Tensor on_device;
  void* bad = nullptr;
  int64_t count() const;
};

/// out[i, ...] = table[indices[i], ...] on the table's CUDA device (an index out of range gives
/// zeros, and its position in `bad`).
Tensor gather_rows_cuda(const Tensor& table, const RowIndices& indices, const Shape& out_shape);

/// out[indices[i], ...] += values[i, ...] into zeros of `out_shape` on the values' CUDA
/// device, in index order for every element (deterministic); values are f32 or f64. An index
/// out of range adds nothing (and its position goes to `bad`).
Tensor scatter_add_rows_cuda(const Tensor& values, const RowIndices& indices,
                             const Shape& out_shape);

/// A hand-written kernel (the fused attention's, exec/attention_cuda.cpp): `make` returns its
/// CUDA C++ source and entry, prepared once per `key` and device (the same memo as Kernel IR
/// launches), then launched as `grid` blocks of `block` threads on `device`'s current stream
/// with `buffers` (device addresses) and `params`, in the ABI of compiler/emit/emit_cuda.h,
/// and `shared_bytes` of dynamic shared memory a block.
void launch_cuda_source(std::string key, int device, const std::function<CudaSource()>& make,
                        int64_t grid, int block, std::span<void* const> buffers,
                        std::span<const double> params, int shared_bytes = 0);

/// Counters of the CUDA executor since process start.
struct CudaExecutorStats {
  int64_t launches = 0;        ///< kernels launched
  int64_t kernels_prepared = 0;  ///< kernels emitted and prepared (compiled and loaded)
};
CudaExecutorStats cuda_executor_stats();

}  // namespace ein
