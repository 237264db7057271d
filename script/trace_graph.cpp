// GraphBuilder: primitive Graph IR nodes for the ops of traced `.ein` functions.
#include "script/trace_graph.h"

#include <algorithm>
#include <cctype>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

#include "compiler/graph/lower_patterns.h"
#include <ein/pattern_cache.h>

namespace ein::script {

std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (x != y && x != 1 && y != 1) return std::nullopt;
    out[i] = x == 1 ? y : x;
  }
  return out;
}

DType promote(DType a, DType b) {
  const bool fa = kFloatDTypes.contains(a), fb = kFloatDTypes.contains(b);
  if (fa && fb) return element_size(a) >= element_size(b) ? a : b;
  if (fa) return a;
  if (fb) return b;
  return element_size(a) >= element_size(b) ? a : b;
}

GraphBuilder::GraphBuilder(std::string origin) { g_.origin = std::move(origin); }

int GraphBuilder::add(GraphNode n) {
  tags_.push_back(tag_);
  return g_.add(std::move(n));
}

TensorVal GraphBuilder::value(int node) const {
  return {node, g_.nodes[node].shape, g_.nodes[node].dtype};
}

TensorVal GraphBuilder::input(Shape shape, DType dtype) {
  GraphNode n;
  n.op = GraphOp::input;
  n.shape = std::move(shape);
  n.dtype = dtype;
  n.attr = InputAttr{inputs_++};
  return value(add(std::move(n)));
}

TensorVal GraphBuilder::map(const std::vector<TensorVal>& xs, DType out, const MapBody& body,
                            const std::string& name) {
  Shape shape;
  for (const TensorVal& x : xs) {
    auto b = broadcast_shapes(shape, x.shape);
    if (!b)
      throw std::invalid_argument(fmt::format("shapes ({}) and ({}) do not broadcast",
                                              fmt::join(shape, ", "), fmt::join(x.shape, ", ")));
    shape = *b;
  }
  return map_shaped(xs, shape, out, body, name);
}

