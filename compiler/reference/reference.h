// The float64 reference interpreter: every op as naive loops straight from its definition,
// the oracle that tests compare the fast executors against. It shares nothing with them but
// pattern resolution (include/ein/patterns.h); it is never used for speed.
//
// Conventions: an Array is dense and row-major; booleans are 0.0 / 1.0; comparison and
// reduction results follow numpy/PyTorch, each function says where they differ.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include <ein/dtype.h>
#include <ein/shape.h>

#include <ein/patterns.h>

namespace ein::reference {

/// A dense row-major float64 array: the oracle's only value type. Rank 0 holds one value.
struct Array {
  Shape shape{0};            ///< sizes, outermost first
  std::vector<double> data;  ///< numel() values in row-major (C) order

  /// An empty array of shape (0,).
  Array() = default;
  /// An array of `shape` holding `data`; throws RuntimeError when the counts differ.
  Array(Shape shape, std::vector<double> data);
  /// An array of `shape` with every element `value`.
  static Array filled(Shape shape, double value);

  /// Number of elements: the product of the sizes (1 for rank 0).
  int64_t numel() const;
  /// Row-major offset of `index` (in elements); throws RuntimeError when out of range.
  int64_t offset(const std::vector<int64_t>& index) const;
  /// The element at `index` (one entry per dimension); throws RuntimeError when out of range.
  double at(const std::vector<int64_t>& index) const { return data[offset(index)]; }
  /// Mutable access to the element at `index`.
  double& at(const std::vector<int64_t>& index) { return data[offset(index)]; }
};

/// Row-major product of sizes; throws RuntimeError on a negative size.
int64_t numel(const Shape& shape);
/// Advances `index` to the next row-major position in `shape` (odometer); false after the
/// last one. Start from all zeros, and only when numel(shape) > 0.
bool next_index(std::vector<int64_t>& index, const Shape& shape);

/// einops.rearrange; `sizes` are the keyword axis sizes (`h=8`).
Array rearrange(const Array& x, std::string_view pattern, const std::vector<AxisSize>& sizes = {});
/// einops.rearrange of a list: the arrays (of equal shapes) are stacked on a new leading axis.
Array rearrange(const std::vector<Array>& xs, std::string_view pattern,
                const std::vector<AxisSize>& sizes = {});
/// einops.reduce. Over zero elements: sum 0, prod 1, mean NaN, any false, all true,
/// logsumexp -inf, var/std NaN (ddof 0); min/max are refused (sema's UserError, as torch's
/// "cannot reduce over a zero-size dimension"). `ddof` is for var and std only.
Array reduce(const Array& x, std::string_view pattern, Reduction reduction,
             const std::vector<AxisSize>& sizes = {}, std::optional<int64_t> ddof = {});
/// einops.reduce of a list (stacked first).
Array reduce(const std::vector<Array>& xs, std::string_view pattern, Reduction reduction,
             const std::vector<AxisSize>& sizes = {}, std::optional<int64_t> ddof = {});
/// einops.repeat.
Array repeat(const Array& x, std::string_view pattern, const std::vector<AxisSize>& sizes = {});
/// einsum with numpy semantics (size-1 broadcast, '...', diagonals), in einops' notation
/// ("b i d, b j d -> b i j") plus ein's extensions (docs/patterns.md).
Array einsum(std::string_view pattern, const std::vector<Array>& operands);
/// einops.pack: the result and the packed shapes (the `*` part of each input).
std::pair<Array, std::vector<Shape>> pack(const std::vector<Array>& xs, std::string_view pattern);
/// einops.unpack: splits `x` along `*` into `packed_shapes` (one entry may hold a -1).
std::vector<Array> unpack(const Array& x, const std::vector<Shape>& packed_shapes,
                          std::string_view pattern);

/// Elementwise functions of one argument.
enum class UnaryOp : uint8_t {
  neg,
  abs,
  exp,
  log,
  sqrt,
  rsqrt,
  tanh,
  sigmoid,
  relu,
  gelu,  ///< the exact erf form, PyTorch's default
  gelu_tanh,
  silu,
  sin,
  cos,
  square,
  reciprocal,
  sign,
};

/// Elementwise functions of two arguments; comparisons give 0.0 / 1.0.
enum class BinaryOp : uint8_t { add, sub, mul, div, pow, maximum, minimum, eq, ne, lt, le, gt, ge };

/// `op` applied to every element.
Array unary(UnaryOp op, const Array& x);
/// `op` on numpy-broadcast operands (right-aligned, size 1 stretches); throws RuntimeError
/// when the shapes do not broadcast.
Array binary(BinaryOp op, const Array& a, const Array& b);
/// `cond != 0 ? a : b` elementwise, the three broadcast together (numpy.where).
Array where(const Array& cond, const Array& a, const Array& b);
/// The values `x` takes when stored as `dtype`: floats round to nearest even (overflow gives
/// inf, or NaN for f8e4m3, which has no inf); integers truncate toward zero (values outside
/// the type's range, NaN and inf throw RuntimeError: C++ and PyTorch leave them undefined);
/// bool is `x != 0`.
Array cast(const Array& x, DType dtype);
/// Softmax along `dim` (negative counts from the end), stabilised by the maximum.
Array softmax(const Array& x, int64_t dim);
/// log(softmax(x)) along `dim`, computed as x - max - log(sum(exp(x - max))).
Array log_softmax(const Array& x, int64_t dim);

}  // namespace ein::reference
