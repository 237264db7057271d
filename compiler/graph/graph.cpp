// Graph IR construction, dumps and verification.
#include "compiler/graph/graph.h"

#include <algorithm>
#include <array>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

#include <ein/tensor.h>

namespace ein {
namespace {

struct OpInfo {
  std::string_view name;
  int arity;
};

constexpr std::array kOps = {
#define EIN_GRAPH_OP(name, spelling, arity) OpInfo{spelling, arity},
#include "compiler/graph/ops.def"
#undef EIN_GRAPH_OP
};

/// A fused node: its kernel, reads and outputs agree with each other and with its inputs.
template <class Fail>
void verify_fused(const Graph& g, size_t i, const FusedAttr& f, Fail& fail) {
  const GraphNode& n = g.nodes[i];
  if (!f.kernel) return fail(i, "fused node without a kernel");
  const Kernel& k = *f.kernel;
  const size_t rank = k.domain.size();
  size_t inputs = 0;
  for (const KernelBuffer& b : k.buffers)
    inputs += b.output ? 0 : 1;
  if (f.reads.size() != inputs || f.outputs.size() != k.buffers.size() - inputs)
    return fail(i, "fused reads/outputs do not match the kernel's buffers");
  for (const FusedRead& r : f.reads) {
    if (r.input < 0 || r.input >= static_cast<int>(n.inputs.size()))
      return fail(i, "a fused read names no input");
    const size_t in_rank = g.nodes[n.inputs[r.input]].shape.size();
    if (r.matrix.size() != in_rank || r.offset.size() != in_rank)
      return fail(i, "a fused read's matrix does not match its input's rank");
    for (const auto& row : r.matrix)
      if (row.size() != rank) return fail(i, "a fused read's matrix does not match the domain");
  }
  for (size_t j = 0; j < f.outputs.size(); ++j) {
    const FusedOutput& o = f.outputs[j];
    if (o.placed()) {
      if (o.strides.size() != rank) return fail(i, "a placed fused output's strides miss a dim");
      if (o.into >= 0 && (o.into >= static_cast<int>(j) || f.outputs[o.into].into >= 0 ||
                          !f.outputs[o.into].placed() || f.outputs[o.into].dtype != o.dtype))
        return fail(i, "a placed fused output writes into no earlier placed tensor");
      const Shape& tensor = f.outputs[o.into >= 0 ? o.into : j].shape;
      int64_t lo = o.offset, hi = o.offset, points = 1;
      for (size_t d = 0; d < rank; ++d) {
        points *= k.domain[d];
        const int64_t step = k.domain[d] > 0 ? (k.domain[d] - 1) * o.strides[d] : 0;
        (step < 0 ? lo : hi) += step;
      }
      int64_t elements = 1;
      for (int64_t s : tensor)
        elements *= s;
      if (points > 0 && (lo < 0 || hi >= elements))
        return fail(i, "a placed fused output writes outside its tensor");
      continue;
    }
    if (o.into >= 0) return fail(i, "an unplaced fused output writes into another's tensor");
    if (o.dims.size() != o.shape.size()) return fail(i, "a fused output's dims and shape differ");
    for (size_t t = 0; t < o.dims.size(); ++t)
      if (o.dims[t] >= static_cast<int>(rank) ||
          (o.dims[t] < 0 ? o.shape[t] != 1 : o.shape[t] != k.domain[o.dims[t]]))
        return fail(i, "a fused output's dim does not walk the domain");
  }
  if (!f.stored.empty() && f.stored.size() != f.outputs.size())
    return fail(i, "a fused node names the stored node of some outputs only");
  if (f.outputs.front().shape != n.shape || f.outputs.front().dtype != n.dtype)
    fail(i, "a fused node's type must be its first output's");
}

}  // namespace

std::string attributes(const GraphNode& n) {
  struct Visitor {
    std::string operator()(std::monostate) const { return ""; }
    std::string operator()(const InputAttr& a) const { return fmt::format("[{}]", a.index); }
    std::string operator()(const ViewAttr& a) const {
      std::vector<std::string> split, dims;
      for (const Shape& s : a.split)
        split.push_back(fmt::format("({})", fmt::join(s, " ")));
      for (const auto& d : a.dims)
        dims.push_back(fmt::format("{{{}}}", fmt::join(d, ",")));
      return fmt::format("[split {} -> {}]", fmt::join(split, " "), fmt::join(dims, " "));
    }
    std::string operator()(const ReduceAttr& a) const {
      std::vector<int> dims;
      for (size_t d = 0; d < a.reduced.size(); ++d)
        if (a.reduced[d]) dims.push_back(static_cast<int>(d));
      return fmt::format("[{} dims {}{}]", reduction_name(a.reduction), fmt::join(dims, ","),
                         a.ddof ? fmt::format(" ddof={}", *a.ddof) : "");
    }
    std::string operator()(const PermuteAttr& a) const {
      return fmt::format("[{}]", fmt::join(a.order, ","));
    }
    std::string operator()(const ContractAttr& a) const {
      return fmt::format("[{} , {} -> {}]", fmt::join(a.a_axes, " "), fmt::join(a.b_axes, " "),
                         fmt::join(a.out_axes, " "));
    }
    std::string operator()(const MapAttr& a) const {
      return fmt::format("[{} scalar ops]", a.body ? a.body->nodes.size() : 0);
    }
    std::string operator()(const ConcatAttr& a) const {
      std::vector<std::string> placed;
      for (int p : a.placed)
        if (p >= 0) placed.push_back(fmt::format("%{}", p));
      if (placed.empty()) return fmt::format("[dim {}]", a.dim);
      return fmt::format("[dim {}; written in place by {}]", a.dim, fmt::join(placed, " "));
    }
    std::string operator()(const SliceAttr& a) const {
      if (a.step != 1) return fmt::format("[dim {} {}:{}:{}]", a.dim, a.start, a.stop, a.step);
      return fmt::format("[dim {} {}:{}]", a.dim, a.start, a.stop);
    }
    std::string operator()(const FusedAttr& a) const {
      std::vector<std::string> members;
      for (int m : a.members)
        members.push_back(fmt::format("%{}", m));
      const size_t n = a.outputs.size();
      return fmt::format("[{} holds {}; {} output{}]", a.kernel ? a.kernel->name : "?",
                         fmt::join(members, " "), n, n == 1 ? "" : "s");
    }
    std::string operator()(const ResultAttr& a) const { return fmt::format("[{}]", a.index); }
    std::string operator()(const CrossEntropyAttr& a) const {
      return a.unit_grads ? "[with its gradients]" : "";
    }
    std::string operator()(const QuantMatmulAttr& a) const {
      return fmt::format("[{} [{}]{}]", a.type == QuantType::q8_0 ? "q8_0" : "q4_0",
                         fmt::join(a.weight, ", "),
                         a.layout == WeightLayout::out_in ? ", transposed" : "");
    }
    std::string operator()(const QuantGatherAttr& a) const {
      return fmt::format("[{} [{}]]", a.type == QuantType::q8_0 ? "q8_0" : "q4_0",
                         fmt::join(a.table, ", "));
    }
    std::string operator()(const WriteRowAttr& a) const { return fmt::format("[dim {}]", a.dim); }
    std::string operator()(const AttentionAttr& a) const {
      return fmt::format("[scale {:g}{}{}]", a.scale, a.bias ? ", bias" : "",
                         a.kv_repeat > 1 ? fmt::format(", kv groups of {}", a.kv_repeat) : "");
    }
  };
  return std::visit(Visitor{}, n.attr);
}

std::string_view graph_op_name(GraphOp op) {
  return kOps[static_cast<int>(op)].name;
}
int graph_op_arity(GraphOp op) {
  return kOps[static_cast<int>(op)].arity;
}

std::vector<Shape> view_weights(const ViewAttr& a) {
  // Elementary axis e lies in input dim dim_of[e] with weight inner[e]: the product of the
  // sizes after it in that dim's split (row-major within the dim).
  std::vector<size_t> dim_of;
  Shape inner;
  for (size_t d = 0; d < a.split.size(); ++d) {
    Shape w(a.split[d].size());
    int64_t step = 1;
    for (size_t k = w.size(); k-- > 0;) {
      w[k] = step;
      step *= a.split[d][k];
    }
    dim_of.insert(dim_of.end(), w.size(), d);
    inner.insert(inner.end(), w.begin(), w.end());
  }
  std::vector<Shape> weights(a.split.size(), Shape(a.dims.size(), 0));
  for (size_t j = 0; j < a.dims.size(); ++j)
    for (int e : a.dims[j])
      weights[dim_of[e]][j] += inner[e];
  return weights;
}

Shape view_output_strides(const ViewAttr& a, const Shape& input_strides) {
  // The same sums as Σ_d input_strides[d] · view_weights(a)[d][j], without the weight matrix:
  // this runs on every eager view, so it makes two small vectors and nothing else.
  Shape elementary;  // the stride of each elementary axis
  for (size_t d = 0; d < a.split.size(); ++d) {
    const size_t first = elementary.size();
    elementary.resize(first + a.split[d].size());
    int64_t stride = input_strides[d];
    for (size_t k = a.split[d].size(); k-- > 0;) {
      elementary[first + k] = stride;
      stride *= a.split[d][k];
    }
  }
  Shape strides(a.dims.size(), 0);
  for (size_t j = 0; j < a.dims.size(); ++j)
    for (int e : a.dims[j])
      strides[j] += elementary[e];
  return strides;
}

int Graph::add(GraphNode node) {
  nodes.push_back(std::move(node));
  return static_cast<int>(nodes.size()) - 1;
}

std::string dump(const Graph& g) {
  std::string out = fmt::format("graph {}\n", g.origin);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const GraphNode& n = g.nodes[i];
    std::vector<std::string> ins;
    for (int in : n.inputs)
      ins.push_back(fmt::format("%{}", in));
    out += fmt::format("  %{} = {}{} {} : {}[{}]{}\n", i, graph_op_name(n.op), attributes(n),
                       fmt::join(ins, ", "), dtype_name(n.dtype), fmt::join(n.shape, ", "),
                       n.note.empty() ? "" : "  // " + n.note);
  }
  std::vector<std::string> outs;
  for (int o : g.outputs)
    outs.push_back(fmt::format("%{}", o));
  out += fmt::format("  return {}\n", fmt::join(outs, ", "));
  return out;
}

