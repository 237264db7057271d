// GraphBuilder: the one way Graph IR is built by hand. It numbers the graph's inputs, appends
// typed nodes with their shapes, dtypes and attributes, gives map kernels the graph's origin,
// inlines whole graphs and finishes with verify(). Pattern lowering, the standard functions,
// autodiff, the script tracer, the eager ops and the tests all build through it. It checks no
// user rule (its callers do, with their own messages) and keeps no side tables: a caller that
// tags nodes (autodiff's GradOrigin, the tracer's source ranges) observes them as they come.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compiler/graph/graph.h"

namespace ein {

/// Builds a map body: gets the kernel and one load per input (made first, in input order) and
/// returns the value node.
using MapBody = std::function<int(Kernel& k, const std::vector<int>& loads)>;

/// Appends nodes to one Graph it owns; ids are node ids of that graph.
class GraphBuilder {
 public:
  /// An empty graph that came from `origin` (the pattern or expression; map kernels get it too).
  explicit GraphBuilder(std::string origin = {});
  /// Continues `graph`: nodes are appended after its own, new inputs numbered after its inputs.
  explicit GraphBuilder(Graph graph);

  /// From now on `observer(id)` runs for every node appended (for callers' per-node tables).
  void observe(std::function<void(int node)> observer);

  /// A new graph input, numbered after the inputs so far.
  int input(Shape shape, DType dtype = DType::f32);
  /// A graph input with an explicit index (autodiff's cotangents follow the forward's inputs).
  int input(Shape shape, DType dtype, int index);
  /// The index the next input() gets: one past the highest index so far.
  int num_inputs() const { return next_input_; }

  /// Appends a node of any op; its shape, dtype and attribute are the caller's. Returns its id.
  int add(GraphOp op, std::vector<int> inputs, Shape shape, DType dtype,
          decltype(GraphNode::attr) attr = std::monostate{});
  /// Appends `node` as it is; returns its id.
  int add(GraphNode node);

  /// A map over `shape` computing `body` (its loads read `inputs` in order); input i's dim d is
  /// output dim axes[i][d] (size 1 broadcasts).
  int map(std::vector<int> inputs, std::vector<std::vector<int>> axes, Shape shape, DType dtype,
          std::shared_ptr<const Kernel> body);
  /// The same, the kernel made here by map_kernel(name) and `body` (given one load per input).
  int map(std::vector<int> inputs, std::vector<std::vector<int>> axes, Shape shape, DType dtype,
          std::string name, const MapBody& body);
  /// An empty map kernel named `name`, carrying the graph's origin.
  std::shared_ptr<Kernel> map_kernel(std::string name) const;

  /// x combined with `r` over the dims flagged in `reduced`; the kept dims stay in input order
  /// (identity out_order); the dtype is x's.
  int reduce(int x, Reduction r, std::vector<bool> reduced,
             std::optional<int64_t> ddof = std::nullopt);
  /// x combined with `r` over `dims` (distinct, each in range), as reduce().
  int reduce_dims(int x, Reduction r, const std::vector<int>& dims,
                  std::optional<int64_t> ddof = std::nullopt);
  /// A view of `shape`: x's dim j becomes output dim positions[j] (-1: dropped, it must have
  /// size 1); every output dim no x dim lands on is a new broadcast axis (stride 0).
  int broadcast(int x, const std::vector<int>& positions, Shape shape);
  /// x with its dims reordered: output dim i is input dim order[i].
  int permute(int x, std::vector<int64_t> order);
  /// x with `shape` (a view when the strides allow, else a copy).
  int reshape(int x, Shape shape);
  /// [start, stop) of x's dim `dim`.
  /// x[..., start:stop:step, ...] along `dim` (0 <= start <= stop <= size, step >= 1): a view.
  int slice(int x, int64_t dim, int64_t start, int64_t stop, int64_t step = 1);
  /// xs side by side along `dim` (one dim of each); the other dims and the dtype are xs[0]'s.
  int concat(const std::vector<int>& xs, int64_t dim);
  /// x converted to `dtype` (a node even when it already is).
  int cast(int x, DType dtype);
  /// Rows of `table` picked by integer `indices`: shape indices.shape + table.shape[1:].
  int gather(int table, int indices);

  /// Appends `sub`'s nodes with its input k bound to args[k]; its inputs past args.size()
  /// become new inputs here, numbered on. Returns the ids of sub's outputs here.
  std::vector<int> inline_graph(const Graph& sub, const std::vector<int>& args);

  /// Marks node `id` as the graph's next output.
  void output(int id) { graph_.outputs.push_back(id); }
  /// Node `id` (a reference valid until the next node is appended).
  const GraphNode& node(int id) const { return graph_.nodes[id]; }
  /// Marks node `id` as coming from `range` of `source` (GraphNode::source): its run-time
  /// errors point there.
  void locate(int id, SourcePtr source, SourceRange range) {
    graph_.nodes[id].source = std::move(source);
    graph_.nodes[id].range = range;
  }
  /// The graph so far.
  const Graph& graph() const { return graph_; }

  /// The graph with the outputs marked so far, verified; the builder is left empty.
  Graph finish();
  /// The graph with `outputs` as its outputs (replacing any marked), verified.
  Graph finish(std::vector<int> outputs);
  /// The graph as built, not verified, for a pass that rewrites it first; the builder is left
  /// empty.
  Graph take();

 private:
  Graph graph_;                        ///< what is built
  int next_input_ = 0;                 ///< the index the next input() gets
  std::function<void(int)> observer_;  ///< told of every node appended (may be empty)
};

}  // namespace ein
