// The einops operations on tensors, checked and cached: rearrange, reduce, repeat, einsum,
// pack/unpack, and fused elementwise maps over named axes. Shapes are resolved by the same
// sema as `ein shape`, so call-time mistakes throw ein::UserError with a caret under the
// pattern. Results are views whenever the strides allow (rearrange, repeat), else one kernel.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <ein/patterns.h>
#include <ein/device.h>
#include <ein/tensor.h>

namespace ein {

/// Axis sizes given by name, like einops' keyword arguments: {{"h", 8}}.
using Sizes = std::vector<AxisSize>;

/// einops.rearrange: a view when the strides allow, else one copy kernel.
Tensor rearrange(const Tensor& x, std::string_view pattern, const Sizes& sizes = {});
/// einops.rearrange on a list of same-shaped tensors (stacked along a new first axis).
Tensor rearrange(const std::vector<Tensor>& xs, std::string_view pattern, const Sizes& sizes = {});
/// einops.reduce with a reduction name: "sum", "mean", "max", "min", "prod", "any", "all",
/// "logsumexp", "var", "std" (var/std need `ddof`, never defaulted).
Tensor reduce(const Tensor& x, std::string_view pattern, std::string_view reduction,
              const Sizes& sizes = {}, std::optional<int64_t> ddof = std::nullopt);
/// einops.repeat: a broadcast view (stride 0) when possible, else one copy kernel.
Tensor repeat(const Tensor& x, std::string_view pattern, const Sizes& sizes = {});
/// einops.einsum with any number of operands; the contraction order is planned like
/// opt_einsum and GEMM-shaped steps go to BLAS.
Tensor einsum(std::string_view pattern, const std::vector<Tensor>& operands);
/// einsum with the operands as arguments: einsum("b s d, d f -> b s f", x, w).
template <class... Ts>
Tensor einsum(std::string_view pattern, const Tensor& first, const Ts&... rest) {
  return einsum(pattern, std::vector<Tensor>{first, rest...});
}
/// einops.pack: the packed tensor and the packed shapes (ps) of each input.
std::pair<Tensor, std::vector<Shape>> pack(const std::vector<Tensor>& xs, std::string_view pattern);
/// einops.unpack: views into `x`, one per packed shape (one entry may hold a -1).
std::vector<Tensor> unpack(const Tensor& x, const std::vector<Shape>& packed_shapes,
                           std::string_view pattern);
/// A fused elementwise map over named axes (docs/map_expressions.md), one kernel:
/// map("x[b s d], m[b s], w[d] -> (x - m)**2 * w", {x, m, w}).
Tensor map(std::string_view expression, const std::vector<Tensor>& inputs);

/// Rows of `table` (n, r...) picked by integer `indices` (any shape): an embedding lookup,
/// torch.nn.functional.embedding(indices, table). The result has shape (indices..., r...).
/// Differentiable in `table` (its gradient is scatter_add). Out-of-range indices throw.
Tensor gather(const Tensor& table, const Tensor& indices);
/// The adjoint of gather: zeros(num_rows, r...) with values[i..., r...] added at row
/// indices[i...] (torch.Tensor.index_add_; repeated indices sum). Differentiable in `values`.
Tensor scatter_add(const Tensor& values, const Tensor& indices, int64_t num_rows);

/// torch.triu: x with the elements below diagonal `diagonal` of its last two dims set to zero
/// (column − row >= diagonal kept). One map kernel; differentiable (the gradient is triu'd too).
Tensor triu(const Tensor& x, int64_t diagonal = 0);
/// torch.tril: the elements with column − row <= diagonal kept, the rest zero.
Tensor tril(const Tensor& x, int64_t diagonal = 0);

/// x converted to `dtype` (round to nearest even), differentiable: the gradient is cast back
/// (mixed precision: keep f32 master weights, compute in bf16). x itself when already dtype.
Tensor cast(const Tensor& x, DType dtype);

/// A pattern compiled once and called many times: `auto split = compile("b s (h d) -> b h s d",
/// {{"h", 8}}); Tensor y = split(x);`. The op is rearrange, unless a reduction is given
/// (reduce), the pattern has several inputs or drops axes (einsum), or adds axes (repeat).
class Op {
 public:
  /// The op applied to one input (rearrange, reduce, repeat, one-operand einsum).
  Tensor operator()(const Tensor& x) const;
  /// The op applied to several inputs (einsum).
  Tensor operator()(const std::vector<Tensor>& xs) const;
  /// einsum with two or more operands as arguments.
  template <class... Ts>
  Tensor operator()(const Tensor& a, const Tensor& b, const Ts&... rest) const {
    return (*this)(std::vector<Tensor>{a, b, rest...});
  }
  /// The pattern text.
  const std::string& pattern() const { return pattern_; }
  /// Which einops operation this is.
  PatternOp op() const { return op_; }

 private:
  friend Op compile(std::string_view, const Sizes&, std::string_view, std::optional<int64_t>);
  std::string pattern_;
  PatternOp op_ = PatternOp::rearrange;
  Sizes sizes_;
  std::string reduction_;
  std::optional<int64_t> ddof_;
};

/// Parses and checks `pattern` now (a bad pattern throws UserError here, not at call time).
Op compile(std::string_view pattern, const Sizes& sizes = {}, std::string_view reduction = {},
           std::optional<int64_t> ddof = std::nullopt);

/// Waits for all queued work on every device (CPU work is synchronous: returns at once).
void synchronize();

}  // namespace ein
