// Vectorised row primitives the fused softmax-like kernels share (exec/attention.cpp,
// exec/cross_entropy.cpp): exp of a shifted row with its sum, and a row's max. The f32 ones
// are compiled for AVX-512, AVX2 and the baseline and picked at load time (target_clones).
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

}  // namespace ein