std::optional<Shape> strides_before_layout(const GraphNode& n, const Shape& in,
                                           const Shape& out_strides) {
  Shape strides(in.size(), 0);
  switch (n.op) {
    case GraphOp::permute: {
      const auto& order = std::get<PermuteAttr>(n.attr).order;
      for (size_t j = 0; j < order.size(); ++j)
        strides[static_cast<size_t>(order[j])] = out_strides[j];
      return strides;
    }
    case GraphOp::reshape:
      return view_strides(n.shape, out_strides, in);
    case GraphOp::view: {
      // Each input dim larger than 1 is one elementary axis, which one output dim names alone.
      const auto& a = std::get<ViewAttr>(n.attr);
      std::vector<int> named;
      for (const auto& names : a.dims) {
        if (names.size() > 1) return std::nullopt;  // a diagonal
        if (names.empty()) continue;
        if (std::find(named.begin(), named.end(), names[0]) != named.end()) return std::nullopt;
        named.push_back(names[0]);  // an axis named twice: a repeat
      }
      for (size_t j = 0; j < a.dims.size(); ++j)
        if (a.dims[j].empty() && n.shape[j] != 1) return std::nullopt;  // a broadcast
      int axis = 0;  // elementary axes, numbered across the input dims' splits
      for (size_t d = 0; d < a.split.size(); ++d) {
        int whole = 0;
        for (int64_t size : a.split[d]) {
          if (size != 1) {
            const auto j = std::find_if(a.dims.begin(), a.dims.end(), [&](const auto& names) {
              return !names.empty() && names[0] == axis;
            });
            if (j == a.dims.end()) return std::nullopt;
            strides[d] = out_strides[static_cast<size_t>(j - a.dims.begin())];
            ++whole;
          }
          ++axis;
        }
        if (whole > 1 || (whole == 0 && in[d] != 1)) return std::nullopt;  // a split
      }
      return strides;
    }
    default:
      return std::nullopt;
  }
}

