// Concats folded into the stores of the kernel that computes their pieces (fuse.h's step 7).
// A concat whose inputs are all results of one fused kernel, each read only on its way to the
// concat (through views, permutes and reshapes), is a copy the kernel can avoid: each store
// writes straight into its slot of the concat's tensor. The views and reshapes after the concat
// fold too, as long as each is the only reader of the one before, so the tensor the kernel
// fills is the one its readers see: RoPE's `rearrange([x0 c - x1 s, x0 s + x1 c], "two ... e ->
// ... (e two)")` becomes two strided stores into one (… e·2) tensor instead of a kernel, a concat
// and a reshaping copy.
//
// Each store's index in the final tensor is tracked as an affine function of the kernel's domain
// index (Affine: one row per tensor dim): a store's own dims, then forward through each node —
// a permute reorders the rows, a reshape merges rows (splitting a dim would need a division:
// the chain stops there), a concat adds the slot's start. Every node on the way is a bijection
// onto its slot, so the stores together write each element of the final tensor exactly once.
#include <algorithm>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "compiler/fuse/fuse_internal.h"
#include "compiler/fuse/rewrite.h"

namespace ein::detail {
namespace {

/// Rows of `e` for the non-1 dims of `shape`, in order (a size-1 dim's index is always 0).
std::vector<std::vector<int64_t>> rows_of(const Affine& e, const Shape& shape) {
  std::vector<std::vector<int64_t>> rows;
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] != 1) {
      std::vector<int64_t> row = e.m[i];
      row.push_back(e.o[i]);  // the constant term rides along as the last column
      rows.push_back(std::move(row));
    }
  return rows;
}

/// `e` (an index into a tensor of shape `in`) as an index into the reshape of it to `out`, or
/// nullopt when the reshape splits a dim (that would need a division).
std::optional<Affine> forward_reshape(const Affine& e, const Shape& in, const Shape& out) {
  const std::vector<std::vector<int64_t>> rows = rows_of(e, in);
  Shape sizes;  // of the non-1 input dims
  for (int64_t s : in)
    if (s != 1) sizes.push_back(s);
  Affine r;
  r.cols = e.cols;
  size_t next = 0;  // the next non-1 input dim
  for (int64_t size : out) {
    std::vector<int64_t> row(e.cols + 1, 0);
    if (size != 1) {
      // Merge input dims, outermost first, until their product is this dim's size.
      int64_t product = 1;
      while (product < size && next < rows.size()) {
        product *= sizes[next];
        for (size_t c = 0; c <= e.cols; ++c)
          row[c] = row[c] * sizes[next] + rows[next][c];
        ++next;
      }
      if (product != size) return std::nullopt;
    }
    r.o.push_back(row.back());
    row.pop_back();
    r.m.push_back(std::move(row));
  }
  if (next != rows.size()) return std::nullopt;
  return r;
}

/// `e` (an index into the input of view `a`) as an index into its output, or nullopt when the
/// view is no bijection that keeps each dim whole (a split into several non-1 axes, a diagonal,
/// a broadcast).
std::optional<Affine> forward_view(const Affine& e, const ViewAttr& a, const Shape& out) {
  std::vector<std::vector<int64_t>> axis;  // per elementary axis: its row (constant last)
  std::vector<int64_t> axis_size;
  for (size_t d = 0; d < a.split.size(); ++d) {
    int whole = 0;
    for (int64_t s : a.split[d]) {
      std::vector<int64_t> row(e.cols + 1, 0);
      if (s != 1) {
        if (whole++ > 0) return std::nullopt;
        row = e.m[d];
        row.push_back(e.o[d]);
      }
      axis.push_back(std::move(row));
      axis_size.push_back(s);
    }
  }
  std::vector<int> named(axis.size(), 0);
  Affine r;
  r.cols = e.cols;
  for (size_t j = 0; j < a.dims.size(); ++j) {
    std::vector<int64_t> row(e.cols + 1, 0);
    if (a.dims[j].size() > 1) return std::nullopt;
    if (a.dims[j].empty() && out[j] != 1) return std::nullopt;
    if (!a.dims[j].empty()) {
      const int x = a.dims[j][0];
      if (named[x]++ > 0) return std::nullopt;
      row = axis[x];
    }
    r.o.push_back(row.back());
    row.pop_back();
    r.m.push_back(std::move(row));
  }
  for (size_t x = 0; x < axis.size(); ++x)
    if (axis_size[x] != 1 && named[x] == 0) return std::nullopt;
  return r;
}

