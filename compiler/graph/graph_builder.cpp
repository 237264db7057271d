// GraphBuilder: each typed helper computes its node's shape and attribute and goes through
// add(GraphNode), the one place a node is appended, inputs are counted and observers told.
#include "compiler/graph/graph_builder.h"

#include <algorithm>
#include <numeric>
#include <utility>

namespace ein {

GraphBuilder::GraphBuilder(std::string origin) {
  graph_.origin = std::move(origin);
}

GraphBuilder::GraphBuilder(Graph graph) : graph_(std::move(graph)) {
  for (const GraphNode& n : graph_.nodes)
    if (n.op == GraphOp::input)
      next_input_ = std::max(next_input_, std::get<InputAttr>(n.attr).index + 1);
}

void GraphBuilder::observe(std::function<void(int)> observer) {
  observer_ = std::move(observer);
}

int GraphBuilder::input(Shape shape, DType dtype) {
  return input(std::move(shape), dtype, next_input_);
}

int GraphBuilder::input(Shape shape, DType dtype, int index) {
  return add(GraphOp::input, {}, std::move(shape), dtype, InputAttr{index});
}

int GraphBuilder::add(GraphOp op, std::vector<int> inputs, Shape shape, DType dtype,
                      decltype(GraphNode::attr) attr) {
  GraphNode n;
  n.op = op;
  n.inputs = std::move(inputs);
  n.shape = std::move(shape);
  n.dtype = dtype;
  n.attr = std::move(attr);
  return add(std::move(n));
}

int GraphBuilder::add(GraphNode node) {
  if (node.op == GraphOp::input)
    next_input_ = std::max(next_input_, std::get<InputAttr>(node.attr).index + 1);
  const int id = graph_.add(std::move(node));
  if (observer_) observer_(id);
  return id;
}

int GraphBuilder::map(std::vector<int> inputs, std::vector<std::vector<int>> axes, Shape shape,
                      DType dtype, std::shared_ptr<const Kernel> body) {
  return add(GraphOp::map, std::move(inputs), std::move(shape), dtype,
             MapAttr{std::move(body), std::move(axes)});
}

int GraphBuilder::map(std::vector<int> inputs, std::vector<std::vector<int>> axes, Shape shape,
                      DType dtype, std::string name, const MapBody& body) {
  auto k = map_kernel(std::move(name));
  std::vector<int> loads;
  for (size_t i = 0; i < inputs.size(); ++i)
    loads.push_back(k->load(static_cast<int>(i)));
  k->body = k->result = body(*k, loads);
  return map(std::move(inputs), std::move(axes), std::move(shape), dtype, std::move(k));
}

std::shared_ptr<Kernel> GraphBuilder::map_kernel(std::string name) const {
  auto k = std::make_shared<Kernel>();
  k->name = std::move(name);
  k->origin = graph_.origin;
  return k;
}

int GraphBuilder::reduce(int x, Reduction r, std::vector<bool> reduced,
                         std::optional<int64_t> ddof) {
  const GraphNode& in = node(x);
  Shape kept;
  for (size_t d = 0; d < in.shape.size(); ++d)
    if (!reduced[d]) kept.push_back(in.shape[d]);
  std::vector<int> order(kept.size());
  std::iota(order.begin(), order.end(), 0);
  // torch's rule: the sum and product of any integer dtype are i64.
  const bool integer = in.dtype == DType::i64 || in.dtype == DType::i32 ||
                       in.dtype == DType::i8 || in.dtype == DType::u8;
  const DType dtype = integer && (r == Reduction::sum || r == Reduction::prod) ? DType::i64 : in.dtype;
  return add(GraphOp::reduce, {x}, std::move(kept), dtype,
             ReduceAttr{r, ddof, std::move(reduced), std::move(order)});
}

int GraphBuilder::reduce_dims(int x, Reduction r, const std::vector<int>& dims,
                              std::optional<int64_t> ddof) {
  std::vector<bool> reduced(node(x).shape.size(), false);
  for (int d : dims)
    reduced.at(d) = true;
  return reduce(x, r, std::move(reduced), ddof);
}

int GraphBuilder::broadcast(int x, const std::vector<int>& positions, Shape shape) {
  ViewAttr v;
  for (int64_t s : node(x).shape)
    v.split.push_back({s});
  v.dims.assign(shape.size(), {});
  for (size_t j = 0; j < positions.size(); ++j)
    if (positions[j] >= 0) v.dims[positions[j]] = {static_cast<int>(j)};
  const DType dtype = node(x).dtype;
  return add(GraphOp::view, {x}, std::move(shape), dtype, std::move(v));
}

int GraphBuilder::permute(int x, std::vector<int64_t> order) {
  Shape shape;
  for (int64_t d : order)
    shape.push_back(node(x).shape.at(d));
  const DType dtype = node(x).dtype;
  return add(GraphOp::permute, {x}, std::move(shape), dtype, PermuteAttr{std::move(order)});
}

int GraphBuilder::reshape(int x, Shape shape) {
  const DType dtype = node(x).dtype;
  return add(GraphOp::reshape, {x}, std::move(shape), dtype);
}

int GraphBuilder::slice(int x, int64_t dim, int64_t start, int64_t stop, int64_t step) {
  if (step < 1) throw std::logic_error("internal error: a slice step below 1");
  Shape shape = node(x).shape;
  shape.at(dim) = (stop - start + step - 1) / step;
  const DType dtype = node(x).dtype;
  return add(GraphOp::slice, {x}, std::move(shape), dtype, SliceAttr{dim, start, stop, step});
}

int GraphBuilder::concat(const std::vector<int>& xs, int64_t dim) {
  Shape shape = node(xs.front()).shape;
  shape.at(dim) = 0;
  for (int x : xs)
    shape[dim] += node(x).shape.at(dim);
  const DType dtype = node(xs.front()).dtype;
  return add(GraphOp::concat, xs, std::move(shape), dtype,
             ConcatAttr{dim, std::vector<int64_t>(xs.size(), 1)});
}

int GraphBuilder::cast(int x, DType dtype) {
  Shape shape = node(x).shape;
  return add(GraphOp::cast, {x}, std::move(shape), dtype);
}

int GraphBuilder::gather(int table, int indices) {
  Shape shape = node(indices).shape;
  const Shape& rows = node(table).shape;
  shape.insert(shape.end(), rows.begin() + 1, rows.end());
  const DType dtype = node(table).dtype;
  return add(GraphOp::gather, {table, indices}, std::move(shape), dtype);
}

std::vector<int> GraphBuilder::inline_graph(const Graph& sub, const std::vector<int>& args) {
  std::vector<int> id(sub.nodes.size(), -1);
  for (size_t i = 0; i < sub.nodes.size(); ++i) {
    const GraphNode& n = sub.nodes[i];
    if (n.op == GraphOp::input) {
      const auto k = static_cast<size_t>(std::get<InputAttr>(n.attr).index);
      id[i] = k < args.size() ? args[k] : input(n.shape, n.dtype);
      continue;
    }
    GraphNode copy = n;
    for (int& in : copy.inputs)
      in = id[in];
    id[i] = add(std::move(copy));
  }
  std::vector<int> outs;
  for (int o : sub.outputs)
    outs.push_back(id[o]);
  return outs;
}

Graph GraphBuilder::finish() {
  verify(graph_);
  return take();
}

Graph GraphBuilder::finish(std::vector<int> outputs) {
  graph_.outputs = std::move(outputs);
  return finish();
}

Graph GraphBuilder::take() {
  Graph g = std::move(graph_);
  graph_ = Graph{};
  next_input_ = 0;
  return g;
}

}  // namespace ein