void verify(const Graph& g) {
  auto fail = [&](size_t i, const std::string& what) {
    throw std::logic_error(
        fmt::format("internal error: invalid graph, node %{}: {}\n{}", i, what, dump(g)));
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const GraphNode& n = g.nodes[i];
    const int arity = graph_op_arity(n.op);
    if (arity >= 0 && static_cast<int>(n.inputs.size()) != arity)
      fail(i,
           fmt::format("{} takes {} inputs, has {}", graph_op_name(n.op), arity, n.inputs.size()));
    for (int in : n.inputs)
      if (in < 0 || in >= static_cast<int>(i)) fail(i, "an input is not an earlier node");
    const bool attr_ok = [&] {
      switch (n.op) {
        case GraphOp::input:
          return std::holds_alternative<InputAttr>(n.attr);
        case GraphOp::view:
          return std::holds_alternative<ViewAttr>(n.attr);
        case GraphOp::reduce:
          return std::holds_alternative<ReduceAttr>(n.attr);
        case GraphOp::permute:
          return std::holds_alternative<PermuteAttr>(n.attr);
        case GraphOp::contract:
          return std::holds_alternative<ContractAttr>(n.attr);
        case GraphOp::map:
          return std::holds_alternative<MapAttr>(n.attr);
        case GraphOp::concat:
          return std::holds_alternative<ConcatAttr>(n.attr);
        case GraphOp::slice:
          return std::holds_alternative<SliceAttr>(n.attr);
        case GraphOp::fused:
          return std::holds_alternative<FusedAttr>(n.attr);
        case GraphOp::result:
          return std::holds_alternative<ResultAttr>(n.attr);
        case GraphOp::attention:
        case GraphOp::attention_grad:
          return std::holds_alternative<AttentionAttr>(n.attr);
        case GraphOp::reshape:
        case GraphOp::cast:
        case GraphOp::gather:
        case GraphOp::scatter_add:
        case GraphOp::linear_cross_entropy_grad:
          return std::holds_alternative<std::monostate>(n.attr);
        case GraphOp::quantized_matmul:
          return std::holds_alternative<QuantMatmulAttr>(n.attr);
        case GraphOp::quantized_gather:
          return std::holds_alternative<QuantGatherAttr>(n.attr);
        case GraphOp::write_row:
          return std::holds_alternative<WriteRowAttr>(n.attr);
        case GraphOp::linear_cross_entropy:
          return std::holds_alternative<std::monostate>(n.attr) ||
                 std::holds_alternative<CrossEntropyAttr>(n.attr);
      }
      return false;
    }();
    if (!attr_ok) fail(i, "wrong attributes for the op");
    if (const auto* f = std::get_if<FusedAttr>(&n.attr)) verify_fused(g, i, *f, fail);
    if (const auto* c = std::get_if<ConcatAttr>(&n.attr); c && !c->placed.empty()) {
      if (c->placed.size() != n.inputs.size()) fail(i, "concat's placed list is not per input");
      for (int p : c->placed)
        if (p >= 0 && (p >= static_cast<int>(i) || g.nodes[p].op != GraphOp::contract ||
                       g.nodes[p].dtype != n.dtype))
          fail(i, fmt::format("concat placed %{}: not an earlier contraction of its dtype", p));
    }
    if (const auto* a = std::get_if<AttentionAttr>(&n.attr)) {
      const size_t want = (n.op == GraphOp::attention ? 3 : 5) + (a->bias ? 1 : 0);
      if (n.inputs.size() != want)
        fail(i, fmt::format("{} takes {} inputs, has {}", graph_op_name(n.op), want, n.inputs.size()));
    }
    if (const auto* q = std::get_if<QuantMatmulAttr>(&n.attr)) {
      const Shape& x = g.nodes[n.inputs[0]].shape;
      const bool out_in = q->layout == WeightLayout::out_in;
      const DType codes = g.nodes[n.inputs[1]].dtype, scales = g.nodes[n.inputs[2]].dtype;
      if (q->weight.size() != 2 || x.empty() || x.back() != q->weight[out_in ? 1 : 0] ||
          n.shape.size() != x.size() || n.shape.back() != q->weight[out_in ? 0 : 1] ||
          !std::equal(x.begin(), x.end() - 1, n.shape.begin()))
        fail(i, "quantized_matmul's x, weight and result shapes do not multiply");
      if (codes != (q->type == QuantType::q8_0 ? DType::i8 : DType::u8) || scales != DType::f16)
        fail(i, "quantized_matmul's codes or scales have the wrong dtype");
    }
    if (const auto* q = std::get_if<QuantGatherAttr>(&n.attr)) {
      const GraphNode& idx = g.nodes[n.inputs[2]];
      Shape rows = idx.shape;
      if (q->table.size() == 2) rows.push_back(q->table[1]);
      if (q->table.size() != 2 || n.shape != rows || n.dtype != DType::f32 ||
          (idx.dtype != DType::i64 && idx.dtype != DType::i32))
        fail(i, "quantized_gather's table, indices and result shapes do not fit");
      if (g.nodes[n.inputs[0]].dtype != (q->type == QuantType::q8_0 ? DType::i8 : DType::u8) ||
          g.nodes[n.inputs[1]].dtype != DType::f16)
        fail(i, "quantized_gather's codes or scales have the wrong dtype");
    }
    if (const auto* w = std::get_if<WriteRowAttr>(&n.attr)) {
      const GraphNode &cache = g.nodes[n.inputs[0]], &row = g.nodes[n.inputs[1]],
                      &index = g.nodes[n.inputs[2]];
      Shape want = cache.shape;
      if (w->dim >= 0 && w->dim < static_cast<int64_t>(want.size())) want[w->dim] = 1;
      if (w->dim < 0 || w->dim >= static_cast<int64_t>(cache.shape.size()) || row.shape != want ||
          (row.dtype != cache.dtype && !(is_float(row.dtype) && is_float(cache.dtype))) ||
          n.shape != cache.shape ||
          n.dtype != cache.dtype || index.dtype != DType::i64 || index.shape != Shape{1})
        fail(i, "write_row takes a cache, a row of its shape with size 1 along dim (a float "
                "row rounded to a float cache's dtype), and an i64 [1]");
    }
    if (n.op == GraphOp::linear_cross_entropy_grad && n.inputs.size() != 5 &&
        n.inputs.size() != 7)
      fail(i, fmt::format("linear_cross_entropy_grad takes 5 or 7 inputs, has {}",
                          n.inputs.size()));
    if (const auto* r = std::get_if<ResultAttr>(&n.attr)) {
      const GraphNode& of = g.nodes[n.inputs[0]];
      if (of.op == GraphOp::linear_cross_entropy_grad) {
        // dw [D, V]: h's columns by w's.
        const Shape want{g.nodes[of.inputs[0]].shape.back(), g.nodes[of.inputs[1]].shape.back()};
        if (r->index != 1 || n.shape != want || n.dtype != of.dtype)
          fail(i, "result of linear_cross_entropy_grad must be its dw (1) of [D, V]");
      } else if (of.op == GraphOp::linear_cross_entropy) {
        // dh [N, D] (1) and dw [D, V] (2), when the node computes its gradients.
        const auto* a = std::get_if<CrossEntropyAttr>(&of.attr);
        const Shape &h = g.nodes[of.inputs[0]].shape, &w = g.nodes[of.inputs[1]].shape;
        if (!a || !a->unit_grads || (r->index != 1 && r->index != 2) ||
            n.shape != (r->index == 1 ? h : w) || n.dtype != of.dtype)
          fail(i, "result of linear_cross_entropy must be its dh (1) or dw (2), with unit_grads");
      } else {
        const auto* f = std::get_if<FusedAttr>(&of.attr);
        if (!f || r->index < 0 || r->index >= static_cast<int>(f->outputs.size()))
          fail(i, "result must name an output of a fused node");
        else if (f->outputs[r->index].shape != n.shape || f->outputs[r->index].dtype != n.dtype)
          fail(i, "result's type differs from the fused output's");
        else if (f->outputs[r->index].into >= 0)
          fail(i, "result names a fused output placed into another's tensor");
      }
    }
  }
  for (int o : g.outputs)
    if (o < 0 || o >= static_cast<int>(g.nodes.size())) fail(g.nodes.size(), "bad output");
}

