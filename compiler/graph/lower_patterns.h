// Lowering of resolved patterns (sema's Recipe) and map expressions into Graph IR. Each op
// becomes a few nodes: views for splits, permutes, diagonals and broadcasts; reshape for
// merges; reduce, contract (planned like opt_einsum), concat, slice and map for the rest.
// Lowering decides no layouts: whether a reshape is free is known only from the tensors'
// strides, at execution.
#pragma once

#include <string>
#include <vector>

#include "compiler/graph/graph.h"
#include <ein/patterns.h>

namespace ein {

/// The shape and dtype of one graph input.
struct TensorType {
  Shape shape;
  DType dtype = DType::f32;
};

/// rearrange, repeat, reduce, einsum, pack or unpack as a graph of `recipe` on `inputs` (list
/// inputs of rearrange are one input per element). `star` is pack/unpack's `*` position.
Graph lower_pattern(const Recipe& recipe, const std::vector<TensorType>& inputs,
                    std::optional<int64_t> ddof, size_t star, const std::string& origin);

/// A map expression as a graph: `body` is the scalar DAG (loads read inputs in order),
/// `axes[i][d]` the output dim of input i's dim d, `shape` the output's shape.
Graph lower_map(std::shared_ptr<const Kernel> body, const std::vector<std::vector<int>>& axes,
                const std::vector<TensorType>& inputs, const Shape& shape, DType out_dtype,
                const std::string& origin);

}  // namespace ein
