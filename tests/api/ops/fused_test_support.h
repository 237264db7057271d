// What the fused-kernel tests share (fused_kernel_ir_test.cpp, fused_ops_test.cpp, and the
// CUDA emulation's emulate_test.cpp): the row layouts of their inputs, random rows in each
// layout, the row tolerances, a float64 softmax, and a one-stage sum kernel.
//
// Tolerances: f64 kernels agree with the oracle to ~1e-12 (exp/log in libm, a few roundings per
// term); f32 kernels use polynomial exp/log within a few ulp and add up to 16 terms a lane or
// 64 rows in f32 before f64 (emit_mlir.cpp, "Accumulators"), so 2e-6 · sqrt(row) relative is
// loose for them; bf16 outputs are rounded once to 8 bits (8e-3 relative).
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "api/ops/ops_test_support.h"
#include "compiler/kernel/kernel_ir.h"

namespace ein::testing {

/// A sum over the last dim of `domain` of an f32 input with `x_strides`, into an f32 output
/// with `out_strides`; with `store`, the input is also copied to a full output (one pass).
inline Kernel long_sum_kernel(Shape domain, const Shape& x_strides, const Shape& out_strides,
                              bool store = false) {
  Kernel k;
  k.name = "long_sum";
  k.domain = std::move(domain);
  k.reduced = 1;
  const int x = k.load(k.add_buffer(DType::f32, x_strides));
  if (store) k.store(k.add_output(DType::f32, x_strides), x);
  k.store(k.add_output(DType::f32, out_strides), k.reduce(Combine::sum, x));
  return k;
}

inline constexpr DType kDTypes[] = {DType::f32, DType::f64, DType::bf16};

/// An input layout of the fused tests: how the rows of x sit in memory.
enum class RowLayout { contiguous, strided, transposed, broadcast };

inline const char* row_layout_name(RowLayout l) {
  switch (l) {
    case RowLayout::contiguous:
      return "contiguous";
    case RowLayout::strided:
      return "strided";
    case RowLayout::transposed:
      return "transposed";
    case RowLayout::broadcast:
      return "broadcast";
  }
  return "?";
}

inline constexpr RowLayout kLayouts[] = {RowLayout::contiguous, RowLayout::strided,
                                         RowLayout::transposed, RowLayout::broadcast};

/// A random (b, n) tensor of `dtype` in `layout`: strided takes every other element of each
/// row, transposed stores the rows column-major (row stride 1, element stride b), broadcast
/// repeats one random row b times (stride 0 along the batch).
inline Tensor random_rows(int64_t b, int64_t n, DType dtype, uint64_t seed, RowLayout layout,
                   double scale = 2) {
  auto values = [&](Shape shape) {
    Tensor r = randn(shape, DType::f64, cpu(), seed);
    std::vector<double> v = r.to_vector<double>();
    for (double& e : v)
      e *= scale;
    return on_test_device(from_data<double>(v, shape).to(dtype));
  };
  switch (layout) {
    case RowLayout::contiguous:
      return values({b, n});
    case RowLayout::strided:
      return values({b, 2 * n}).slice(1, 0, 2 * n, 2);
    case RowLayout::transposed:
      return values({n, b}).transpose(0, 1);
    case RowLayout::broadcast:
      return values({1, n}).expand({b, n});
  }
  return {};
}

/// The values of a (b, n) tensor, row-major.
inline std::vector<double> values_of(const Tensor& x) {
  return x.to_vector<double>();
}

inline Tolerance row_tolerance(DType dtype, int64_t n) {
  Tolerance t = tolerance_for(dtype, n);
  if (dtype == DType::f32) t = {t.rtol * 4, t.atol * 4};  // polynomial exp/log: a few ulp
  return t;
}

inline std::string context(const char* op, DType dtype, RowLayout layout, int64_t b, int64_t n) {
  return fmt::format("{} {} {} ({}, {})", op, dtype_name(dtype), row_layout_name(layout), b, n);
}

/// softmax (or log-softmax) of each row of a row-major (b, n) array, in double.
inline std::vector<double> softmax_ref(const std::vector<double>& x, int64_t b, int64_t n,
                                       bool log) {
  std::vector<double> y(x.size());
  for (int64_t i = 0; i < b; ++i) {
    const double* row = x.data() + i * n;  // not &x[i * n]: x is empty when n is 0
    double m = -std::numeric_limits<double>::infinity(), s = 0;
    for (int64_t j = 0; j < n; ++j)
      m = std::max(m, row[j]);
    for (int64_t j = 0; j < n; ++j)
      s += std::exp(row[j] - m);
    for (int64_t j = 0; j < n; ++j)
      y[i * n + j] = log ? row[j] - m - std::log(s) : std::exp(row[j] - m) / s;
  }
  return y;
}

}  // namespace ein::testing
