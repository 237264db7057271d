// gather and scatter_add on tensors (include/ein/ops.h): each runs a one-node Graph IR through
// the tape, so the ops are differentiable (gather's VJP is a scatter_add and back); the kernels
// themselves are exec/indexing.h's.
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include <ein/errors.h>
#include <ein/ops.h>
#include <fmt/format.h>

#include "api/tape.h"
#include "compiler/graph/graph_builder.h"

namespace ein {
namespace {

/// indices' shape followed by one row's: the shape of a gather's result.
Shape gathered_shape(const Tensor& indices, const Shape& row) {
  Shape out = indices.shape();
  out.insert(out.end(), row.begin(), row.end());
  return out;
}

/// The one-node graph of a gather or scatter_add for these operand types, built once per
/// types: the tape caches backward graphs by graph.
std::shared_ptr<const Graph> indexing_graph(GraphOp op, const Tensor& x, const Tensor& indices,
                                            const Shape& out_shape) {
  using Key = std::tuple<GraphOp, Shape, DType, Shape, DType, Shape>;
  static std::mutex mutex;
  static std::map<Key, std::shared_ptr<const Graph>> graphs;
  std::lock_guard lock(mutex);
  auto& slot = graphs[{op, x.shape(), x.dtype(), indices.shape(), indices.dtype(), out_shape}];
  if (!slot) {
    GraphBuilder b(std::string(graph_op_name(op)));
    const int xi = b.input(x.shape(), x.dtype()), ii = b.input(indices.shape(), indices.dtype());
    slot = std::make_shared<const Graph>(b.finish({b.add(op, {xi, ii}, out_shape, x.dtype())}));
  }
  return slot;
}

}  // namespace

Tensor gather(const Tensor& table, const Tensor& indices) {
  if (!table.defined() || table.dim() == 0)
    throw RuntimeError("gather: the table needs a first dim of rows");
  const Shape row(table.shape().begin() + 1, table.shape().end());
  return run_recorded(indexing_graph(GraphOp::gather, table, indices, gathered_shape(indices, row)),
                      {table, indices})
      .front();
}

Tensor scatter_add(const Tensor& values, const Tensor& indices, int64_t num_rows) {
  if (!values.defined()) throw RuntimeError("scatter_add: the values are undefined");
  const int64_t k = indices.defined() ? indices.dim() : 0;
  if (values.dim() < k ||
      !std::equal(indices.shape().begin(), indices.shape().end(), values.shape().begin()))
    throw RuntimeError(
        fmt::format("scatter_add: values of shape {} do not start with the indices' "
                    "shape {}",
                    shape_str(values.shape()), shape_str(indices.shape())));
  Shape out{num_rows};
  out.insert(out.end(), values.shape().begin() + k, values.shape().end());
  return run_recorded(indexing_graph(GraphOp::scatter_add, values, indices, out), {values, indices})
      .front();
}

}  // namespace ein