TensorVal GraphBuilder::map_shaped(const std::vector<TensorVal>& xs, const Shape& shape, DType out,
                                   const MapBody& body, const std::string& name) {
  auto k = std::make_shared<Kernel>();
  // Kernel names become symbol names: operators ("-", "**") are spelled with letters.
  k->name = name;
  for (char& c : k->name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
  k->origin = g_.origin;
  std::vector<int> loads;
  MapAttr attr;
  GraphNode n;
  n.op = GraphOp::map;
  for (size_t i = 0; i < xs.size(); ++i) {
    loads.push_back(k->load(static_cast<int>(i)));
    std::vector<int> axes(xs[i].shape.size());
    std::iota(axes.begin(), axes.end(), static_cast<int>(shape.size() - xs[i].shape.size()));
    attr.axes.push_back(std::move(axes));
    n.inputs.push_back(xs[i].node);
  }
  k->body = k->result = body(*k, loads);
  attr.body = std::move(k);
  n.shape = shape;
  n.dtype = out;
  n.attr = std::move(attr);
  return value(add(std::move(n)));
}

TensorVal GraphBuilder::reduce(const TensorVal& x, Reduction r, std::vector<int> dims,
                               bool keepdim, std::optional<int64_t> ddof) {
  ReduceAttr a{r, ddof, std::vector<bool>(x.shape.size(), false), {}};
  for (int d : dims)
    a.reduced.at(d) = true;
  Shape kept;
  for (size_t d = 0; d < x.shape.size(); ++d)
    if (!a.reduced[d]) kept.push_back(x.shape[d]);
  a.out_order.resize(kept.size());
  std::iota(a.out_order.begin(), a.out_order.end(), 0);
  const std::vector<bool> reduced = a.reduced;
  GraphNode n;
  n.op = GraphOp::reduce;
  n.inputs = {x.node};
  n.shape = kept;
  n.dtype = x.dtype;
  n.attr = std::move(a);
  TensorVal y = value(add(std::move(n)));
  if (!keepdim) return y;
  // Put size-1 dims back where the reduced ones were: a view of new broadcast axes.
  ViewAttr v;
  GraphNode w;
  w.op = GraphOp::view;
  w.inputs = {y.node};
  int e = 0;
  for (int64_t s : kept)
    v.split.push_back({s});
  for (size_t d = 0; d < x.shape.size(); ++d) {
    if (reduced[d]) {
      v.dims.push_back({});
      w.shape.push_back(1);
    } else {
      v.dims.push_back({e++});
      w.shape.push_back(x.shape[d]);
    }
  }
  w.dtype = x.dtype;
  w.attr = std::move(v);
  return value(add(std::move(w)));
}

TensorVal GraphBuilder::pattern(PatternOp op, const std::string& pattern,
                                const std::vector<TensorVal>& xs,
                                const std::vector<AxisSize>& sizes, Reduction r,
                                std::optional<int64_t> ddof) {
  ResolveRequest req;
  req.op = op;
  req.reduction = r;
  req.ddof = ddof;
  req.sizes = sizes;
  req.dtype = xs.front().dtype;
  std::vector<TensorType> types;
  std::vector<int> args;
  for (const TensorVal& x : xs) {
    req.shapes.push_back(x.shape);
    types.push_back({x.shape, x.dtype});
    args.push_back(x.node);
  }
  auto recipe = resolve_cached(pattern, req);
  const Graph sub = lower_pattern(*recipe, types, ddof, 0, pattern);
  return value(inline_graph(sub, args).front());
}

TensorVal GraphBuilder::matmul(const TensorVal& a, const TensorVal& b) {
  auto names = [](const char* prefix, size_t n) {
    std::vector<std::string> v;
    for (size_t i = 0; i < n; ++i)
      v.push_back(fmt::format("{}{}", prefix, i));
    return v;
  };
  if (a.shape.empty() || b.shape.empty())
    throw std::invalid_argument("matmul needs operands with at least one dim");
  // Batch dims broadcast like torch.matmul; stretched operands become stride-0 views.
  const size_t ba = a.shape.size() >= 2 ? a.shape.size() - 2 : 0;
  const size_t bb = b.shape.size() >= 2 ? b.shape.size() - 2 : 0;
  Shape batch_a(a.shape.begin(), a.shape.begin() + ba), batch_b(b.shape.begin(), b.shape.begin() + bb);
  auto batch = broadcast_shapes(batch_a, batch_b);
  if (!batch) throw std::invalid_argument("matmul: batch dims do not broadcast");
  TensorVal x = a, y = b;
  auto stretch = [&](const TensorVal& t, const Shape& own, size_t tail) {
    if (own == *batch || own.empty()) return t;
    Shape target = *batch;
    target.insert(target.end(), t.shape.end() - tail, t.shape.end());
    return broadcast_to(t, target);
  };
  x = stretch(a, batch_a, a.shape.size() - ba);
  y = stretch(b, batch_b, b.shape.size() - bb);
  const auto bn = names("z", batch->size());
  auto side = [&](size_t rank, bool batched, std::vector<std::string> tail) {
    std::vector<std::string> s;
    if (batched && rank >= 2)
      s.insert(s.end(), bn.end() - (rank - 2), bn.end());
    s.insert(s.end(), tail.begin(), tail.end());
    return fmt::format("{}", fmt::join(s, " "));
  };
  const bool a_vec = x.shape.size() == 1, b_vec = y.shape.size() == 1;
  const std::string lhs = side(x.shape.size(), true, a_vec ? std::vector<std::string>{"k"}
                                                            : std::vector<std::string>{"n", "k"});
  const std::string rhs = side(y.shape.size(), true, b_vec ? std::vector<std::string>{"k"}
                                                            : std::vector<std::string>{"k", "m"});
  std::vector<std::string> out;
  const size_t out_batch = std::max(x.shape.size() >= 2 ? x.shape.size() - 2 : 0,
                                    y.shape.size() >= 2 ? y.shape.size() - 2 : 0);
  out.insert(out.end(), bn.end() - out_batch, bn.end());
  if (!a_vec) out.push_back("n");
  if (!b_vec) out.push_back("m");
  const std::string pat = fmt::format("{}, {} -> {}", lhs, rhs, fmt::join(out, " "));
  return pattern(PatternOp::einsum, pat, {x, y});
}

TensorVal GraphBuilder::slice(const TensorVal& x, int dim, int64_t start, int64_t stop) {
  if (start == 0 && stop == x.shape.at(dim)) return x;
  GraphNode n;
  n.op = GraphOp::slice;
  n.inputs = {x.node};
  n.shape = x.shape;
  n.shape[dim] = stop - start;
  n.dtype = x.dtype;
  n.attr = SliceAttr{dim, start, stop};
  return value(add(std::move(n)));
}

TensorVal GraphBuilder::reshape(const TensorVal& x, Shape shape) {
  if (shape == x.shape) return x;
  // A view that splits every input dim into its elementary factors would be general; the
  // cases traced scripts need (dropping or adding size-1 dims, merging neighbours) are what
  // the reshape node does.
  GraphNode n;
  n.op = GraphOp::reshape;
  n.inputs = {x.node};
  n.shape = std::move(shape);
  n.dtype = x.dtype;
  return value(add(std::move(n)));
}

TensorVal GraphBuilder::permute(const TensorVal& x, std::vector<int64_t> order) {
  GraphNode n;
  n.op = GraphOp::permute;
  n.inputs = {x.node};
  for (int64_t d : order)
    n.shape.push_back(x.shape.at(d));
  n.dtype = x.dtype;
  n.attr = PermuteAttr{std::move(order)};
  return value(add(std::move(n)));
}

TensorVal GraphBuilder::concat(const std::vector<TensorVal>& xs, int dim) {
  GraphNode n;
  n.op = GraphOp::concat;
  n.shape = xs.front().shape;
  n.shape[dim] = 0;
  ConcatAttr a{dim, {}};
  for (const TensorVal& x : xs) {
    n.inputs.push_back(x.node);
    n.shape[dim] += x.shape[dim];
    a.spans.push_back(1);
  }
  n.dtype = xs.front().dtype;
  n.attr = std::move(a);
  return value(add(std::move(n)));
}

TensorVal GraphBuilder::gather(const TensorVal& table, const TensorVal& indices) {
  GraphNode n;
  n.op = GraphOp::gather;
  n.inputs = {table.node, indices.node};
  n.shape = indices.shape;
  n.shape.insert(n.shape.end(), table.shape.begin() + 1, table.shape.end());
  n.dtype = table.dtype;
  return value(add(std::move(n)));
}

TensorVal GraphBuilder::cast(const TensorVal& x, DType dtype) {
  if (x.dtype == dtype) return x;
  GraphNode n;
  n.op = GraphOp::cast;
  n.inputs = {x.node};
  n.shape = x.shape;
  n.dtype = dtype;
  return value(add(std::move(n)));
}

TensorVal GraphBuilder::broadcast_to(const TensorVal& x, const Shape& shape) {
  if (x.shape == shape) return x;
  ViewAttr v;
  for (int64_t s : x.shape)
    v.split.push_back({s});
  const size_t lead = shape.size() - x.shape.size();
  for (size_t j = 0; j < shape.size(); ++j) {
    if (j < lead || (x.shape[j - lead] == 1 && shape[j] != 1))
      v.dims.push_back({});
    else
      v.dims.push_back({static_cast<int>(j - lead)});
  }
  GraphNode n;
  n.op = GraphOp::view;
  n.inputs = {x.node};
  n.shape = shape;
  n.dtype = x.dtype;
  n.attr = std::move(v);
  return value(add(std::move(n)));
}

std::vector<int> GraphBuilder::inline_graph(const Graph& sub, const std::vector<int>& args) {
  std::vector<int> id(sub.nodes.size(), -1);
  for (size_t i = 0; i < sub.nodes.size(); ++i) {
    const GraphNode& n = sub.nodes[i];
    if (n.op == GraphOp::input) {
      id[i] = args.at(std::get<InputAttr>(n.attr).index);
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

Graph GraphBuilder::finish(std::vector<int> outputs) {
  Graph g = g_;
  g.outputs = std::move(outputs);
  verify(g);
  return g;
}

}  // namespace ein::script
