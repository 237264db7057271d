// Tensor-level operations built from one or two Kernel IR kernels each: materialising a strided
// view, reducing dims, and fused elementwise maps. The pattern ops (rearrange, reduce, ...) are
// views plus these. Inputs are CPU tensors of any strides; outputs are freshly allocated.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "compiler/kernel/kernel_ir.h"
#include <ein/patterns.h>
#include <ein/tensor.h>

namespace ein {

/// Copies `src` into `dst` (same shape; any strides on both sides; dtypes may differ).
void copy_into(const Tensor& dst, const Tensor& src, const std::string& origin = "");

/// Sets every element of `dst` (any strides, none 0 over more than one element) to `value`
/// converted to its dtype: one kernel whose value is a run-time parameter, so every value
/// shares its code.
void fill_into(const Tensor& dst, double value);

/// Reduces the dims of `x` flagged in `reduced` with `r`; the result has the kept dims in
/// order, laid out with `out_order` (a permutation of the kept dims: out dim i is kept dim
/// out_order[i]; empty keeps the order). var/std need `ddof`. The result keeps a float
/// input's dtype (fp8 too); any/all give bool; a bool input's sum/prod/max/min give f32.
Tensor reduce_dims(const Tensor& x, const std::vector<bool>& reduced, Reduction r,
                   std::optional<int64_t> ddof, const std::vector<int>& out_order = {},
                   const std::string& origin = "");

/// Runs a pointwise `kernel` whose domain, input buffers, nodes and body are set (no output
/// buffer yet) on `inputs` (one per buffer), into a fresh contiguous tensor of `out_dtype` on
/// the inputs' device (`device` when there are none).
Tensor run_map(Kernel kernel, std::vector<Tensor> inputs, DType out_dtype, Device device = cpu());

/// The arithmetic type kernels use for these element types: f64 if any is f64 or when i64/i32
/// values meet no float (integer arithmetic, exact below 2^53), else f32.
DType compute_type(const std::vector<DType>& dtypes);

}  // namespace ein
