// Shared helpers of the op tests: random inputs in several layouts, and comparison of a
// tensor with the float64 reference interpreter that reports the first mismatches.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include <fmt/format.h>

#include "compiler/reference.h"
#include "runtime/tensor.h"

namespace ein::testing {

/// How an input tensor is laid out in memory.
enum class Layout { contiguous, strided, column_major };

/// A random normal tensor of `shape` and `dtype` laid out as `layout` (same values for a seed).
inline Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, Layout layout) {
  if (layout == Layout::strided && !shape.empty()) {
    Shape wide = shape;
    wide.back() = wide.back() * 2;
    return randn(wide, DType::f64, cpu(), seed).to(dtype).slice(-1, 0, wide.back(), 2);
  }
  if (layout == Layout::column_major && shape.size() >= 2) {
    Shape reversed(shape.rbegin(), shape.rend());
    std::vector<int64_t> order;
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) order.push_back(d);
    return randn(reversed, DType::f64, cpu(), seed).to(dtype).permute(order);
  }
  return randn(shape, DType::f64, cpu(), seed).to(dtype);
}

/// The tensor's values as a reference array.
inline reference::Array to_array(const Tensor& x) { return {x.shape(), x.to_vector<double>()}; }

/// Tolerance for results stored in `dtype`, computed from inputs in that dtype with float32
/// (float64 for f64) arithmetic over at most `terms` terms per output.
struct Tolerance {
  double rtol, atol;
};
inline Tolerance tolerance_for(DType dtype, int64_t terms = 1) {
  const double grow = std::sqrt(static_cast<double>(std::max<int64_t>(terms, 1)));
  switch (dtype) {
    case DType::f64: return {1e-12 * grow, 1e-12 * grow};
    case DType::f32: return {2e-6 * grow, 2e-6 * grow};    // f32 epsilon 1.2e-7, accumulation
    case DType::f16: return {1e-3, 1e-3 * grow};           // output rounding: 2^-11 relative
    case DType::bf16: return {8e-3, 8e-3 * grow};          // output rounding: 2^-8 relative
    default: return {0, 0};
  }
}

/// Asserts that `got` equals `want` elementwise within `tol` (NaN equals NaN; infinities
/// must match exactly), printing the first five mismatches and the worst errors.
inline void expect_close(const Tensor& got, const reference::Array& want, Tolerance tol,
                         const std::string& context) {
  ASSERT_EQ(got.shape(), want.shape) << context;
  const std::vector<double> g = got.to_vector<double>();
  ASSERT_EQ(g.size(), want.data.size()) << context;
  int bad = 0;
  double max_abs = 0, max_rel = 0;
  std::string report;
  for (size_t i = 0; i < g.size(); ++i) {
    const double a = g[i], b = want.data[i];
    bool ok;
    if (std::isnan(b) || std::isnan(a))
      ok = std::isnan(a) && std::isnan(b);
    else if (std::isinf(b) || std::isinf(a))
      ok = a == b;
    else {
      const double err = std::abs(a - b);
      max_abs = std::max(max_abs, err);
      if (b != 0) max_rel = std::max(max_rel, err / std::abs(b));
      ok = err <= tol.atol + tol.rtol * std::abs(b);
    }
    if (!ok && ++bad <= 5) report += fmt::format("\n  [{}] got {} expected {}", i, a, b);
  }
  EXPECT_EQ(bad, 0) << context << ": " << bad << " of " << g.size()
                    << " elements differ (max abs err " << max_abs << ", max rel err " << max_rel
                    << ", rtol " << tol.rtol << ", atol " << tol.atol << ")" << report;
}

}  // namespace ein::testing
