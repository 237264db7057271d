// The softmax work inside the fused attention's tiles (exec/attention.cpp), a block of rows at
// a time: the forward's online-softmax step (row max, exp, running sum, rescaled output) and
// the backward's probabilities from each row's logsumexp. Row i uses its first cols[i]
// columns; the rest of the tile's width is masked (a causal or padding mask's -inf) and
// becomes probability 0 without being read. f32 runs in AVX-512 registers where the CPU has
// it, else in AVX2 ones where it has AVX2 and FMA (exec/tile_gemm.h's tile_kernels_path; exp by
// Cephes' range reduction and degree-6 polynomial, as exp_shift_sum); f64 and other CPUs use
// vector_math.h's row primitives, with the same results up to rounding.
#pragma once

#include <cstdint>

namespace ein {

/// One key block of FlashAttention's forward for `rows` query rows: tile row i (row stride ld)
/// holds logits in [0, cols[i]) (cols null: all `width`). Each row's max joins m[i]; the tile
/// becomes exp(logit - max) (0 past cols[i], up to width); l[i] is rescaled and adds the row's
/// sum; acc's row i (f values, row stride f) is rescaled when the max grew. A NaN logit makes
/// the row's max NaN, and so the row's output. A row all -inf stays at max -inf, sum 0.
void online_softmax_block(float* tile, int64_t ld, int64_t rows, int64_t width,
                          const int64_t* cols, float* m, float* l, float* acc, int64_t f);
void online_softmax_block(double* tile, int64_t ld, int64_t rows, int64_t width,
                          const int64_t* cols, double* m, double* l, double* acc, int64_t f);

/// The backward's probabilities: tile[i][j] = exp(tile[i][j] - lse[i]) for j < cols[i] (all
/// `width` when cols is null), 0 for the rest of the width; lse -inf counts as 0 (the row's
/// logits are all -inf, and so become 0).
void probabilities_block(float* tile, int64_t ld, int64_t rows, int64_t width,
                         const int64_t* cols, const float* lse);
void probabilities_block(double* tile, int64_t ld, int64_t rows, int64_t width,
                         const int64_t* cols, const double* lse);

}  // namespace ein
