// Tensor arithmetic in C++, like libtorch's basics: + - * / with tensors and scalars, unary -,
// pow, comparisons, where, exp/log/sqrt/..., and sum/mean/max over everything or one dim.
//
//   using namespace ein;
//   Tensor loss = mean(pow(pred - 5, 2) * 0.5);       // torch: ((pred - 5).pow(2) * 0.5).mean()
//   Tensor y = where(x > 0, x, x * 0.01);             // leaky ReLU
//
// Broadcasting is by position, as PyTorch's (shapes aligned on the right, size-1 dims
// stretch); map() broadcasts by axis name instead. Each operator is one map kernel, run at
// once (eager, as torch's eager mode): a chain of them is a chain of kernels. Write a chain as
// one map() string to get one fused kernel. Every op is recorded on the autograd tape.
//
// Result dtypes follow torch's: integers stay integers under + - * (i64 + i64 is i64; with a
// float scalar they give f32), / gives a float, comparisons give bool, and a bf16 or f16
// tensor with a Python-style scalar stays bf16 or f16 (the scalar is applied in f32).
#pragma once

#include <cstdint>

#include <ein/tensor.h>

namespace ein {

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
Tensor operator-(const Tensor& a);

/// Comparisons, elementwise: bool tensors.
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, double b);
Tensor operator<=(const Tensor& a, double b);
Tensor operator>(const Tensor& a, double b);
Tensor operator>=(const Tensor& a, double b);
/// Elementwise equality (a bool tensor), as torch.eq; not whether two tensors are the same.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);

/// a^b elementwise; pow(x, 2) is one multiply.
Tensor pow(const Tensor& a, double exponent);
Tensor pow(const Tensor& a, const Tensor& exponent);
/// torch.where: x where condition is nonzero, else y (broadcast by position).
Tensor where(const Tensor& condition, const Tensor& x, const Tensor& y);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);

Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
/// The exact (erf) GELU, torch's F.gelu default.
Tensor gelu(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor square(const Tensor& x);
Tensor floor(const Tensor& x);
Tensor round(const Tensor& x);

/// Reductions over every element (a 0-dim tensor) or over dim `dim` (negative counts from
/// the end; `keepdim` leaves it as size 1), as torch.sum/mean/max/min (values only).
Tensor sum(const Tensor& x);
Tensor mean(const Tensor& x);
Tensor max(const Tensor& x);
Tensor min(const Tensor& x);
Tensor sum(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor mean(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor max(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor min(const Tensor& x, int64_t dim, bool keepdim = false);

}  // namespace ein
