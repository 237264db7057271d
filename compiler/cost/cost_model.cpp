// One cost rule per GraphOp, in a table built from ops.def (a missing rule does not compile).
// The conventions, with where they come from:
//   contract  2 × the product of the sizes of all distinct axes of both operands: one multiply
//             and one add per point of the joint iteration space (PyTorch's flop_counter:
//             mm is 2·m·n·k; an axis in one operand only is summed on the way, same count).
//   map       (arithmetic scalar nodes of the body, not leaves: loads, constants, acc, index,
//             param) × output elements; exp, tanh, erf, ... count 1 each (a convention:
//             PyTorch's FlopCounterMode counts no elementwise op at all).
//   fused     its kernel's arithmetic nodes × the points each is evaluated at (every point of
//             the domain, or once per row for row stores) + 1 per point per reduction stage;
//             result (an output of a fused node): 0.
//   reduce    1 per input element for sum/prod/max/min/any/all (one combine each); mean adds
//             1 per output (the divide); logsumexp 4 per input (max, subtract, exp, add) + 2
//             per output (log, add back the max); var 4 per input (mean's add, subtract,
//             square, add) + 2 per output (two divides); std = var + 1 per output (sqrt).
//   views     view, permute, slice, input: 0 FLOPs, 0 bytes (metadata only).
//   copies    reshape, concat, cast: bytes only; a reshape costs nothing when it is a view
//             (known statically when the graph's inputs are contiguous, else at run time).
// Bytes: each input's distinct elements read once (a broadcast input or a repeat's stride-0 view
// counts its own size, not the consumer's), the result written once, at the dtype's element
// size (include/ein/dtype.h).
#include "compiler/cost/cost_model.h"

#include <algorithm>
#include <array>
#include <optional>

#include <fmt/format.h>

#include <ein/flop_counter.h>
#include <ein/quantize.h>

#include <ein/tensor.h>

namespace ein {
namespace {

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s)
    n *= d;
  return n;
}

int64_t bytes_of(const GraphNode& n) {
  return numel(n.shape) * static_cast<int64_t>(element_size(n.dtype));
}

/// The distinct elements a node's value holds: its size, except that a view or layout change
/// of a smaller value (a broadcast, a repeat by stride 0) holds no more than that value.
int64_t distinct_elements(const Graph& g, int id) {
  const GraphNode& n = g.nodes[id];
  int64_t own = numel(n.shape);
  switch (n.op) {
    case GraphOp::view: {
      const auto& dims = std::get<ViewAttr>(n.attr).dims;
      own = 1;
      for (size_t j = 0; j < dims.size(); ++j)
        if (!dims[j].empty()) own *= n.shape[j];  // no elementary axis: a broadcast dim
      return std::min(own, distinct_elements(g, n.inputs[0]));
    }
    case GraphOp::permute:
    case GraphOp::slice:
      return std::min(own, distinct_elements(g, n.inputs[0]));
    case GraphOp::reshape:  // the same shape is always a view; a merge may copy (materialise)
      return g.nodes[n.inputs[0]].shape == n.shape
                 ? std::min(own, distinct_elements(g, n.inputs[0]))
                 : own;
    default:
      return own;
  }
}

/// Bytes of all inputs, each distinct element read once.
int64_t input_bytes(const Graph& g, const GraphNode& n) {
  int64_t b = 0;
  for (int i : n.inputs)
    b += distinct_elements(g, i) * static_cast<int64_t>(element_size(g.nodes[i].dtype));
  return b;
}

/// Bytes only: every input read, the result written.
NodeCost copy_cost(const Graph& g, const GraphNode& n) {
  return {0, 0, input_bytes(g, n), bytes_of(n)};
}

NodeCost free_cost(const Graph&, const GraphNode&) {
  return {};
}

NodeCost cost_input(const Graph& g, const GraphNode& n) {
  return free_cost(g, n);
}
NodeCost cost_view(const Graph& g, const GraphNode& n) {
  return free_cost(g, n);
}
NodeCost cost_permute(const Graph& g, const GraphNode& n) {
  return free_cost(g, n);
}
NodeCost cost_slice(const Graph& g, const GraphNode& n) {
  return free_cost(g, n);
}
NodeCost cost_reshape(const Graph& g, const GraphNode& n) {
  return copy_cost(g, n);
}
NodeCost cost_concat(const Graph& g, const GraphNode& n) {
  return copy_cost(g, n);
}
NodeCost cost_cast(const Graph& g, const GraphNode& n) {
  return copy_cost(g, n);
}

