// Vectorised row primitives the fused softmax-like kernels share (exec/attention.cpp,
// exec/cross_entropy.cpp): exp of a shifted row with its sum, and a row's max; and the two
// products of one query row's attention (exec/attention_query.h): its logits against rows of
// keys, and the probabilities' sum of rows of values, reading the rows in place as f32 or
// bf16. The f32 ones are compiled for AVX-512, AVX2 and the baseline and picked at load time
// (target_clones).
#pragma once

#include <cstdint>

namespace ein {

/// x[i] = exp(x[i] - shift) for i < n; returns the sum. f32: Cephes' range reduction and a
/// degree-6 polynomial, within 2 ulps for the arguments softmax uses (≤ 0); results below
/// 2^-126 flush to 0; exp(-inf) = 0 and NaN stays NaN. f64: std::exp.
float exp_shift_sum(float* x, int64_t n, float shift);
double exp_shift_sum(double* x, int64_t n, double shift);

/// The largest of x[0..n) and `start`; NaN when any is NaN (as the unfused max reduction).
float row_max(const float* x, int64_t n, float start);
double row_max(const double* x, int64_t n, double start);

/// out[j] = scale · Σ_c q[c] · k[j·ld + c] for j < count, c < e: one query's logits against
/// `count` key rows of stride ld (f32, or bf16 as uint16_t: f32's upper half).
void scaled_dots(const float* q, const float* k, int64_t ld, int64_t count, int64_t e,
                 float scale, float* out);
void scaled_dots(const float* q, const uint16_t* k, int64_t ld, int64_t count, int64_t e,
                 float scale, float* out);

/// acc[c] += Σ_j p[j] · v[j·ld + c] for j < count, c < f: probabilities times `count` value
/// rows of stride ld (f32 or bf16). Every row is read, p[j] = 0 too (0 · NaN is NaN, as in
/// the unfused product).
void add_weighted_rows(const float* p, const float* v, int64_t ld, int64_t count, int64_t f,
                       float* acc);
void add_weighted_rows(const float* p, const uint16_t* v, int64_t ld, int64_t count, int64_t f,
                       float* acc);

}  // namespace ein
