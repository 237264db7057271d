// GEMM-shaped contractions on the GPU through cuBLASLt, loaded with dlopen (libcublasLt.so.13)
// at first use like NVRTC and the driver, so nothing links it. It runs the same strided
// batched GemmBatch the CPU runs (runtime/blas/gemm.h), in f32 (exact or TF32 tensor-core
// math), bf16, f16 (f32 accumulation) and f64; it does not fuse epilogues yet.
//
// ## Row-major GemmBatch → column-major cuBLASLt
//
// cuBLASLt reads matrices column-major. A row-major m×n C with row stride ldc is, read
// column-major, Cᵀ (n×m, leading dimension ldc), and Cᵀ = op(B)ᵀ·op(A)ᵀ. So one
// cublasLtMatmul computes Cᵀ with the operands swapped: cuBLASLt's A is GemmBatch's B, its B is
// GemmBatch's A, and nothing is copied:
//
//   cuBLASLt A = stored B[i]: !trans_b → n×k, ld ldb, op N;  trans_b → k×n, ld ldb, op T
//   cuBLASLt B = stored A[i]: !trans_a → k×m, ld lda, op N;  trans_a → m×k, ld lda, op T
//   cuBLASLt C = D = C[i]:    n×m, ld ldc
//
// with the batch count and each operand's batch stride carried over (A's and B's may be 0: a
// broadcast operand). plan_cublaslt_gemm() is this mapping as a pure function.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/blas/gemm.h"
#include "runtime/cuda/stream.h"

namespace ein {

/// How products are computed for f32 inputs (other dtypes ignore it).
enum class GemmMath : uint8_t {
  exact,  ///< f32 arithmetic (CUBLAS_COMPUTE_32F)
  tf32,   ///< inputs rounded to TF32 on tensor cores, f32 accumulation (COMPUTE_32F_FAST_TF32)
};

/// One operand's layout as cuBLASLt's matrix layout descriptor holds it (column-major).
struct CublasLtLayout {
  int data_type = 0;  ///< cudaDataType: CUDA_R_32F 0, CUDA_R_64F 1, CUDA_R_16F 2, CUDA_R_16BF 14
  uint64_t rows = 0;  ///< rows of the stored matrix
  uint64_t cols = 0;  ///< columns of the stored matrix
  int64_t ld = 0;     ///< leading dimension (elements between columns)
  int32_t batch_count = 1;   ///< matrices in the batch
  int64_t batch_stride = 0;  ///< elements from one matrix to the next
  bool operator==(const CublasLtLayout&) const = default;
};

/// A GemmBatch as one cublasLtMatmul call (the mapping in the header comment).
struct CublasLtPlan {
  bool empty = false;           ///< m, n or batch is 0: nothing to run
  bool trans_a = false;         ///< cuBLASLt's op(A) is a transpose (CUBLAS_OP_T)
  bool trans_b = false;         ///< cuBLASLt's op(B) is a transpose
  CublasLtLayout a, b, c;       ///< cuBLASLt's A (GemmBatch's B), B (GemmBatch's A), C = D
  int compute_type = 0;         ///< cublasComputeType_t: 68 32F, 77 32F_FAST_TF32, 70 64F
  int scale_type = 0;           ///< cudaDataType of alpha and beta: f32, or f64 for f64
  const void* a_ptr = nullptr;  ///< GemmBatch's b
  const void* b_ptr = nullptr;  ///< GemmBatch's a
  void* c_ptr = nullptr;        ///< GemmBatch's c
  bool operator==(const CublasLtPlan&) const = default;
};

/// The cuBLASLt call for `g` (its dtype may be f32, f64, f16 or bf16 here). A pure function:
/// no library, no GPU. Throws RuntimeError for another dtype, tf32 with a dtype other than f32,
/// a leading dimension smaller than its row, k == 0 with m·n > 0 (C = beta·C is not a
/// cuBLASLt call), a C batch stride of 0 in a batch, or a batch beyond int32.
CublasLtPlan plan_cublaslt_gemm(const GemmBatch& g, GemmMath math = GemmMath::exact);

/// Runs `g` (device pointers of cuda:`stream.device()`) on `stream`, with cuBLASLt's first
/// heuristic algorithm for the pointers' alignments (asked once per shape, layout, alignment
/// and device, then cached) and a 32 MiB workspace from the caching allocator. DeviceError without
/// cuBLASLt or a driver, or with cuBLASLt's status when it fails.
void cublaslt_gemm(const GemmBatch& g, GemmMath math, const Stream& stream);

/// Where cuBLASLt was found, or why not.
struct CublasLtInfo {
  bool available = false;  ///< the library loaded with every entry point
  std::string reason;      ///< when not: what was tried
  std::string library;     ///< the file loaded
  int64_t version = 0;     ///< cublasLtGetVersion(): 130100 for 13.1.0
};

/// cuBLASLt, loaded on the first call from $EIN_CUBLASLT, libcublasLt.so.13, or
/// /usr/local/cuda/lib64/libcublasLt.so.13 (thread-safe).
const CublasLtInfo& cublaslt_info();

namespace detail {
/// Creates the plan's layout and matmul descriptors in cuBLASLt and reads them back into a
/// plan (host-only calls that work without a GPU): what the library will be given. The
/// pointers and `empty` are copied from `plan`. DeviceError without cuBLASLt.
CublasLtPlan cublaslt_descriptors_read_back(const CublasLtPlan& plan);
}  // namespace detail

}  // namespace ein