/// gather: a row copy (no FLOPs): the indices and the rows picked are read, the result written.
NodeCost cost_gather(const Graph& g, const GraphNode& n) {
  NodeCost c;
  const int64_t out = numel(n.shape) * static_cast<int64_t>(element_size(n.dtype));
  const GraphNode& idx = g.nodes[n.inputs[1]];
  c.bytes_read = out + numel(idx.shape) * static_cast<int64_t>(element_size(idx.dtype));
  c.bytes_written = out;
  return c;
}
/// scatter_add: one add per value element; reads the values and indices, writes the table.
NodeCost cost_scatter_add(const Graph& g, const GraphNode& n) {
  NodeCost c;
  const GraphNode& values = g.nodes[n.inputs[0]];
  const GraphNode& idx = g.nodes[n.inputs[1]];
  c.flops = numel(values.shape);
  c.bytes_read = numel(values.shape) * static_cast<int64_t>(element_size(values.dtype)) +
                 numel(idx.shape) * static_cast<int64_t>(element_size(idx.dtype));
  c.bytes_written = numel(n.shape) * static_cast<int64_t>(element_size(n.dtype));
  return c;
}

/// The sizes of an attention node: N batch rows (batch dims multiplied), T queries, S keys, E
/// per q/k row, F per v row.
struct AttentionSizes {
  int64_t n = 1, t = 0, s = 0, e = 0, f = 0;
};
AttentionSizes attention_sizes(const Graph& g, const GraphNode& n) {
  const Shape& q = g.nodes[n.inputs[0]].shape;
  const Shape& k = g.nodes[n.inputs[1]].shape;
  const Shape& v = g.nodes[n.inputs[2]].shape;
  AttentionSizes a;
  for (size_t d = 0; d + 2 < q.size(); ++d) a.n *= q[d];
  a.t = q[q.size() - 2];
  a.e = q.back();
  a.s = k[k.size() - 2];
  a.f = v.back();
  return a;
}

/// attention: what the unfused chain costs, the (T × S) logits never stored: q kᵀ and p v
/// (2·T·S·(E + F) per batch row), ~5 FLOPs per logit (scale and bias, max, exp of the
/// difference, sum) and the division of each output. Masked tiles the kernel skips count too
/// (the dense figure, as the unfused graph counted).
NodeCost cost_attention(const Graph& g, const GraphNode& n) {
  const AttentionSizes a = attention_sizes(g, n);
  const int64_t logits = a.n * a.t * a.s, matmul = 2 * logits * (a.e + a.f);
  return {matmul + 5 * logits + a.n * a.t * a.f, matmul, input_bytes(g, n), bytes_of(n)};
}

/// attention_grad (FlashAttention-2's backward): the logits once more (2·T·S·E, with their
/// scale and exp: the recompute part), dV = pᵀ dO,
/// dP = dO vᵀ (2·T·S·F each), dQ = dS k and dK = dSᵀ q (2·T·S·E each); per logit the exp
/// and dS = p ∘ (dP − δ) (4 FLOPs); δ = Σ dO ∘ O per row.
NodeCost cost_attention_grad(const Graph& g, const GraphNode& n) {
  const AttentionSizes a = attention_sizes(g, n);
  const int64_t logits = a.n * a.t * a.s, matmul = 2 * logits * (3 * a.e + 2 * a.f);
  NodeCost c{matmul + 4 * logits + 2 * a.n * a.t * a.f, matmul, input_bytes(g, n), bytes_of(n)};
  c.recompute_matmul_flops = 2 * logits * a.e;       // the logits once more
  c.recompute_flops = c.recompute_matmul_flops + 2 * logits;  // and their scale and exp
  return c;
}

/// linear_cross_entropy: the logits' product (2·N·D·V) and ~4 FLOPs per logit (max, exp of
/// the difference, sum, the pick), as the unfused head and cross-entropy cost; the logits are
/// never written. With its gradients (CrossEntropyAttr::unit_grads): also dh = dL wᵀ and
/// dw = hᵀ dL (2·N·D·V each) and ~2 FLOPs per logit (softmax − one-hot), dh and dw written:
/// the backward's work, its gradient_flops.
NodeCost cost_linear_cross_entropy(const Graph& g, const GraphNode& n) {
  const Shape &h = g.nodes[n.inputs[0]].shape, &w = g.nodes[n.inputs[1]].shape;
  const int64_t logits = h[0] * w[1], matmul = 2 * logits * h[1];
  NodeCost c{matmul + 4 * logits, matmul, input_bytes(g, n), bytes_of(n)};
  if (const auto* a = std::get_if<CrossEntropyAttr>(&n.attr); a && a->unit_grads) {
    c.gradient_flops = 2 * matmul + 2 * logits;
    c.gradient_matmul_flops = 2 * matmul;
    c.flops += c.gradient_flops;
    c.matmul_flops += c.gradient_matmul_flops;
    c.bytes_written += (h[0] * h[1] + h[1] * w[1]) * static_cast<int64_t>(element_size(n.dtype));
  }
  return c;
}