/// `e` moved through layout node `n` (input shape `in`), or nullopt.
std::optional<Affine> forward(const Affine& e, const GraphNode& n, const Shape& in) {
  switch (n.op) {
    case GraphOp::reshape:
      return forward_reshape(e, in, n.shape);
    case GraphOp::view:
      return forward_view(e, std::get<ViewAttr>(n.attr), n.shape);
    case GraphOp::permute: {
      Affine r;
      r.cols = e.cols;
      for (int64_t d : std::get<PermuteAttr>(n.attr).order) {
        r.m.push_back(e.m[d]);
        r.o.push_back(e.o[d]);
      }
      return r;
    }
    default:
      return std::nullopt;
  }
}

/// `e` as an index into slot `slot` of concat `n` (its inputs' shapes `ins`).
std::optional<Affine> forward_concat(const Affine& e, const GraphNode& n,
                                     const std::vector<Shape>& ins, size_t slot) {
  const auto& a = std::get<ConcatAttr>(n.attr);
  const size_t dim = static_cast<size_t>(a.dim), span = static_cast<size_t>(a.spans[slot]);
  // The slot's dims [dim, dim + span) merge into one, then move by the slot's start.
  Shape merged(ins[slot].begin(), ins[slot].begin() + static_cast<std::ptrdiff_t>(dim));
  int64_t len = 1;
  for (size_t d = dim; d < dim + span; ++d)
    len *= ins[slot][d];
  merged.push_back(len);
  merged.insert(merged.end(), ins[slot].begin() + static_cast<std::ptrdiff_t>(dim + span),
                ins[slot].end());
  std::optional<Affine> r = forward_reshape(e, ins[slot], merged);
  if (!r) return std::nullopt;
  for (size_t i = 0; i < slot; ++i) {
    int64_t before = 1;
    for (size_t d = dim; d < dim + static_cast<size_t>(a.spans[i]); ++d)
      before *= ins[i][d];
    r->o[dim] += before;
  }
  return r;
}

/// Whether output `k` of `f` is a total store (one value for all rows, combined on the host).
bool total_store(const FusedAttr& f, int k) {
  const int buffer = static_cast<int>(f.reads.size()) + k;
  for (const KernelStore& s : f.kernel->stores)
    if (s.buffer == buffer && s.total != Combine::none) return true;
  return false;
}

struct Folding {
  int fused = -1;             ///< the kernel's node
  std::vector<int> outputs;   ///< per concat input: the kernel output it holds
  std::vector<Affine> index;  ///< per concat input: its store's index in the final tensor
  std::vector<int> chain;     ///< the nodes folded: views before, the concat, views after
  int last = -1;              ///< the final tensor's node
};

/// The folding of a graph's concats, one after another: each is tried, and applied to the
/// graph in place, with the readers of every node kept up to date (built once: a training
/// step has a concat or more per layer).
class Folder {
 public:
  explicit Folder(Graph& g) : g_(g), readers_(g.nodes.size()), output_(g.nodes.size(), 0) {
    for (size_t i = 0; i < g.nodes.size(); ++i)
      for (int in : g.nodes[i].inputs)
        readers_[in].push_back(static_cast<int>(i));
    for (int o : g.outputs)
      output_[o] = 1;
  }

