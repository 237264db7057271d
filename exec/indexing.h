// Integer indexing on tensors: gather picks rows of a table by index (an embedding lookup,
// torch.nn.functional.embedding / table[indices]) and scatter_add is its adjoint, summing rows
// into a table (torch.Tensor.index_add_). They are Graph IR ops (gather, scatter_add in
// ops.def) whose executor rules are these functions.
#pragma once

#include <cstdint>

#include <ein/tensor.h>

namespace ein {

/// out[i..., r...] = table[indices[i...], r...]: `table` (n, r...) of any dtype and strides,
/// `indices` of an integer dtype and any shape; the result (indices..., r...) is contiguous.
/// An index outside [0, n) (negative ones count from the end, like PyTorch) is a RuntimeError
/// naming its position.
Tensor gather_rows(const Tensor& table, const Tensor& indices);

/// The adjoint of gather_rows: out = zeros(num_rows, r...), then out[indices[i...], r...] +=
/// values[i..., r...] for every i (repeated indices sum). `values` is floating point, of shape
/// (indices..., r...).
Tensor scatter_add_rows(const Tensor& values, const Tensor& indices, int64_t num_rows);

}  // namespace ein