/// linear_cross_entropy_grad (writes dh, and dw as its result 1): the logits once more,
/// dh = dL wᵀ and dw = hᵀ dL (2·N·D·V each), and per logit its exp and the gradient
/// (softmax − one-hot) · cotangent (3 FLOPs). With the forward's unit gradients (inputs 5 and
/// 6): one multiply per element of dh and dw, read and written in place.
NodeCost cost_linear_cross_entropy_grad(const Graph& g, const GraphNode& n) {
  const Shape &h = g.nodes[n.inputs[0]].shape, &w = g.nodes[n.inputs[1]].shape;
  const int64_t logits = h[0] * w[1], matmul = 6 * logits * h[1];
  const int64_t grads = h[0] * h[1] + h[1] * w[1];
  const auto written = grads * static_cast<int64_t>(element_size(n.dtype));
  if (n.inputs.size() == 7) return {grads, 0, input_bytes(g, n), written};
  NodeCost c{matmul + 3 * logits, matmul, input_bytes(g, n), written};  // dh and its result dw
  c.recompute_matmul_flops = 2 * logits * h[1];  // the logits once more
  c.recompute_flops = c.recompute_matmul_flops;
  return c;
}

/// quantized_matmul: a contraction's 2·m·k·n FLOPs; it reads x and the codes and scales.
NodeCost cost_quantized_matmul(const Graph& g, const GraphNode& n) {
  const int64_t flops = 2 * numel(g.nodes[n.inputs[0]].shape) * n.shape.back();
  return {flops, flops, input_bytes(g, n), bytes_of(n)};
}

/// quantized_gather: a gather of rows of codes and scales, each value code · scale; counted as
/// the float gather it stands for is (no FLOPs), reading the rows' codes and scales and the
/// indices and writing the f32 rows.
NodeCost cost_quantized_gather(const Graph& g, const GraphNode& n) {
  const auto& a = std::get<QuantGatherAttr>(n.attr);
  const GraphNode& idx = g.nodes[n.inputs[2]];
  const int64_t rows = numel(idx.shape);
  NodeCost c;
  c.bytes_read = rows * (quantized_nbytes({1, a.table[1]}, a.type) +
                         static_cast<int64_t>(element_size(idx.dtype)));
  c.bytes_written = bytes_of(n);
  return c;
}

/// write_row: no arithmetic; it reads the row and the index and writes the row (in place) in
/// the cache's dtype (a bf16 cache of an f32 row: half the bytes written).
NodeCost cost_write_row(const Graph& g, const GraphNode& n) {
  const GraphNode& row = g.nodes[n.inputs[1]];
  const int64_t read = numel(row.shape) * static_cast<int64_t>(element_size(row.dtype));
  return {0, 0, read + 8, numel(row.shape) * static_cast<int64_t>(element_size(n.dtype))};
}

NodeCost cost_contract(const Graph& g, const GraphNode& n) {
  const int64_t flops = contract_flops(g, n);
  return {flops, flops, input_bytes(g, n), bytes_of(n)};
}

/// Marks the nodes reachable from `roots`.
std::vector<char> reachable(const Kernel& k, const std::vector<int>& roots) {
  std::vector<char> seen(k.nodes.size(), 0);
  std::vector<int> stack(roots.begin(), roots.end());
  while (!stack.empty()) {
    const int i = stack.back();
    stack.pop_back();
    if (i < 0 || seen[i]) continue;
    seen[i] = 1;
    for (int operand : {k.nodes[i].a, k.nodes[i].b, k.nodes[i].c})
      if (operand >= 0) stack.push_back(operand);
  }
  return seen;
}

NodeCost cost_map(const Graph& g, const GraphNode& n) {
  const auto& a = std::get<MapAttr>(n.attr);
  return {a.body ? kernel_flops(*a.body, n.shape) : 0, 0, input_bytes(g, n), bytes_of(n)};
}

/// A fused kernel: its kernel's FLOPs; each input read once; every output tensor written once
/// (the stores placed into another output's tensor fill their part of it).
NodeCost cost_fused(const Graph& g, const GraphNode& n) {
  const auto& a = std::get<FusedAttr>(n.attr);
  int64_t written = 0;
  for (const FusedOutput& o : a.outputs)
    if (o.into < 0) written += numel(o.shape) * static_cast<int64_t>(element_size(o.dtype));
  return {a.kernel ? kernel_flops(*a.kernel, a.kernel->domain) : 0, 0, input_bytes(g, n), written};
}

