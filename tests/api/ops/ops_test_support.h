// Shared helpers of the op tests: random inputs in several layouts, and comparison of a
// tensor with the float64 reference interpreter that reports the first mismatches.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "exec/cpu_executor.h"
#include "exec/cuda_executor.h"
#include "compiler/reference/reference.h"
#include <ein/tensor.h>
#include "support/device_under_test.h"

namespace ein::testing {

/// How an input tensor is laid out in memory.
enum class Layout { contiguous, strided, column_major };

/// The layout's name, for failure messages.
inline const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::contiguous: return "contiguous";
    case Layout::strided: return "strided";
    case Layout::column_major: return "column-major";
  }
  return "?";
}

/// A random normal tensor of `shape` and `dtype` laid out as `layout` (same values for a seed),
/// on the device under test (device_under_test.h).
inline Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, Layout layout) {
  if (layout == Layout::strided && !shape.empty()) {
    Shape wide = shape;
    wide.back() = wide.back() * 2;
    return on_test_device(randn(wide, DType::f64, cpu(), seed).to(dtype))
        .slice(-1, 0, wide.back(), 2);
  }
  if (layout == Layout::column_major && shape.size() >= 2) {
    Shape reversed(shape.rbegin(), shape.rend());
    std::vector<int64_t> order;
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) order.push_back(d);
    return on_test_device(randn(reversed, DType::f64, cpu(), seed).to(dtype)).permute(order);
  }
  return on_test_device(randn(shape, DType::f64, cpu(), seed).to(dtype));
}

/// Kernels launched so far, on the CPU and on CUDA devices.
inline int64_t kernel_launches() {
  return executor_stats().launches + cuda_executor_stats().launches;
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

// ---- Helpers added for the op suites (reduce/map/dtype/identities/errors/views) ----

/// A tensor with the values (and dtype) of `x`, laid out as `layout` in fresh storage.
/// Same-dtype copy_ moves elements, so the values are bit-identical to `x`'s.
inline Tensor with_layout(const Tensor& x, Layout layout) {
  const Shape& shape = x.shape();
  if (layout == Layout::strided && !shape.empty()) {
    Shape wide = shape;
    wide.back() = wide.back() * 2;
    Tensor out = empty(wide, x.dtype(), device_under_test()).slice(-1, 0, wide.back(), 2);
    out.copy_(x);
    return out;
  }
  if (layout == Layout::column_major && shape.size() >= 2) {
    Shape reversed(shape.rbegin(), shape.rend());
    std::vector<int64_t> order;
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d)
      order.push_back(d);
    Tensor out = empty(reversed, x.dtype(), device_under_test()).permute(order);
    out.copy_(x);
    return out;
  }
  return on_test_device(x.contiguous().clone());
}

/// A tensor of `dtype` holding `values` (row-major, rounded to dtype) in `layout`.
inline Tensor tensor_of(const std::vector<double>& values, const Shape& shape, DType dtype,
                        Layout layout = Layout::contiguous) {
  return with_layout(from_data<double>(values, shape).to(dtype), layout);
}

/// `n` standard normal values (deterministic for a seed).
inline std::vector<double> normal_values(int64_t n, uint64_t seed) {
  return randn({n}, DType::f64, cpu(), seed).to_vector<double>();
}

/// The elements of `x` in row-major order as raw bytes (element_size() bytes each).
inline std::vector<uint8_t> raw_bytes(const Tensor& x) {
  const Tensor c = x.to(cpu()).contiguous();
  std::vector<uint8_t> out(static_cast<size_t>(c.nbytes()));
  if (!out.empty()) std::memcpy(out.data(), c.data_ptr(), out.size());
  return out;
}

/// The array `a`, whose dims are the named `axes`, rearranged onto `out_axes` for numpy's
/// positional broadcasting: dims in out_axes order, size 1 where `a` lacks the axis.
inline reference::Array align_axes(const reference::Array& a, const std::vector<std::string>& axes,
                                   const std::vector<std::string>& out_axes) {
  Shape shape(out_axes.size(), 1);
  std::vector<int64_t> source_dim(out_axes.size(), -1);
  for (size_t o = 0; o < out_axes.size(); ++o)
    for (size_t d = 0; d < axes.size(); ++d)
      if (axes[d] == out_axes[o]) {
        shape[o] = a.shape[d];
        source_dim[o] = static_cast<int64_t>(d);
      }
  reference::Array out = reference::Array::filled(shape, 0);
  if (out.numel() == 0) return out;
  std::vector<int64_t> index(shape.size(), 0), src(axes.size(), 0);
  int64_t flat = 0;
  do {
    for (size_t o = 0; o < shape.size(); ++o)
      if (source_dim[o] >= 0) src[static_cast<size_t>(source_dim[o])] = index[o];
    out.data[static_cast<size_t>(flat++)] = a.at(src);
  } while (reference::next_index(index, shape));
  return out;
}

}  // namespace ein::testing
