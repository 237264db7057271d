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

GraphBuilder::GraphBuilder(std::string origin) : b_(std::move(origin)) {
  b_.observe([this](int) { tags_.push_back(tag_); });
}

TensorVal GraphBuilder::value(int node) const {
  return {node, b_.node(node).shape, b_.node(node).dtype};
}

TensorVal GraphBuilder::input(Shape shape, DType dtype) {
  return value(b_.input(std::move(shape), dtype));
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
  // Kernel names become symbol names: operators ("-", "**") are spelled with letters.
  std::string symbol = name;
  for (char& c : symbol)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
  std::vector<int> inputs;
  std::vector<std::vector<int>> axes;
  for (const TensorVal& x : xs) {  // right-aligned: numpy's broadcast
    axes.emplace_back(x.shape.size());
    std::iota(axes.back().begin(), axes.back().end(),
              static_cast<int>(shape.size() - x.shape.size()));
    inputs.push_back(x.node);
  }
  return value(b_.map(std::move(inputs), std::move(axes), shape, out, std::move(symbol), body));
}

TensorVal GraphBuilder::reduce(const TensorVal& x, Reduction r, std::vector<int> dims,
                               bool keepdim, std::optional<int64_t> ddof) {
  const TensorVal y = value(b_.reduce_dims(x.node, r, dims, ddof));
  if (!keepdim) return y;
  // Put size-1 dims back where the reduced ones were: a view of new broadcast axes.
  std::vector<int> positions;
  Shape shape = x.shape;
  for (int d : dims)
    shape[d] = 1;
  for (size_t d = 0; d < x.shape.size(); ++d)
    if (std::find(dims.begin(), dims.end(), static_cast<int>(d)) == dims.end())
      positions.push_back(static_cast<int>(d));
  return value(b_.broadcast(y.node, positions, std::move(shape)));
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

TensorVal GraphBuilder::slice(const TensorVal& x, int dim, int64_t start, int64_t stop,
                              int64_t step) {
  if (start == 0 && stop == x.shape.at(dim) && step == 1) return x;
  return value(b_.slice(x.node, dim, start, stop, step));
}

TensorVal GraphBuilder::reshape(const TensorVal& x, Shape shape) {
  if (shape == x.shape) return x;
  // A view that splits every input dim into its elementary factors would be general; the
  // cases traced scripts need (dropping or adding size-1 dims, merging neighbours) are what
  // the reshape node does.
  return value(b_.reshape(x.node, std::move(shape)));
}

TensorVal GraphBuilder::permute(const TensorVal& x, std::vector<int64_t> order) {
  return value(b_.permute(x.node, std::move(order)));
}

TensorVal GraphBuilder::concat(const std::vector<TensorVal>& xs, int dim) {
  std::vector<int> nodes;
  for (const TensorVal& x : xs)
    nodes.push_back(x.node);
  return value(b_.concat(nodes, dim));
}

TensorVal GraphBuilder::gather(const TensorVal& table, const TensorVal& indices) {
  return value(b_.gather(table.node, indices.node));
}

TensorVal GraphBuilder::cast(const TensorVal& x, DType dtype) {
  if (x.dtype == dtype) return x;
  return value(b_.cast(x.node, dtype));
}

TensorVal GraphBuilder::broadcast_to(const TensorVal& x, const Shape& shape) {
  if (x.shape == shape) return x;
  // x's dim k lands on output dim k + lead, unless it is a size-1 dim being stretched.
  const size_t lead = shape.size() - x.shape.size();
  std::vector<int> positions;
  for (size_t k = 0; k < x.shape.size(); ++k)
    positions.push_back(x.shape[k] == 1 && shape[k + lead] != 1 ? -1 : static_cast<int>(k + lead));
  return value(b_.broadcast(x.node, positions, shape));
}

}  // namespace ein::script