/// result: picks one output of a fused node; the fused node was charged for writing it.
NodeCost cost_result(const Graph& g, const GraphNode& n) {
  return free_cost(g, n);
}

NodeCost cost_reduce(const Graph& g, const GraphNode& n) {
  const int64_t in = numel(g.nodes[n.inputs[0]].shape), out = numel(n.shape);
  int64_t flops = in;
  switch (std::get<ReduceAttr>(n.attr).reduction) {
    case Reduction::mean:
      flops = in + out;
      break;
    case Reduction::logsumexp:
    case Reduction::var:
      flops = 4 * in + 2 * out;
      break;
    case Reduction::std:
      flops = 4 * in + 3 * out;
      break;
    default:
      break;
  }
  return {flops, 0, input_bytes(g, n), bytes_of(n)};
}

using Rule = NodeCost (*)(const Graph&, const GraphNode&);

// One rule per op, in ops.def order: a row of ops.def without a cost_<name> does not compile.
constexpr Rule kRules[] = {
#define EIN_GRAPH_OP(name, spelling, arity) cost_##name,
#include "compiler/graph/ops.def"
#undef EIN_GRAPH_OP
};
constexpr size_t kOpCount = 0
#define EIN_GRAPH_OP(name, spelling, arity) +1
#include "compiler/graph/ops.def"
#undef EIN_GRAPH_OP
    ;
static_assert(std::size(kRules) == kOpCount, "a cost rule per op in ops.def");

std::string shape_text(const GraphNode& n) {
  std::string dims;
  for (size_t d = 0; d < n.shape.size(); ++d)
    dims += (d ? ", " : "") + std::to_string(n.shape[d]);
  return fmt::format("{}[{}]", dtype_name(n.dtype), dims);
}

/// Whether reshape node `id` will be a view, given the static strides of its input.
bool reshape_is_view(const Graph& g, int id, const std::vector<std::optional<Shape>>& strides) {
  const GraphNode& n = g.nodes[id];
  const std::optional<Shape>& in = strides[n.inputs[0]];
  return g.nodes[n.inputs[0]].shape == n.shape ||
         (in && view_strides(g.nodes[n.inputs[0]].shape, *in, n.shape).has_value());
}

}  // namespace

std::vector<std::optional<Shape>> static_strides(
    const Graph& g, int last, std::span<const std::optional<Shape>> input_strides) {
  std::vector<std::optional<Shape>> out(last + 1);
  for (int i = 0; i <= last; ++i) {
    const GraphNode& n = g.nodes[i];
    const std::optional<Shape> in = n.inputs.empty() ? std::nullopt : out[n.inputs[0]];
    switch (n.op) {
      case GraphOp::input: {
        const auto index = static_cast<size_t>(std::get<InputAttr>(n.attr).index);
        out[i] = index < input_strides.size() ? input_strides[index]
                                              : std::optional<Shape>(contiguous_strides(n.shape));
        break;
      }
      case GraphOp::view:
        if (in) out[i] = view_output_strides(std::get<ViewAttr>(n.attr), *in);
        break;
      case GraphOp::permute:
        if (in) {
          Shape strides;
          for (int64_t d : std::get<PermuteAttr>(n.attr).order)
            strides.push_back((*in)[d]);
          out[i] = strides;
        }
        break;
      case GraphOp::slice:
        out[i] = in;
        break;
      case GraphOp::reshape: {
        std::optional<Shape> v =
            in ? view_strides(g.nodes[n.inputs[0]].shape, *in, n.shape) : std::nullopt;
        out[i] = v ? v : std::optional<Shape>(contiguous_strides(n.shape));
        break;
      }
      case GraphOp::reduce: {  // laid out in out_order, then viewed back (tensor_kernels.cpp)
        const std::vector<int>& order = std::get<ReduceAttr>(n.attr).out_order;
        if (order.size() != n.shape.size()) {
          out[i] = contiguous_strides(n.shape);
          break;
        }
        Shape laid_out, strides(n.shape.size());
        for (int o : order)
          laid_out.push_back(n.shape[o]);
        const Shape c = contiguous_strides(laid_out);
        for (size_t k = 0; k < order.size(); ++k)
          strides[order[k]] = c[k];
        out[i] = strides;
        break;
      }
      case GraphOp::map:
      case GraphOp::concat:
      case GraphOp::fused:
      case GraphOp::result:
      case GraphOp::attention:  // exec/attention.h: o and the logsumexp, rows of e + 1
      case GraphOp::attention_grad:
        out[i] = contiguous_strides(n.shape);
        break;
      default:
        break;  // contract, cast: decided at run time
    }
  }
  return out;
}

