// The strided batched GEMM under every BLAS contraction: C[i] = alpha·op(A[i])·op(B[i]) +
// beta·C[i] on raw CPU memory, row-major with leading dimensions, through oneDNN's sgemm or
// OpenBLAS (f32_blas_for says which). It picks the threading (each large GEMM split over TBB's
// threads, or OpenBLAS's own; TBB across many small ones); it knows nothing of tensors, axes or
// layouts (runtime/blas/contract.h does).
#pragma once

#include <cstdint>
#include <string>

#include <ein/dtype.h>

namespace ein {

/// One strided batch of row-major GEMMs. All strides and leading dimensions are in elements.
/// op(A[i]) is m×k: A[i] starts at a + i·stride_a and is m×k with row stride lda (≥ max(1, k))
/// or, when trans_a, k×m with row stride lda (≥ max(1, m)); likewise op(B[i]) is k×n; C[i]
/// is m×n at c + i·stride_c with row stride ldc (≥ max(1, n)). Batch strides may be 0.
struct GemmBatch {
  /// Of A, B and C: f32 (sgemm) or f64 (dgemm); or bf16 A and B with an f32 C, or a bf16 C
  /// with bf16_c (f32 accumulation, alpha 1 and beta 0 only: oneDNN's matmul where
  /// bf16_gemm_available(), else sgemm on f32 copies of blocks of A and B).
  DType dtype = DType::f32;
  int64_t batch = 1;         ///< number of GEMMs
  int64_t m = 0;             ///< rows of op(A) and C
  int64_t n = 0;             ///< columns of op(B) and C
  int64_t k = 0;             ///< columns of op(A), rows of op(B); 0 gives C = beta·C
  bool trans_a = false;      ///< A[i] is stored k×m
  bool trans_b = false;      ///< B[i] is stored n×k
  const void* a = nullptr;   ///< A[0]
  int64_t lda = 1;           ///< row stride of the stored A[i]
  int64_t stride_a = 0;      ///< from A[i] to A[i+1]
  const void* b = nullptr;   ///< B[0]
  int64_t ldb = 1;           ///< row stride of the stored B[i]
  int64_t stride_b = 0;      ///< from B[i] to B[i+1]
  void* c = nullptr;         ///< C[0]
  int64_t ldc = 1;           ///< row stride of C[i]
  int64_t stride_c = 0;      ///< from C[i] to C[i+1]
  double alpha = 1;          ///< scales op(A)·op(B)
  double beta = 0;           ///< scales C's old value; 0 ignores it (NaNs in C included)
  /// bf16 GEMMs only: C is bf16, rounded (to nearest even) once from the f32 accumulation,
  /// as torch's bf16 matmul writes it, instead of an f32 C that a second pass would round.
  bool bf16_c = false;
};

/// Runs the batch. Small GEMMs (under ~1 MFLOP each) run in parallel over the batch on TBB,
/// the library held to one thread; larger ones run one after another, each split over TBB's
/// threads (f64 ones, and f32 where oneDNN is not built in, over OpenBLAS's own). Throws
/// ein::RuntimeError on another dtype, a leading dimension too small, or a size beyond OpenBLAS's
/// 32-bit integers.
void gemm_batched(const GemmBatch& g);

/// The library of f32 GEMMs. automatic: oneDNN's sgemm where it is built in (as PyTorch's CPU
/// matmul), except C = Aᵀ·B with k ≥ m, n (a weight gradient Xᵀ·dY over a batch's tokens)
/// where oneDNN has AVX2 kernels only (a Zen 3, a Haswell): there OpenBLAS's sgemm runs the
/// GPT MLP's weight gradients (C 1024×256 and 256×1024 from 2048 rows) about twice as fast:
/// 71-74 GFLOP/s on one Zen 3 core against 32-36, and 38-64 as Cᵀ; at 2048×768 from 1024 rows
/// the two are even (bench/sgemm_transposed_a.c). A shallow one stays on oneDNN, faster there:
/// the fused LM head's weight gradient over 128 rows (C 768 × 12564 on one core) 79-83 against
/// 59-66 GFLOP/s. onednn and openblas run every f32 GEMM on that library (EIN_BLAS=onednn /
/// openblas, for comparisons). Without oneDNN built in, OpenBLAS runs them all.
enum class F32Blas { automatic, onednn, openblas };

/// Replaces EIN_BLAS's choice for the process, so that tests check each library on any CPU.
void choose_f32_blas(F32Blas choice);

/// The library that runs an f32 GEMM of `g`'s layout under the current choice (onednn or
/// openblas). bf16 GEMMs use oneDNN unless the choice is openblas (bf16_gemm_available).
F32Blas f32_blas_for(const GemmBatch& g);

/// Whether gemm_batched multiplies bf16 operands with oneDNN's bf16 kernels (built in, not
/// turned off by EIN_BLAS=openblas, and having kernels for this CPU: AVX-512 ones): about
/// twice the f32 rate on CPUs with AVX512_BF16 or AMX. Elsewhere it takes them too, through
/// sgemm on f32 copies of blocks (the f32 rate).
bool bf16_gemm_available();

/// The oneDNN kernel a bf16 GEMM of `g`'s layout runs on when it is one tile (its batch
/// ignored), e.g. "brg:avx512_core_amx_bf16", with " (operands packed)" when A or B is first
/// copied dense for it; empty where bf16_gemm_available() is false. For tests and reports.
std::string bf16_gemm_kernel(const GemmBatch& g);

/// The first GEMM of `g` (its batch ignored) on the calling thread only: for callers that
/// split work over threads themselves (the fused attention's tiles). Same checks and errors.
void gemm_on_this_thread(const GemmBatch& g);

/// One GEMM on the calling thread, every argument spelt out (a tile of a fused kernel):
/// C (m × n, row stride ldc) = alpha·op(A)·op(B) + beta·C, op(A) m × k stored as in GemmBatch
/// (k × m when trans_a). Leading dimensions below the stored row length (a size-1 dim's
/// stride) are raised to it: nothing is read across them. Nothing happens when m or n is 0.
void gemm_tile(DType dtype, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
               double alpha, const void* a, int64_t lda, const void* b, int64_t ldb, double beta,
               void* c, int64_t ldc);

}  // namespace ein