  /// Whether `x` is read by one node only and is no graph output.
  bool private_value(int x) const { return readers_[x].size() == 1 && !output_[x]; }

  /// The fused node and output index that value `x` is, or nullopt.
  std::optional<std::pair<int, int>> kernel_output(int x) const {
    const GraphNode& n = g_.nodes[x];
    if (n.op == GraphOp::result) {
      const int f = n.inputs[0];
      if (g_.nodes[f].op != GraphOp::fused) return std::nullopt;
      return std::pair{f, std::get<ResultAttr>(n.attr).index};
    }
    if (n.op == GraphOp::fused) return std::pair{x, 0};
    return std::nullopt;
  }

  /// Readers of kernel output `x` other than the kernel's own result nodes.
  size_t value_readers(int x) const {
    size_t n = 0;
    for (int r : readers_[x])
      n += g_.nodes[r].op == GraphOp::result ? 0 : 1;
    return n;
  }

  std::optional<Folding> try_concat(int c) const {
    const GraphNode& cat = g_.nodes[c];
    if (cat.inputs.empty()) return std::nullopt;  // a concat an earlier folding consumed
    Folding f;
    std::vector<Shape> ins;
    for (int in : cat.inputs)
      ins.push_back(g_.nodes[in].shape);
    for (size_t slot = 0; slot < cat.inputs.size(); ++slot) {
      std::vector<int> views;  // from the concat back towards the kernel
      int x = cat.inputs[slot];
      while ((g_.nodes[x].op == GraphOp::reshape || g_.nodes[x].op == GraphOp::view ||
              g_.nodes[x].op == GraphOp::permute) &&
             private_value(x)) {
        views.push_back(x);
        x = g_.nodes[x].inputs[0];
      }
      const std::optional<std::pair<int, int>> ko = kernel_output(x);
      if (!ko || output_[x] || value_readers(x) != 1) return std::nullopt;
      if (g_.nodes[x].op == GraphOp::result && !private_value(x)) return std::nullopt;
      const auto [fused, k] = *ko;
      if (f.fused >= 0 && f.fused != fused) return std::nullopt;
      f.fused = fused;
      if (std::find(f.outputs.begin(), f.outputs.end(), k) != f.outputs.end()) return std::nullopt;
      const FusedAttr& attr = std::get<FusedAttr>(g_.nodes[fused].attr);
      if (attr.kernel->domain.empty()) return std::nullopt;  // no strides to place a scalar by
      const FusedOutput& o = attr.outputs[static_cast<size_t>(k)];
      if (o.placed() || o.dtype != cat.dtype || total_store(attr, k)) return std::nullopt;
      // The store's own index: its dim j walks domain dim dims[j].
      Affine e;
      e.cols = attr.kernel->domain.size();
      for (int d : o.dims) {
        std::vector<int64_t> row(e.cols, 0);
        if (d >= 0) row[static_cast<size_t>(d)] = 1;
        e.m.push_back(std::move(row));
        e.o.push_back(0);
      }
      Shape shape = o.shape;
      for (size_t v = views.size(); v-- > 0;) {
        std::optional<Affine> moved = forward(e, g_.nodes[views[v]], shape);
        if (!moved) return std::nullopt;
        e = std::move(*moved);
        shape = g_.nodes[views[v]].shape;
      }
      std::optional<Affine> placed = forward_concat(e, cat, ins, slot);
      if (!placed) return std::nullopt;
      f.outputs.push_back(k);
      f.index.push_back(std::move(*placed));
      f.chain.insert(f.chain.end(), views.rbegin(), views.rend());
    }
    f.chain.push_back(c);
    // Forward through the views after the concat while each is its reader's only value.
    f.last = c;
    while (private_value(f.last)) {
      const int next = readers_[f.last][0];
      std::vector<Affine> moved;
      for (const Affine& e : f.index) {
        std::optional<Affine> m = forward(e, g_.nodes[next], g_.nodes[f.last].shape);
        if (!m) break;
        moved.push_back(std::move(*m));
      }
      if (moved.size() != f.index.size()) break;
      f.index = std::move(moved);
      f.chain.push_back(next);
      f.last = next;
    }
    return f;
  }