int64_t contract_flops(const Graph& g, const GraphNode& n) {
  const auto& a = std::get<ContractAttr>(n.attr);
  std::map<int, int64_t> sizes;  // axis label → size, over both operands
  const auto collect = [&](const GraphNode& x, const std::vector<int>& labels) {
    for (size_t d = 0; d < labels.size(); ++d)
      sizes[labels[d]] = x.shape[d];
  };
  collect(g.nodes[n.inputs[0]], a.a_axes);
  collect(g.nodes[n.inputs[1]], a.b_axes);
  int64_t points = 1;
  for (const auto& [label, size] : sizes)
    points *= size;
  return 2 * points;
}

std::vector<int> outputs_final_after(const Graph& g) {
  const int n = static_cast<int>(g.nodes.size());
  std::vector<int> after(static_cast<size_t>(n), -1), listed(static_cast<size_t>(n), 0);
  for (int i = 0; i < n; ++i) {
    after[static_cast<size_t>(i)] = std::max(after[static_cast<size_t>(i)], i);
    for (int in : g.nodes[static_cast<size_t>(i)].inputs)
      after[static_cast<size_t>(in)] = std::max(after[static_cast<size_t>(in)], i);
  }
  for (int o : g.outputs)
    ++listed[static_cast<size_t>(o)];
  std::vector<int> final_after;
  for (int o : g.outputs)
    final_after.push_back(listed[static_cast<size_t>(o)] == 1 ? after[static_cast<size_t>(o)] : -1);
  return final_after;
}

