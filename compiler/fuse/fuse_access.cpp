// Affine index maps through layout nodes, for the fusion pass: a kernel reading a value through
// views, permutes, slices and splitting reshapes reads it with strides Σ_t stride_t · m[t][d].
#include <stdexcept>

#include "compiler/fuse/fuse_internal.h"

namespace ein::detail {

Affine Affine::identity(size_t rank) {
  Affine a;
  a.m.assign(rank, std::vector<int64_t>(rank, 0));
  for (size_t i = 0; i < rank; ++i)
    a.m[i][i] = 1;
  a.o.assign(rank, 0);
  a.cols = rank;
  return a;
}

Affine Affine::after(const Affine& inner) const {
  Affine r;
  r.cols = inner.cols;
  r.m.assign(m.size(), std::vector<int64_t>(inner.cols, 0));
  r.o = o;
  for (size_t t = 0; t < m.size(); ++t)
    for (size_t k = 0; k < inner.m.size(); ++k) {
      if (m[t][k] == 0) continue;
      for (size_t j = 0; j < inner.cols; ++j)
        r.m[t][j] += m[t][k] * inner.m[k][j];
      r.o[t] += m[t][k] * inner.o[k];
    }
  return r;
}

bool is_total(const Graph& g, const Group& grp, size_t m) {
  if (grp.reduced == 0 || g.nodes[grp.members[m]].op != GraphOp::reduce) return false;
  const int p = static_cast<int>(grp.domain.size()) - grp.reduced;
  for (int d : grp.in_place[m])
    if (d >= p) return false;
  return true;
}

bool is_layout(GraphOp op) {
  return op == GraphOp::view || op == GraphOp::permute || op == GraphOp::reshape ||
         op == GraphOp::slice;
}

namespace {

Affine zeros(size_t rows, size_t cols) {
  Affine a;
  a.m.assign(rows, std::vector<int64_t>(cols, 0));
  a.o.assign(rows, 0);
  a.cols = cols;
  return a;
}

/// reshape as a split of each input dim into consecutive output dims (size-1 dims on either
/// side are free); nullopt when some output dim merges input dims.
std::optional<Affine> split_access(const Shape& in, const Shape& out) {
  Affine a = zeros(in.size(), out.size());
  for (int64_t s : in)
    if (s == 0) return std::nullopt;  // the grouping is ambiguous; leave it to the runtime
  size_t j = 0;
  for (size_t t = 0; t < in.size(); ++t) {
    if (in[t] == 1) continue;
    std::vector<size_t> group;
    int64_t product = 1;
    while (product < in[t] && j < out.size()) {
      if (out[j] != 1) {
        group.push_back(j);
        product *= out[j];
      }
      ++j;
    }
    if (product != in[t]) return std::nullopt;
    int64_t inner = 1;
    for (size_t k = group.size(); k-- > 0;) {
      a.m[t][group[k]] = inner;
      inner *= out[group[k]];
    }
  }
  return a;
}

}  // namespace

std::optional<Affine> layout_access(const GraphNode& n, const Shape& in) {
  const size_t rank = n.shape.size();
  switch (n.op) {
    case GraphOp::permute: {
      const auto& order = std::get<PermuteAttr>(n.attr).order;
      Affine a = zeros(in.size(), rank);
      for (size_t i = 0; i < order.size(); ++i)
        a.m[order[i]][i] = 1;
      return a;
    }
    case GraphOp::slice: {
      const auto& s = std::get<SliceAttr>(n.attr);
      Affine a = Affine::identity(rank);
      a.m[s.dim][s.dim] = s.step;
      a.o[s.dim] = s.start;
      return a;
    }
    case GraphOp::view: {
      const std::vector<Shape> weights = view_weights(std::get<ViewAttr>(n.attr));
      Affine a = zeros(in.size(), rank);
      for (size_t d = 0; d < weights.size(); ++d)
        a.m[d] = weights[d];  // rank == the view's output dims
      return a;
    }
    case GraphOp::reshape:
      return split_access(in, n.shape);
    default:
      break;
  }
  throw std::logic_error("internal error: layout_access on a compute node");
}

Operand resolve_operand(const Graph& g, int n, size_t i) {
  const GraphNode& node = g.nodes[n];
  Operand op;
  int cur = node.inputs[i];
  const Shape& x = g.nodes[cur].shape;
  if (const auto* m = std::get_if<MapAttr>(&node.attr)) {
    // The map reads input dim d at its output dim axes[i][d]; size-1 dims broadcast.
    op.access = zeros(x.size(), node.shape.size());
    for (size_t d = 0; d < x.size(); ++d)
      if (x[d] != 1) op.access.m[d][m->axes[i][d]] = 1;
  } else {
    op.access = Affine::identity(x.size());
  }
  while (is_layout(g.nodes[cur].op)) {
    const GraphNode& l = g.nodes[cur];
    const std::optional<Affine> a = layout_access(l, g.nodes[l.inputs[0]].shape);
    if (!a) break;
    op.access = a->after(op.access);
    op.through.push_back(cur);
    cur = l.inputs[0];
  }
  op.source = cur;
  return op;
}

}  // namespace ein::detail
