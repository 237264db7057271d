// bf16 tile products for the fused attention of a --precision bf16 step
// (exec/attention_amx.cpp): C (f32) = A·B with A and B in bf16, and the packers that put
// operands into the two layouts the products read. On Intel AMX (Sapphire Rapids and later)
// 16 × 16 blocks of C accumulate in tile registers 32 products deep per instruction; on CPUs
// with AVX512-BF16 but no AMX (AMD Zen 4), 4 × 64 blocks of C accumulate in vector registers,
// a pair of products per lane per vdpbf16ps, twice the f32 FMA's rate. oneDNN's bf16 matmul
// primitive costs too much per call for tiles of a few hundred thousand products
// (BENCHMARKS.md, "bf16 attention tiles on AMX: tried, not landed"); these are plain loops.
//
// Layouts (bf16 as its 16 bits; every padded element is zero, so it adds nothing):
//  - A, m × k: row-major, row stride lda elements; m padded to a multiple of 16, k of 32.
//  - B, k × n, "pairs": pair-row p holds B[2p][j] and B[2p + 1][j] side by side for each
//    column j (the VNNI layout the tile dot product reads); pair-row stride ldb elements
//    (≥ 2n); k padded to a multiple of 32, n of 16.
#pragma once

#include <cstdint>

namespace ein {

/// Whether the bf16 tile products run here: on AMX (amx_tiles()) or on AVX512-BF16 (the CPU
/// has AVX512-BF16, -BW and -VL: runtime/amx.h's avx512_bf16_usable()), and no test turned
/// them off with force_no_amx_tiles (which exists so that tests check the f32 path on these
/// machines too).
bool bf16_tiles();
/// Whether they run on AMX: the CPU has AMX-TILE, AMX-BF16, AVX512-BF16 and AVX512-BW, Linux
/// grants the process the tile state (arch_prctl ARCH_REQ_XCOMP_PERM), and no test turned
/// them off.
bool amx_tiles();
void force_no_amx_tiles(bool off);
/// Tests: run the AVX512-BF16 kernel even where there is AMX (both are then checked there).
void force_avx512_bf16_tiles(bool on);

/// C[m × n] = A·B, or C += A·B when `accumulate`; C is f32 with row stride ldc. m and n are
/// multiples of 16, k of 32. Call only where bf16_tiles(). Both kernels give every product
/// exactly and sum in f32 (the order of the sums differs between them).
void bf16_tile_gemm(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                    const uint16_t* b, int64_t ldb, bool accumulate, float* c, int64_t ldc);

/// A from f32: dst[i·ld_dst + j] = bf16(scale · x[i·ld + j]) for i < rows, j < cols; zeros
/// in the rest of rows_pad × cols_pad (cols_pad a multiple of 32). Rounding is AVX512-BF16's:
/// to nearest even, NaN kept, subnormal results flushed to zero (a probability below 2⁻¹²⁶
/// counts as 0).
void a_from_f32(const float* x, int64_t ld, int64_t rows, int64_t cols, float scale,
                uint16_t* dst, int64_t ld_dst, int64_t rows_pad, int64_t cols_pad);
/// A from bf16 rows, copied; zeros in the rest of rows_pad × cols_pad.
void a_from_bf16(const uint16_t* x, int64_t ld, int64_t rows, int64_t cols, uint16_t* dst,
                 int64_t ld_dst, int64_t rows_pad, int64_t cols_pad);
/// B pairs of the k × n matrix x (f32 rows, row stride ld), scaled and rounded; zeros up to
/// k_pad × n_pad (k_pad a multiple of 2, n_pad of 16).
void pairs_from_f32(const float* x, int64_t ld, int64_t k, int64_t n, float scale, uint16_t* dst,
                    int64_t ldb, int64_t k_pad, int64_t n_pad);
/// B pairs of the k × n matrix x of bf16 rows.
void pairs_from_bf16(const uint16_t* x, int64_t ld, int64_t k, int64_t n, uint16_t* dst,
                     int64_t ldb, int64_t k_pad, int64_t n_pad);
/// B pairs of xᵀ, where x is an n × k matrix of bf16 rows (row stride ld): B = xᵀ is k × n.
void pairs_from_bf16_transposed(const uint16_t* x, int64_t ld, int64_t n, int64_t k,
                                uint16_t* dst, int64_t ldb, int64_t k_pad, int64_t n_pad);

/// The backward's dS = scale · P ∘ (dP − δ) (P and dP f32 tiles of `rows` × `cols`, row stride
/// ld; δ per row) rounded once into both operands it feeds: A rows (for dQ += dS·K; rows padded
/// to 16, columns to 32) and pairs (for dKᵀ += qᵀ·dS, the rows being the shared dim; rows
/// padded to 32, columns to 16). Rounding as a_from_f32's.
void ds_operands(const float* p, const float* dp, int64_t ld, const float* delta, int64_t rows,
                 int64_t cols, float scale, uint16_t* a, int64_t lda, uint16_t* pairs,
                 int64_t ldb);

/// x rounded up to a multiple of m.
constexpr int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

}  // namespace ein