  /// The graph with `f` applied: the kernel's outputs placed into the final tensor, the final
  /// node's readers reading the kernel's holder output, the chain and the other outputs'
  /// result nodes left for compact() to drop.
  void apply(const Folding& f, const std::vector<int>& source) {
    GraphNode& kernel = g_.nodes[f.fused];
    auto& attr = std::get<FusedAttr>(kernel.attr);
    const GraphNode& last = g_.nodes[f.last];
    Shape contiguous(last.shape.size(), 1);
    for (size_t t = contiguous.size(); t-- > 1;)
      contiguous[t - 1] = contiguous[t] * last.shape[t];
    const int holder = *std::min_element(f.outputs.begin(), f.outputs.end());
    for (size_t p = 0; p < f.outputs.size(); ++p) {
      FusedOutput& o = attr.outputs[static_cast<size_t>(f.outputs[p])];
      o.strides.assign(f.index[p].cols, 0);
      o.offset = 0;
      for (size_t t = 0; t < contiguous.size(); ++t) {
        for (size_t d = 0; d < f.index[p].cols; ++d)
          o.strides[d] += f.index[p].m[t][d] * contiguous[t];
        o.offset += f.index[p].o[t] * contiguous[t];
      }
      if (f.outputs[p] == holder) {
        o.shape = last.shape;
        o.dims.clear();
      } else {
        o.into = holder;
      }
    }
    for (int n : f.chain)
      if (source[static_cast<size_t>(n)] >= 0) attr.members.push_back(source[static_cast<size_t>(n)]);
    // The holder's value node now is the final tensor.
    int value = f.fused;
    if (holder != 0)
      for (int r : readers_[f.fused])
        if (g_.nodes[r].op == GraphOp::result &&
            std::get<ResultAttr>(g_.nodes[r].attr).index == holder)
          value = r;
    for (int r : readers_[f.last]) {
      for (int& in : g_.nodes[r].inputs)
        if (in == f.last) in = value;
      readers_[value].push_back(r);
    }
    readers_[f.last].clear();
    for (int& o : g_.outputs)
      if (o == f.last) {
        o = value;
        output_[f.last] = 0;
        output_[value] = 1;
      }
    g_.nodes[value].shape = last.shape;
    if (value == f.fused) kernel.shape = last.shape;
    // The other outputs' result nodes are read by the chain only: drop their reader.
    for (int n : f.chain) {
      for (int in : g_.nodes[n].inputs) std::erase(readers_[in], n);
      g_.nodes[n].inputs.clear();
    }
  }

 private:
  Graph& g_;
  std::vector<std::vector<int>> readers_;
  std::vector<char> output_;
};

}  // namespace

Graph fold_concats_into_stores(Graph g, std::vector<int>* source) {
  std::vector<int> src(g.nodes.size());
  std::iota(src.begin(), src.end(), 0);
  const std::vector<int> unfused = source ? *source : std::vector<int>(g.nodes.size(), -1);
  bool folded = false;
  Folder folder(g);
  for (size_t c = 0; c < g.nodes.size(); ++c) {
    if (g.nodes[c].op != GraphOp::concat) continue;
    const std::optional<Folding> f = folder.try_concat(static_cast<int>(c));
    if (!f) continue;
    folder.apply(*f, unfused);
    folded = true;
  }
  if (!folded) return g;
  std::vector<int> kept;
  std::string why;
  std::optional<Graph> out = compact(std::move(g), src, {}, kept, why);
  if (source)
    for (int& k : kept)
      k = unfused[static_cast<size_t>(k)];
  if (source) *source = std::move(kept);
  verify(*out);
  return std::move(*out);
}

}  // namespace ein::detail
