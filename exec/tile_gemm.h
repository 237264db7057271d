// The small GEMMs inside the fused CPU kernels' tiles (exec/attention.cpp): a few dozen rows
// and columns, called thousands of times per kernel. This one reads the operands in place (A
// with any strides, so a transposed tile needs no copy), keeps a 6 × 64 block of C in AVX-512
// registers (6 × 16 in AVX2 ones) and walks the shared dimension once. Alone, on hot operands, it
// runs level with oneDNN's sgemm at the attention's shapes
// (bench/attention/ein_tile_kernel_timings.cpp).
#pragma once

#include <cstdint>

namespace ein {

/// C[m × n] = alpha·A·B, or C += alpha·A·B when `accumulate` (C is not read otherwise, so it
/// may hold anything). A's element (i, p) is a[i·a_rs + p·a_cs], so Aᵀ is A with its strides
/// swapped; one of the two strides must be 1. B is row-major with row stride ldb, C with ldc.
/// AVX-512 where the CPU has it, else AVX2 and FMA where it has those; elsewhere the BLAS of
/// runtime/blas/gemm.h (f64 always).
void tile_gemm(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_rs,
               int64_t a_cs, const float* b, int64_t ldb, bool accumulate, float* c, int64_t ldc);
void tile_gemm(int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t a_rs,
               int64_t a_cs, const double* b, int64_t ldb, bool accumulate, double* c,
               int64_t ldc);

/// Which code the tile kernels here and in softmax_tiles.h run: AVX-512 where the CPU has it
/// (avx512_tile_kernels), else AVX2 and FMA where it has those (avx2_tile_kernels), else the
/// portable path (the BLAS of runtime/blas/gemm.h and vector_math.h's rows). Tests force the
/// narrower paths on wider CPUs, so that every path is checked on any CPU that can run it:
/// force_avx2_tile_kernels turns AVX-512 off, force_portable_tile_kernels both.
bool avx512_tile_kernels();
bool avx2_tile_kernels();
void force_portable_tile_kernels(bool portable);
void force_avx2_tile_kernels(bool avx2);

/// The path above that runs now: "AVX-512", "AVX2" or "portable". For tests and benchmarks.
const char* tile_kernels_path();

/// dst[c · ld + r] = src[r · src_ld + c] for r < rows, c < cols: a block transposed, so that a
/// product with Bᵀ reads B's transpose row by row.
void transpose_into(const float* src, int64_t src_ld, int64_t rows, int64_t cols, float* dst,
                    int64_t ld);
void transpose_into(const double* src, int64_t src_ld, int64_t rows, int64_t cols, double* dst,
                    int64_t ld);
/// The same for 32-bit words of any meaning (a pair of bf16: amx_tiles.h's B layout).
void transpose_into(const uint32_t* src, int64_t src_ld, int64_t rows, int64_t cols,
                    uint32_t* dst, int64_t ld);

}  // namespace ein
