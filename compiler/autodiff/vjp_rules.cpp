// The vector-Jacobian-product rules: one per op of ops.def, in a table keyed by GraphOp, and
// the VjpBuilder helpers they share. A rule reads the forward node's replica (same id in the
// backward graph) and its cotangent, and adds the nodes of each needed operand's gradient.
#include <algorithm>
#include <iterator>
#include <numeric>
#include <stdexcept>

#include <ein/errors.h>
#include <fmt/format.h>

#include "compiler/autodiff/scalar_grad.h"
#include "compiler/autodiff/vjp.h"

namespace ein {
namespace {

std::vector<int> iota(size_t n) {
  std::vector<int> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

void vjp_none(Vjp&) {}

// view: sum over broadcast dims, then place each output dim back on its elementary axis and
// merge the elementary axes into the input's dims.
void vjp_view(Vjp& v) {
  const auto& a = std::get<ViewAttr>(v.n.attr);
  Shape elementary;
  for (const Shape& s : a.split)
    elementary.insert(elementary.end(), s.begin(), s.end());
  std::vector<bool> reduced;
  std::vector<int> positions;  // for each kept output dim: its elementary axis
  for (const auto& dims : a.dims) {
    if (dims.size() > 1)
      throw RuntimeError(
          "the gradient of a diagonal (an index repeated in one operand) is not "
          "supported");
    reduced.push_back(dims.empty());
    if (!dims.empty()) positions.push_back(dims[0]);
  }
  const int summed = v.b.reduce_sum(v.g, reduced);
  int placed = v.b.broadcast(summed, positions, elementary);
  v.set(0, v.b.add(GraphOp::reshape, {placed}, v.in(0).shape, v.in(0).dtype));
}

void vjp_reshape(Vjp& v) {
  v.set(0, v.b.add(GraphOp::reshape, {v.g}, v.in(0).shape, v.in(0).dtype));
}

void vjp_permute(Vjp& v) {
  const auto& order = std::get<PermuteAttr>(v.n.attr).order;
  std::vector<int64_t> inverse(order.size());
  for (size_t i = 0; i < order.size(); ++i)
    inverse[order[i]] = static_cast<int64_t>(i);
  v.set(0, v.b.permute(v.g, inverse));
}

void vjp_reduce(Vjp& v) {
  const auto& a = std::get<ReduceAttr>(v.n.attr);
  const GraphNode& x = v.in(0);
  const Shape& shape = x.shape;
  std::vector<int> kept;  // input dim of each result dim
  double count = 1;
  for (size_t d = 0; d < a.reduced.size(); ++d) {
    if (a.reduced[d])
      count *= static_cast<double>(shape[d]);
    else
      kept.push_back(static_cast<int>(d));
  }
  const std::vector<int> all = iota(shape.size());
  const int xi = v.n.inputs[0], y = v.id, g = v.g;
  VjpBuilder& b = v.b;
  switch (a.reduction) {
    case Reduction::sum:
      v.set(0, b.broadcast(g, kept, shape));
      return;
    case Reduction::mean:
      v.set(0, b.map({g}, {kept}, shape, x.dtype, "mean_grad", [&](Kernel& k) {
        return k.apply(ScalarOp::mul, k.load(0), k.constant(1 / count));
      }));
      return;
    case Reduction::max:
    case Reduction::min: {  // split evenly between the tied extrema, like torch.amax
      const int hit = b.map({xi, y}, {all, kept}, shape, x.dtype, "extremum_mask",
                            [](Kernel& k) { return k.apply(ScalarOp::eq, k.load(0), k.load(1)); });
      std::vector<bool> reduced = a.reduced;
      const int ties = b.reduce_sum(hit, reduced);
      v.set(
          0,
          b.map({hit, g, ties}, {all, kept, kept}, shape, x.dtype, "extremum_grad", [](Kernel& k) {
            return k.apply(ScalarOp::mul, k.load(0), k.apply(ScalarOp::div, k.load(1), k.load(2)));
          }));
      return;
    }
    case Reduction::prod: {
      // torch's rule: g · y / x where the reduced elements have no zero; at a zero, g times the
      // product of the others when it is the only zero, else 0 (y / x would be 0/0).
      const int is_zero = b.map({xi}, {all}, shape, x.dtype, "prod_zero", [](Kernel& k) {
        return k.apply(ScalarOp::eq, k.load(0), k.constant(0));
      });
      const int zeros = b.reduce(is_zero, Reduction::sum, a.reduced);
      const int nonzero = b.map({xi}, {all}, shape, x.dtype, "prod_nonzero", [](Kernel& k) {
        return k.apply(ScalarOp::where, k.apply(ScalarOp::eq, k.load(0), k.constant(0)),
                       k.constant(1), k.load(0));
      });
      const int others = b.reduce(nonzero, Reduction::prod, a.reduced);
      v.set(0, b.map({g, y, xi, zeros, others}, {kept, kept, all, kept, kept}, shape, x.dtype,
                     "prod_grad", [](Kernel& k) {
                       const int xv = k.load(2);
                       const int only_zero = k.apply(ScalarOp::mul, k.load(0), k.load(4));
                       const int at_zero =
                           k.apply(ScalarOp::where, k.apply(ScalarOp::eq, k.load(3), k.constant(1)),
                                   only_zero, k.constant(0));
                       const int elsewhere =
                           k.apply(ScalarOp::div, k.apply(ScalarOp::mul, k.load(0), k.load(1)), xv);
                       return k.apply(ScalarOp::where, k.apply(ScalarOp::eq, xv, k.constant(0)),
                                      at_zero, elsewhere);
                     }));
      return;
    }
    case Reduction::logsumexp:  // g · exp(x - y)
      v.set(0,
            b.map({g, xi, y}, {kept, all, kept}, shape, x.dtype, "logsumexp_grad", [](Kernel& k) {
              return k.apply(ScalarOp::mul, k.load(0),
                             k.apply(ScalarOp::exp, k.apply(ScalarOp::sub, k.load(1), k.load(2))));
            }));
      return;
    case Reduction::var:
    case Reduction::std: {
      // var: 2 g (x - m) / (N - ddof); std: g (x - m) / ((N - ddof) y), 0 at y = 0
      const int mean =
          b.add(GraphOp::reduce, {xi}, v.n.shape, x.dtype,
                ReduceAttr{Reduction::mean, std::nullopt, a.reduced, iota(kept.size())});
      const double dof = count - static_cast<double>(a.ddof.value_or(0));
      const bool is_var = a.reduction == Reduction::var;
      v.set(0, b.map({g, xi, mean, y}, {kept, all, kept, kept}, shape, x.dtype, "moment_grad",
                     [&](Kernel& k) {
                       const int centered = k.apply(ScalarOp::sub, k.load(1), k.load(2));
                       const int scaled = k.apply(ScalarOp::mul, k.load(0), centered);
                       if (is_var) return k.apply(ScalarOp::mul, scaled, k.constant(2 / dof));
                       // std at zero deviation: 0, as torch (not 0/0)
                       return k.apply(
                           ScalarOp::where, k.apply(ScalarOp::eq, k.load(3), k.constant(0)),
                           k.constant(0),
                           k.apply(ScalarOp::div, scaled,
                                   k.apply(ScalarOp::mul, k.constant(dof), k.load(3))));
                     }));
      return;
    }
    case Reduction::none:
    case Reduction::any:
    case Reduction::all:
      break;
  }
  throw RuntimeError(fmt::format("reduce[{}] has no derivative", reduction_name(a.reduction)));
}

// contract: each operand's gradient is the contraction of the cotangent with the other
// operand onto that operand's axes; axes only that operand had (summed in the forward) come
// back as broadcasts.
void vjp_contract(Vjp& v) {
  const auto& a = std::get<ContractAttr>(v.n.attr);
  const std::vector<int>* labels[2] = {&a.a_axes, &a.b_axes};
  for (int side = 0; side < 2; ++side) {
    if (!v.needed[side]) continue;
    const std::vector<int>& mine = *labels[side];
    const std::vector<int>& other = *labels[1 - side];
    for (size_t i = 0; i < mine.size(); ++i)
      if (std::count(mine.begin(), mine.end(), mine[i]) > 1)
        throw RuntimeError(
            "the gradient of a diagonal (an index repeated in one einsum operand) "
            "is not supported");
    std::vector<int> present, positions;
    Shape present_shape;
    for (size_t d = 0; d < mine.size(); ++d) {
      const int l = mine[d];
      if (std::count(a.out_axes.begin(), a.out_axes.end(), l) ||
          std::count(other.begin(), other.end(), l)) {
        present.push_back(l);
        positions.push_back(static_cast<int>(d));
        present_shape.push_back(v.in(side).shape[d]);
      }
    }
    const int t = v.b.add(GraphOp::contract, {v.g, v.n.inputs[1 - side]}, present_shape,
                          v.in(side).dtype, ContractAttr{a.out_axes, other, present});
    v.set(side, present.size() == mine.size() ? t : v.b.broadcast(t, positions, v.in(side).shape));
  }
}

// map: the cotangent times ∂body/∂input_i over the map's domain, summed over the dims input i
// broadcast along, then laid out like input i.
void vjp_map(Vjp& v) {
  const auto& a = std::get<MapAttr>(v.n.attr);
  const Shape& domain = v.n.shape;
  const int rank = static_cast<int>(domain.size());
  // Inputs whose partial derivatives are the same expression (x and b in gelu(x + b)) share
  // one gradient map: the broadcast one is its reduction, not a second pass over the domain.
  std::vector<std::pair<std::string, int>> built;  // (kernel dump and dtype, node)
  for (size_t i = 0; i < v.n.inputs.size(); ++i) {
    if (!v.needed[i]) continue;
    const GraphNode& x = v.in(i);
    auto k = std::make_shared<Kernel>(*a.body);
    const int d = differentiate_scalar(*k, a.body->body, static_cast<int>(i));
    if (d < 0) continue;  // the body does not depend on this input
    const int gload = k->load(static_cast<int>(v.n.inputs.size()));
    int full = v.g;
    const bool unit = k->nodes[d].op == ScalarOp::constant && k->nodes[d].value == 1.0;
    if (!unit) {
      k->body = k->result = k->apply(ScalarOp::mul, gload, d);
      k->name = "map_grad";
      std::vector<int> ins = v.n.inputs;
      ins.push_back(v.g);
      std::vector<std::vector<int>> axes = a.axes;
      axes.push_back(iota(rank));
      std::string key = dump(*k) + std::string(dtype_name(x.dtype));
      const auto same =
          std::find_if(built.begin(), built.end(), [&](const auto& b) { return b.first == key; });
      if (same != built.end()) {
        full = same->second;
      } else {
        full = v.b.add(GraphOp::map, ins, domain, x.dtype, MapAttr{std::move(k), std::move(axes)});
        built.emplace_back(std::move(key), full);
      }
    }
    // Dims of the domain input i has at full size; the rest were broadcast.
    std::vector<bool> reduced(rank, true);
    std::vector<std::pair<int, int>> kept;  // (domain dim, input dim)
    for (size_t dd = 0; dd < a.axes[i].size(); ++dd)
      if (x.shape[dd] == domain[a.axes[i][dd]] && reduced[a.axes[i][dd]]) {
        reduced[a.axes[i][dd]] = false;
        kept.emplace_back(a.axes[i][dd], static_cast<int>(dd));
      }
    int grad = v.b.reduce_sum(full, reduced);
    std::sort(kept.begin(), kept.end());  // reduce_sum keeps domain order
    std::vector<int64_t> order(kept.size());
    std::vector<size_t> by_input(kept.size());
    std::iota(by_input.begin(), by_input.end(), 0);
    std::sort(by_input.begin(), by_input.end(),
              [&](size_t p, size_t q) { return kept[p].second < kept[q].second; });
    bool identity = true;
    for (size_t j = 0; j < by_input.size(); ++j) {
      order[j] = static_cast<int64_t>(by_input[j]);
      identity = identity && by_input[j] == j;
    }
    if (!identity) grad = v.b.permute(grad, order);
    v.set(i, v.b.conform(grad, x));
  }
}

// concat: each input's gradient is its slice of the cotangent.
void vjp_concat(Vjp& v) {
  const auto& a = std::get<ConcatAttr>(v.n.attr);
  int64_t at = 0;
  for (size_t i = 0; i < v.n.inputs.size(); ++i) {
    const GraphNode& x = v.in(i);
    int64_t len = 1;
    for (int64_t d = a.dim; d < a.dim + a.spans[i]; ++d)
      len *= x.shape[d];
    if (v.needed[i]) {
      const int part = v.b.slice(v.g, a.dim, at, at + len);
      v.set(i, v.b.add(GraphOp::reshape, {part}, x.shape, x.dtype));
    }
    at += len;
  }
}

// slice: the cotangent padded with zeros to the input's extent. With a step s, each cotangent
// value is first followed by s - 1 zeros (a new axis of s, reshaped into the dim), which
// puts value k at k·s; the span ends at the last index taken.
void vjp_slice(Vjp& v) {
  const auto& a = std::get<SliceAttr>(v.n.attr);
  const GraphNode& x = v.in(0);
  const auto d = static_cast<size_t>(a.dim);
  const int64_t taken = v.n.shape[d];
  if (taken == 0) {
    v.set(0, v.b.zeros(x.shape, x.dtype));
    return;
  }
  int g = v.g;
  int64_t span = taken;
  if (a.step > 1) {
    Shape column = v.n.shape;  // (..., taken, 1, ...)
    column.insert(column.begin() + static_cast<std::ptrdiff_t>(d) + 1, 1);
    Shape gap = column;  // (..., taken, s - 1, ...)
    gap[d + 1] = a.step - 1;
    const int spread = v.b.concat({v.b.reshape(g, column), v.b.zeros(gap, x.dtype)}, a.dim + 1);
    Shape flat = v.n.shape;
    flat[d] = taken * a.step;
    span = (taken - 1) * a.step + 1;
    g = v.b.slice(v.b.reshape(spread, flat), a.dim, 0, span);
  }
  std::vector<int> parts;
  auto pad = [&](int64_t len) {
    if (len <= 0) return;
    Shape s = x.shape;
    s[d] = len;
    parts.push_back(v.b.zeros(s, x.dtype));
  };
  pad(a.start);
  parts.push_back(g);
  pad(x.shape[d] - a.start - span);
  v.set(0, parts.size() == 1 ? g : v.b.concat(parts, a.dim));
}

void vjp_cast(Vjp& v) {
  v.set(0, v.b.cast(v.g, v.in(0).dtype));
}

// gather and scatter_add are each other's adjoints (the indices get no gradient).
void vjp_gather(Vjp& v) {
  v.set(0, v.b.add(GraphOp::scatter_add, {v.g, v.n.inputs[1]}, v.in(0).shape, v.in(0).dtype));
}

void vjp_scatter_add(Vjp& v) {
  v.set(0, v.b.add(GraphOp::gather, {v.g, v.n.inputs[1]}, v.in(0).shape, v.in(0).dtype));
}

// attention (graph.h): one attention_grad node reads q, k, v, the bias, the forward's packed
// result (o and the row logsumexp: the values FlashAttention-2's backward keeps) and the
// cotangent; dq, dk and dv are views of its packed result. The bias gets no gradient: the
// recogniser (compiler/fuse/attention.h) fuses only biases built from masks, integers and
// constants.
void vjp_attention(Vjp& v) {
  if (!v.needed[0] && !v.needed[1] && !v.needed[2]) return;
  const auto& a = std::get<AttentionAttr>(v.n.attr);
  std::vector<int> inputs(v.n.inputs.begin(), v.n.inputs.end());
  inputs.push_back(v.id);
  inputs.push_back(v.g);
  const auto count = [](const Shape& s) {
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    return n;
  };
  const int64_t total = count(v.in(0).shape) + count(v.in(1).shape) + count(v.in(2).shape);
  const int grads = v.b.add(GraphOp::attention_grad, inputs, {total}, v.n.dtype, a);
  int64_t at = 0;
  for (size_t operand = 0; operand < 3; ++operand) {
    const Shape& shape = v.in(operand).shape;
    const int64_t start = at;
    at += count(shape);
    if (!v.needed[operand]) continue;
    const int part = v.b.slice(grads, 0, start, at);
    ViewAttr split;
    split.split = {shape};
    for (size_t d = 0; d < shape.size(); ++d) split.dims.push_back({static_cast<int>(d)});
    const int viewed = v.b.add(GraphOp::view, {part}, shape, v.n.dtype, std::move(split));
    v.set(operand, v.b.conform(viewed, v.in(operand)));
  }
}

// linear_cross_entropy (graph.h): one linear_cross_entropy_grad node reads h, w, the targets,
// the forward's result (each row's logsumexp) and the cotangent, and the gradients the forward
// computed for a unit cotangent (its results 1 and 2) when it has them; it is dh, and its
// result 1 is dw, each a buffer of its own. The targets are integers: no gradient.
void vjp_linear_cross_entropy(Vjp& v) {
  if (!v.needed[0] && !v.needed[1]) return;
  const Shape &hs = v.in(0).shape, &ws = v.in(1).shape;
  std::vector<int> inputs = {v.n.inputs[0], v.n.inputs[1], v.n.inputs[2], v.id, v.g};
  if (const auto* a = std::get_if<CrossEntropyAttr>(&v.n.attr); a && a->unit_grads) {
    int units[2] = {-1, -1};
    for (size_t j = 0; j < v.forward.nodes.size(); ++j) {
      const GraphNode& r = v.forward.nodes[j];
      if (r.op == GraphOp::result && r.inputs[0] == v.id)
        units[std::get<ResultAttr>(r.attr).index - 1] = static_cast<int>(j);
    }
    if (units[0] < 0 || units[1] < 0)
      throw std::logic_error("linear_cross_entropy with unit_grads lacks its results 1 and 2");
    inputs.insert(inputs.end(), {units[0], units[1]});
  }
  const int dh = v.b.add(GraphOp::linear_cross_entropy_grad, std::move(inputs), hs, v.n.dtype);
  if (v.needed[0]) v.set(0, v.b.conform(dh, v.in(0)));
  if (v.needed[1])
    v.set(1, v.b.conform(v.b.add(GraphOp::result, {dh}, ws, v.n.dtype, ResultAttr{1}), v.in(1)));
}

void vjp_linear_cross_entropy_grad(Vjp&) {
  throw RuntimeError("the gradient of a fused cross-entropy's backward (a second derivative) is "
                     "not supported");
}

void vjp_attention_grad(Vjp&) {
  throw RuntimeError("the gradient of a fused attention's backward (a second derivative) is not "
                     "supported");
}

void vjp_quantized_matmul(Vjp&) {
  throw RuntimeError("a product from quantized codes has no gradient (inference only: train the "
                     "float weights, then quantize them)");
}

void vjp_quantized_gather(Vjp&) {
  throw RuntimeError("rows read from quantized codes have no gradient (inference only: train the "
                     "float weights, then quantize them)");
}

void vjp_write_row(Vjp&) {
  throw RuntimeError("a row written into a decode step's cache has no gradient (inference only)");
}

// One rule per op, in ops.def order.
constexpr Rule kRules[] = {
    vjp_none,  // input: its cotangent is the result
    vjp_view,   vjp_reshape, vjp_permute, vjp_reduce, vjp_contract,    vjp_map,
    vjp_concat, vjp_slice,   vjp_cast,    vjp_gather, vjp_scatter_add,
    vjp_attention, vjp_attention_grad, vjp_linear_cross_entropy, vjp_linear_cross_entropy_grad,
    vjp_quantized_matmul, vjp_quantized_gather, vjp_write_row,
};
// Ops after write_row in ops.def come from the fusion pass, which runs after autodiff: the
// pipeline differentiates unfused graphs only.
static_assert(std::size(kRules) == static_cast<size_t>(GraphOp::write_row) + 1,
              "a VJP rule per op in ops.def, up to write_row");

}  // namespace

Rule rule_for(GraphOp op) {
  const auto i = static_cast<size_t>(op);
  if (i >= std::size(kRules))
    throw std::logic_error(
        fmt::format("differentiate: '{}' nodes come from fusion; differentiate "
                    "the unfused graph",
                    graph_op_name(op)));
  return kRules[i];
}

int VjpBuilder::sum(int a, int b) {
  if (const std::optional<int> side_by_side = disjoint_sum(a, b)) return *side_by_side;
  const Shape& s = node(a).shape;
  return map({a, b}, {iota(s.size()), iota(s.size())}, s, node(a).dtype, "accumulate",
             [](Kernel& k) { return k.apply(ScalarOp::add, k.load(0), k.load(1)); });
}

std::vector<std::pair<int64_t, int>> VjpBuilder::nonzero_pieces(int x, int64_t dim) {
  const GraphNode& n = node(x);
  std::vector<std::pair<int64_t, int>> pieces;
  const auto* c = n.op == GraphOp::concat ? std::get_if<ConcatAttr>(&n.attr) : nullptr;
  if (c == nullptr || c->dim != dim ||
      std::any_of(c->spans.begin(), c->spans.end(), [](int64_t s) { return s != 1; })) {
    if (!zero_nodes_.contains(x)) pieces.push_back({0, x});
    return pieces;
  }
  int64_t start = 0;
  for (int part : n.inputs) {
    if (!zero_nodes_.contains(part)) pieces.push_back({start, part});
    start += node(part).shape[static_cast<size_t>(dim)];
  }
  return pieces;
}

std::optional<int> VjpBuilder::disjoint_sum(int a, int b) {
  const GraphNode *na = &node(a), *nb = &node(b);
  const GraphNode* c = na->op == GraphOp::concat ? na : nb->op == GraphOp::concat ? nb : nullptr;
  if (c == nullptr || na->shape != nb->shape || na->dtype != nb->dtype) return std::nullopt;
  const int64_t dim = std::get<ConcatAttr>(c->attr).dim;
  const Shape shape = na->shape;
  const DType dtype = na->dtype;
  std::vector<std::pair<int64_t, int>> pieces = nonzero_pieces(a, dim);
  const std::vector<std::pair<int64_t, int>> more = nonzero_pieces(b, dim);
  pieces.insert(pieces.end(), more.begin(), more.end());
  std::sort(pieces.begin(), pieces.end());
  const auto length = [&](int x) { return node(x).shape[static_cast<size_t>(dim)]; };
  for (size_t i = 1; i < pieces.size(); ++i)
    if (pieces[i - 1].first + length(pieces[i - 1].second) > pieces[i].first) return std::nullopt;
  std::vector<int> parts;
  int64_t end = 0;  // of the parts so far
  const auto gap = [&](int64_t to) {
    if (to <= end) return;
    Shape s = shape;
    s[static_cast<size_t>(dim)] = to - end;
    parts.push_back(zeros(s, dtype));
  };
  for (const auto& [start, x] : pieces) {
    gap(start);
    parts.push_back(x);
    end = start + length(x);
  }
  gap(shape[static_cast<size_t>(dim)]);
  return parts.size() == 1 ? parts.front() : concat(parts, dim);
}

}  // namespace ein