int64_t kernel_flops(const Kernel& k, const Shape& domain) {
  const int64_t points = numel(domain);
  const int parallel = static_cast<int>(domain.size()) - k.reduced;
  int64_t rows = 1;
  for (int d = 0; d < parallel; ++d)
    rows *= domain[d];
  std::vector<int> full, row;  // roots evaluated at every point / once per row
  int64_t combines = 0;
  if (k.stores.empty()) {  // the single-output shorthand
    if (k.reduced > 0 && k.combine != Combine::none) {
      full.push_back(k.body);
      row.push_back(k.result);
      combines = 1;
    } else {
      full.push_back(k.result >= 0 ? k.result : k.body);
    }
  } else {
    for (const KernelStage& s : k.stages)
      full.push_back(s.value);
    combines = static_cast<int64_t>(k.stages.size());
    for (const KernelStore& s : k.stores) {
      bool moves = k.reduced == 0;  // does the stored buffer walk the row?
      const Shape& strides = k.buffers[s.buffer].strides;
      for (size_t d = parallel; d < strides.size(); ++d)
        moves = moves || strides[d] != 0;
      (moves ? full : row).push_back(s.value);
    }
  }
  const std::vector<char> at_points = reachable(k, full), at_rows = reachable(k, row);
  int64_t flops = combines * points;
  for (size_t i = 0; i < k.nodes.size(); ++i) {
    if (scalar_op_arity(k.nodes[i].op) == 0) continue;  // load, constant, acc, index, param
    flops += at_points[i] ? points : at_rows[i] ? rows : 0;
  }
  return flops;
}

double NodeCost::intensity() const {
  const int64_t bytes = bytes_read + bytes_written;
  return bytes > 0 ? static_cast<double>(flops) / static_cast<double>(bytes) : 0;
}

NodeCost& NodeCost::operator+=(const NodeCost& o) {
  flops += o.flops;
  matmul_flops += o.matmul_flops;
  recompute_flops += o.recompute_flops;
  recompute_matmul_flops += o.recompute_matmul_flops;
  gradient_flops += o.gradient_flops;
  gradient_matmul_flops += o.gradient_matmul_flops;
  bytes_read += o.bytes_read;
  bytes_written += o.bytes_written;
  return *this;
}

NodeCost node_cost(const Graph& graph, int id, ReshapeLayout reshape) {
  const GraphNode& n = graph.nodes[id];
  if (n.op == GraphOp::reshape &&
      (reshape == ReshapeLayout::view || (reshape == ReshapeLayout::analyse &&
                                          reshape_is_view(graph, id, static_strides(graph, id)))))
    return {};
  return kRules[static_cast<int>(n.op)](graph, n);
}

GraphCost cost(const Graph& graph) {
  GraphCost c;
  c.nodes.reserve(graph.nodes.size());
  const auto strides = static_strides(graph, static_cast<int>(graph.nodes.size()) - 1);
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const int id = static_cast<int>(i);
    const bool view = graph.nodes[i].op == GraphOp::reshape && reshape_is_view(graph, id, strides);
    c.nodes.push_back(node_cost(graph, id, view ? ReshapeLayout::view : ReshapeLayout::copy));
    c.total += c.nodes.back();
  }
  return c;
}

std::string format_cost(const Graph& graph, const GraphCost& c) {
  std::string out = fmt::format("cost of {} ({}; bytes: each tensor read or written once)\n",
                                graph.origin, kFlopConvention);
  const auto row = [&](std::string_view id, std::string_view op, std::string_view shape,
                       const NodeCost& n) {
    out += fmt::format("  {:<5} {:<9} {:<22} {:>14} {:>14} {:>12} {:>12} {:>8.2f}\n", id, op, shape,
                       n.flops, n.matmul_flops, n.bytes_read, n.bytes_written, n.intensity());
  };
  out += fmt::format("  {:<5} {:<9} {:<22} {:>14} {:>14} {:>12} {:>12} {:>8}\n", "node", "op",
                     "result", "FLOPs", "matmul FLOPs", "read B", "written B", "FLOP/B");
  for (size_t i = 0; i < graph.nodes.size(); ++i)
    row(fmt::format("%{}", i), graph_op_name(graph.nodes[i].op), shape_text(graph.nodes[i]),
        c.nodes[i]);
  row("total", "", "", c.total);
  return out;
}

}  // namespace ein