int identity_source(const Graph& g, int node) {
  for (;;) {
    const GraphNode& n = g.nodes.at(static_cast<size_t>(node));
    if (n.op != GraphOp::view) return node;
    const Shape& in = g.nodes.at(static_cast<size_t>(n.inputs.at(0))).shape;
    const Shape strides = contiguous_strides(in);
    if (n.shape != in || view_output_strides(std::get<ViewAttr>(n.attr), strides) != strides)
      return node;
    node = n.inputs[0];
  }
}

std::vector<char> read_by_outputs(const Graph& g) {
  std::vector<char> live(g.nodes.size(), 0);
  for (int o : g.outputs) live[static_cast<size_t>(o)] = 1;
  for (size_t i = g.nodes.size(); i-- > 0;)
    if (live[i])
      for (int in : g.nodes[i].inputs) live[static_cast<size_t>(in)] = 1;
  return live;
}

std::vector<int> drop_unread(Graph& g) {
  const size_t n = g.nodes.size();
  const std::vector<char> live = read_by_outputs(g);
  std::map<int, int> index;  // per input index still read: its new one, in order
  for (size_t i = 0; i < n; ++i)
    if (live[i] && g.nodes[i].op == GraphOp::input)
      index.emplace(std::get<InputAttr>(g.nodes[i].attr).index, 0);
  std::vector<int> old_inputs;
  for (auto& [old, now] : index) {
    now = static_cast<int>(old_inputs.size());
    old_inputs.push_back(old);
  }
  std::vector<int> id(n, -1);
  Graph out;
  out.origin = std::move(g.origin);
  for (size_t i = 0; i < n; ++i) {
    if (!live[i]) continue;
    GraphNode node = std::move(g.nodes[i]);
    for (int& in : node.inputs) in = id[static_cast<size_t>(in)];
    if (auto* a = std::get_if<InputAttr>(&node.attr)) a->index = index.at(a->index);
    id[i] = out.add(std::move(node));
  }
  for (int o : g.outputs) out.outputs.push_back(id[static_cast<size_t>(o)]);
  g = std::move(out);
  return old_inputs;
}

}  // namespace ein
