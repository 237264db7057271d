// The Graph IR builder behind `.ein` scripts: a function call is traced, with concrete sizes,
// into one Graph (inputs: the call's tensors, the parameters it reads, constants and random
// draws), and autodiff, fusion, the cost model and the executors take it from there. Each
// method appends a few primitive nodes (map, reduce, contract, view, reshape, slice, concat,
// gather, cast) and checks only what it must to build them; the interpreter (script_eval.cpp)
// checks user-facing rules first and reports them with carets.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "compiler/graph/graph_builder.h"
#include <ein/patterns.h>

namespace ein::script {

/// A tensor being traced: a node of the builder's graph.
struct TensorVal {
  int node = -1;
  Shape shape;
  DType dtype = DType::f32;
};

/// Traces a call into Graph IR over the shared ein::GraphBuilder (compiler/graph/graph_builder.h),
/// in TensorVals, with numpy broadcasting, and tags each node with the expression it came from.
class GraphBuilder {
 public:
  explicit GraphBuilder(std::string origin);
  GraphBuilder(const GraphBuilder&) = delete;             ///< the builder's observer holds this
  GraphBuilder& operator=(const GraphBuilder&) = delete;  ///< the builder's observer holds this

  /// A new graph input (InputAttr: the number of inputs so far).
  TensorVal input(Shape shape, DType dtype);
  /// Number of inputs added.
  int num_inputs() const { return b_.num_inputs(); }

  /// Elementwise map over `xs` broadcast like numpy (right-aligned, size 1 stretches); the
  /// result has dtype `out`. Throws std::invalid_argument naming the two shapes when they do
  /// not broadcast.
  TensorVal map(const std::vector<TensorVal>& xs, DType out, const MapBody& body,
                const std::string& name);
  /// A map over a fixed shape whose body may read the output's index (Kernel::index).
  TensorVal map_shaped(const std::vector<TensorVal>& xs, const Shape& shape, DType out,
                       const MapBody& body, const std::string& name);

  /// Reduction of `dims` (distinct, in range) with `r`; `keepdim` leaves size-1 dims.
  TensorVal reduce(const TensorVal& x, Reduction r, std::vector<int> dims, bool keepdim,
                   std::optional<int64_t> ddof = std::nullopt);
  /// An einops op (rearrange, reduce, repeat, einsum) resolved by the pattern sema (its
  /// UserErrors point into `pattern`'s own source) and lowered inline.
  TensorVal pattern(PatternOp op, const std::string& pattern, const std::vector<TensorVal>& xs,
                    const std::vector<AxisSize>& sizes = {}, Reduction r = Reduction::none,
                    std::optional<int64_t> ddof = std::nullopt);
  /// torch.matmul semantics for 1-D and batched operands, as one contraction.
  TensorVal matmul(const TensorVal& a, const TensorVal& b);
  /// x[start:stop] along `dim` (bounds already clamped).
  TensorVal slice(const TensorVal& x, int dim, int64_t start, int64_t stop, int64_t step = 1);
  /// x reshaped (a view when strides allow).
  TensorVal reshape(const TensorVal& x, Shape shape);
  /// x with dims permuted: output dim i is input dim order[i].
  TensorVal permute(const TensorVal& x, std::vector<int64_t> order);
  /// Concatenation along `dim`.
  TensorVal concat(const std::vector<TensorVal>& xs, int dim);
  /// Rows of `table` picked by integer `indices`: shape indices.shape + table.shape[1:].
  TensorVal gather(const TensorVal& table, const TensorVal& indices);
  /// x converted to `dtype` (x itself when it already is).
  TensorVal cast(const TensorVal& x, DType dtype);
  /// x broadcast to `shape` (numpy rules), as a stride-0 view.
  TensorVal broadcast_to(const TensorVal& x, const Shape& shape);

  /// Inlines `sub` with its inputs bound to `args` (in InputAttr order); returns the nodes
  /// of its outputs.
  std::vector<int> inline_graph(const Graph& sub, const std::vector<int>& args) {
    return b_.inline_graph(sub, args);
  }

  /// The graph, with `outputs` set and verified.
  Graph finish(std::vector<int> outputs) { return b_.finish(std::move(outputs)); }
  /// The graph so far.
  const Graph& graph() const { return b_.graph(); }
  /// The node of `x` comes from `range` of `source`: its run-time errors point there.
  void locate(const TensorVal& x, SourcePtr source, SourceRange range) {
    b_.locate(x.node, std::move(source), range);
  }
  /// Node `node` as a TensorVal.
  TensorVal value(int node) const;

  /// Nodes added from now on carry `tag` (the interpreter's index of the expression being
  /// evaluated; -1: none). Returns the previous tag.
  int set_tag(int tag) {
    const int old = tag_;
    tag_ = tag;
    return old;
  }
  /// Per node: the tag it was added under.
  const std::vector<int>& tags() const { return tags_; }

 private:
  ein::GraphBuilder b_;    ///< builds the graph; tells us of each node for tags_
  int tag_ = -1;           ///< the tag nodes get now
  std::vector<int> tags_;  ///< per node: its tag
};

/// numpy's broadcast of two shapes, or nullopt when they do not broadcast.
std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b);

/// The dtype of an arithmetic result: the floating operand's, else the wider integer.
DType promote(DType a, DType b);

}  // namespace ein::script
