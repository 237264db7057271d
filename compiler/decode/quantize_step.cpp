#include "compiler/decode/quantize_step.h"

#include <algorithm>
#include <cstddef>
#include <map>
#include <optional>
#include <utility>

#include <ein/quantize.h>

#include "compiler/graph/graph_builder.h"

namespace ein {
namespace {

/// The dtypes of x that ein::quantized_matmul multiplies.
bool takes_x(DType d) { return d == DType::f32 || d == DType::bf16 || d == DType::f16; }

/// A contraction read as x @ W or x @ Wᵀ: which operand x is, the order of x's dims that
/// puts the summed one last (after those it drops), the dims it drops (summed alone: they
/// must have size 1), and how W is read.
struct MatrixProduct {
  int x = 0;
  std::vector<int64_t> x_order;
  std::vector<int64_t> dropped;
  WeightLayout layout = WeightLayout::in_out;
};

/// Contraction `a` as a product of its operand `w` (0 or 1), a matrix: one of W's dims is the
/// result's last dim (n), the other (k) is summed with x's, and x's other dims are the
/// result's others, in order, or summed alone (a batch of one the result leaves out). nullopt
/// for any other contraction.
std::optional<MatrixProduct> as_matrix_product(const ContractAttr& a, int w) {
  const std::vector<int>& wl = w == 0 ? a.a_axes : a.b_axes;
  const std::vector<int>& xl = w == 0 ? a.b_axes : a.a_axes;
  if (wl.size() != 2 || wl[0] == wl[1] || a.out_axes.empty()) return std::nullopt;
  const int n_dim = a.out_axes.back() == wl[1] ? 1 : a.out_axes.back() == wl[0] ? 0 : -1;
  if (n_dim < 0) return std::nullopt;
  const int n = wl[n_dim], k = wl[1 - n_dim];
  const auto has = [](const std::vector<int>& v, int l) {
    return std::find(v.begin(), v.end(), l) != v.end();
  };
  if (has(xl, n) || has(a.out_axes, k)) return std::nullopt;
  MatrixProduct p;
  p.x = 1 - w;
  p.layout = n_dim == 1 ? WeightLayout::in_out : WeightLayout::out_in;
  std::vector<int> rest;
  int64_t summed = -1;
  for (size_t d = 0; d < xl.size(); ++d) {
    if (xl[d] == k) {
      if (summed >= 0) return std::nullopt;  // a diagonal of x
      summed = static_cast<int64_t>(d);
      continue;
    }
    if (has(a.out_axes, xl[d])) {
      rest.push_back(xl[d]);
      p.x_order.push_back(static_cast<int64_t>(d));
    } else {
      p.dropped.push_back(static_cast<int64_t>(d));
    }
  }
  rest.push_back(n);
  if (summed < 0 || rest != a.out_axes) return std::nullopt;
  p.x_order.insert(p.x_order.end(), p.dropped.begin(), p.dropped.end());
  p.x_order.push_back(summed);
  return p;
}

/// Rebuilds a graph with each contraction that multiplies by a weight matrix read from codes
/// made a quantized_matmul, and each gather of its rows (an embedding) a quantized_gather:
/// `codes_of(b, w)` says whether node `w` of the graph (the contraction's operand, the
/// gather's table) is such a matrix, returning the builder's codes and scales nodes for it
/// (made on first use), or nullopt to keep the node as it is. The graph's inputs keep their
/// indices; codes_of numbers new ones after them. What only the rewritten nodes read is
/// dropped (drop_unread()).
class ProductRewriter {
 public:
  using CodesOf = std::function<std::optional<std::pair<int, int>>(GraphBuilder& b, int w)>;

  ProductRewriter(const Graph& g, CodesOf codes_of) : g_(g), codes_of_(std::move(codes_of)) {}

  /// The rewritten graph; `old_inputs` receives, per its input, the index that input had
  /// (codes_of's new ones included), those no node reads any more dropped.
  Graph run(std::vector<int>& old_inputs) {
    GraphBuilder b(g_.origin);
    std::vector<int> id(g_.nodes.size(), -1);
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      GraphNode node = g_.nodes[i];
      if (node.op == GraphOp::input) {
        id[i] = b.input(node.shape, node.dtype, std::get<InputAttr>(node.attr).index);
        continue;
      }
      if (node.op == GraphOp::contract)
        if (const std::optional<int> q = quantized(b, node, id)) {
          id[i] = *q;
          continue;
        }
      if (node.op == GraphOp::gather)
        if (const std::optional<int> q = quantized_rows(b, node, id)) {
          id[i] = *q;
          continue;
        }
      for (int& in : node.inputs) in = id[in];
      id[i] = b.add(std::move(node));
    }
    for (int o : g_.outputs) b.output(id[o]);
    Graph out = b.take();
    old_inputs = drop_unread(out);
    verify(out);
    return out;
  }

 private:
  /// The quantized_matmul standing for contraction `c`, or nullopt when neither operand is a
  /// weight matrix read from codes.
  std::optional<int> quantized(GraphBuilder& b, const GraphNode& c, const std::vector<int>& id) {
    const auto& a = std::get<ContractAttr>(c.attr);
    for (int w : {1, 0}) {
      const GraphNode& weight = g_.nodes[c.inputs[w]];
      if (weight.dtype != DType::f32 || weight.shape.size() != 2) continue;
      const std::optional<MatrixProduct> p = as_matrix_product(a, w);
      if (!p) continue;
      const GraphNode& xn = g_.nodes[c.inputs[p->x]];
      if (!takes_x(xn.dtype) ||
          std::any_of(p->dropped.begin(), p->dropped.end(),
                      [&](int64_t d) { return xn.shape[static_cast<size_t>(d)] != 1; }))
        continue;
      const std::optional<std::pair<int, int>> codes = codes_of_(b, c.inputs[w]);
      if (!codes) continue;
      int x = id[c.inputs[p->x]];
      bool moved = false;
      for (size_t d = 0; d < p->x_order.size(); ++d)
        moved |= p->x_order[d] != static_cast<int64_t>(d);
      if (moved) x = b.permute(x, p->x_order);
      if (!p->dropped.empty()) {  // the result's rows, then k
        Shape rows(c.shape.begin(), c.shape.end() - 1);
        rows.push_back(xn.shape[static_cast<size_t>(p->x_order.back())]);
        x = b.reshape(x, rows);
      }
      const GraphNode& cn = b.node(codes->first);
      const QuantType type = cn.dtype == DType::i8 ? QuantType::q8_0 : QuantType::q4_0;
      return b.add(GraphOp::quantized_matmul, {x, codes->first, codes->second}, c.shape, c.dtype,
                   QuantMatmulAttr{type, p->layout, weight.shape});
    }
    return std::nullopt;
  }

  /// The quantized_gather standing for gather `gather`, or nullopt when its table is not a
  /// matrix read from codes.
  std::optional<int> quantized_rows(GraphBuilder& b, const GraphNode& gather,
                                    const std::vector<int>& id) {
    const GraphNode& table = g_.nodes[gather.inputs[0]];
    if (table.dtype != DType::f32 || table.shape.size() != 2 || gather.dtype != DType::f32)
      return std::nullopt;
    const std::optional<std::pair<int, int>> codes = codes_of_(b, gather.inputs[0]);
    if (!codes) return std::nullopt;
    const QuantType type = b.node(codes->first).dtype == DType::i8 ? QuantType::q8_0
                                                                    : QuantType::q4_0;
    const int rows =
        b.add(GraphOp::quantized_gather, {codes->first, codes->second, id[gather.inputs[1]]},
              gather.shape, DType::f32, QuantGatherAttr{type, table.shape});
    b.locate(rows, gather.source, gather.range);  // an index out of range: at the script's x[i]
    return rows;
  }

  const Graph& g_;
  CodesOf codes_of_;
};

/// The codes and scales of a `type` matrix of `shape` as two new inputs of `b`, numbered
/// `next` and `next + 1` (advanced past them).
std::pair<int, int> codes_inputs(GraphBuilder& b, QuantType type, const Shape& shape, int& next) {
  Shape codes = shape, scales = shape;
  const int64_t last = shape.back();
  if (type == QuantType::q4_0) codes.back() = (last + 1) / 2;
  scales.back() = (last + kQuantBlock - 1) / kQuantBlock;
  const int c = b.input(codes, type == QuantType::q8_0 ? DType::i8 : DType::u8, next++);
  const int s = b.input(scales, DType::f16, next++);
  return {c, s};
}

/// The number of inputs of `g`: one past its highest input index.
int input_count(const Graph& g) {
  int n = 0;
  for (const GraphNode& node : g.nodes)
    if (node.op == GraphOp::input) n = std::max(n, std::get<InputAttr>(node.attr).index + 1);
  return n;
}

}  // namespace

DecodeStep quantize_step(DecodeStep step, QuantType type, const QuantizesMatrix& eligible) {
  if (!step.derived()) return step;
  std::vector<StepInput> inputs = step.inputs;
  int next = input_count(step.step);
  std::map<int, std::pair<int, int>> made;  // per step input of a weight: its codes, scales
  std::map<int, bool> eligible_of;          // per step input: eligible's answer
  const Graph& g = step.step;
  const auto codes_of = [&](GraphBuilder& b, int w) -> std::optional<std::pair<int, int>> {
    const GraphNode& weight = g.nodes[w];
    if (weight.op != GraphOp::input) return std::nullopt;
    const int input = std::get<InputAttr>(weight.attr).index;
    const StepInput& from = step.inputs.at(input);
    if (from.kind != StepInput::Kind::whole) return std::nullopt;
    // Asked once per input (the caller may quantize to answer).
    auto [it, fresh] = eligible_of.try_emplace(input, false);
    if (fresh) it->second = eligible(from.node, weight.dtype, weight.shape);
    if (!it->second) return std::nullopt;
    if (auto m = made.find(input); m != made.end()) return m->second;
    const int index = static_cast<int>(step.quantized.size());
    step.quantized.push_back({from.node, type, weight.shape});
    for (StepInput::Kind kind : {StepInput::Kind::codes, StepInput::Kind::scales}) {
      StepInput in;
      in.kind = kind;
      in.index = index;
      inputs.push_back(in);
    }
    return made.emplace(input, codes_inputs(b, type, weight.shape, next)).first->second;
  };
  std::vector<int> old_inputs;
  Graph rewritten = ProductRewriter(g, codes_of).run(old_inputs);
  step.inputs.clear();
  for (int old : old_inputs) step.inputs.push_back(inputs.at(static_cast<size_t>(old)));
  step.step = std::move(rewritten);
  return step;
}

Graph quantize_window(const Graph& window, const std::vector<QuantizedMatrix>& matrices,
                      std::vector<int>& old_inputs) {
  const int first = input_count(window);
  std::map<int, std::pair<int, int>> made;  // per matrix: its codes, scales
  const auto codes_of = [&](GraphBuilder& b, int w) -> std::optional<std::pair<int, int>> {
    w = identity_source(window, w);  // the step reads a parameter, the window a view of it
    const auto m = std::find_if(matrices.begin(), matrices.end(),
                                [&](const QuantizedMatrix& q) { return q.node == w; });
    if (m == matrices.end()) return std::nullopt;
    if (auto it = made.find(w); it != made.end()) return it->second;
    // Numbered by the matrix's place in `matrices`, so the feeds follow that order.
    int at = first + 2 * static_cast<int>(m - matrices.begin());
    return made.emplace(w, codes_inputs(b, m->type, m->shape, at)).first->second;
  };
  return ProductRewriter(window, codes_of).run(old_inputs);
}

Graph decoder_window(const Graph& window, const DecodeStep& step, std::vector<int>& inputs) {
  Graph pass = window;
  for (const CacheSlot& slot : step.caches) {
    int row = slot.window_node;
    if (pass.nodes.at(row).dtype != slot.dtype) {  // a cache of another dtype: rounded to it
      GraphNode cast;
      cast.op = GraphOp::cast;
      cast.inputs = {row};
      cast.shape = pass.nodes[row].shape;
      cast.dtype = slot.dtype;
      row = pass.add(std::move(cast));
    }
    pass.outputs.push_back(row);
  }
  if (!step.quantized.empty()) return quantize_window(pass, step.quantized, inputs);
  inputs.clear();
  for (int i = 0; i < input_count(window); ++i) inputs.push_back(i);
  return pass;
}

Graph decoder_refill(const Graph& window, const DecodeStep& step, std::vector<int>& inputs) {
  Graph pass = decoder_window(window, step, inputs);
  pass.outputs.erase(pass.outputs.begin(),
                     pass.outputs.begin() + static_cast<std::ptrdiff_t>(window.outputs.size()));
  std::vector<int> kept;
  for (int old : drop_unread(pass)) kept.push_back(inputs.at(static_cast<size_t>(old)));
  inputs = std::move(kept);
  return pass;
}

bool refills_past_the_window(int64_t refill_flops, int64_t step_flops, int64_t window_flops) {
  return static_cast<double>(refill_flops) + kStepSlowdown * static_cast<double>(step_flops) <=
         kRefillShare * static_cast<double>(window_flops);
}

DecoderReads decoder_reads(const Graph& window, const DecodeStep& step,
                           const std::vector<int>& inputs) {
  const int n = input_count(window);
  DecoderReads r;
  r.inputs.assign(static_cast<size_t>(n), 0);
  r.statics.assign(step.static_nodes.size(), 0);
  for (int old : inputs)
    if (old < n) r.inputs[static_cast<size_t>(old)] = 1;
  for (const StepInput& s : step.inputs) {
    if (s.kind != StepInput::Kind::whole && s.kind != StepInput::Kind::row) continue;
    const GraphNode& node = window.nodes.at(static_cast<size_t>(s.node));
    if (node.op == GraphOp::input) {
      r.inputs[static_cast<size_t>(std::get<InputAttr>(node.attr).index)] = 1;
    } else {
      const auto it = std::find(step.static_nodes.begin(), step.static_nodes.end(), s.node);
      r.statics[static_cast<size_t>(it - step.static_nodes.begin())] = 1;
    }
  }
  return r;
}

int64_t decoder_weight_bytes(const Graph& window, const DecodeStep& step) {
  int token_input = -1;
  for (const StepInput& s : step.inputs)
    if (s.kind == StepInput::Kind::token)
      token_input = std::get<InputAttr>(window.nodes.at(static_cast<size_t>(s.node)).attr).index;
  std::vector<int> inputs;
  decoder_window(window, step, inputs);
  DecoderReads r = decoder_reads(window, step, inputs);
  const auto bytes = [](const GraphNode& node) {
    return checked_numel(node.shape) * static_cast<int64_t>(element_size(node.dtype));
  };
  int64_t total = 0;
  for (size_t k = 0; k < step.static_nodes.size(); ++k) {
    if (!r.statics[k]) continue;
    // A view (a slice, a broadcast) keeps the bytes of what it views: a window input's, or
    // those of the node that computed them.
    const GraphNode* node = &window.nodes.at(static_cast<size_t>(step.static_nodes[k]));
    while (node->op == GraphOp::slice || node->op == GraphOp::view ||
           node->op == GraphOp::permute)
      node = &window.nodes.at(static_cast<size_t>(node->inputs.at(0)));
    if (node->op == GraphOp::input)
      r.inputs[static_cast<size_t>(std::get<InputAttr>(node->attr).index)] = 1;
    else
      total += bytes(*node);  // the node that made the bytes the view sees
  }
  for (const GraphNode& node : window.nodes)
    if (node.op == GraphOp::input) {
      const int index = std::get<InputAttr>(node.attr).index;
      if (index != token_input && r.inputs[static_cast<size_t>(index)]) {
        total += bytes(node);
        r.inputs[static_cast<size_t>(index)] = 0;  // counted once
      }
    }
  for (const QuantizedMatrix& m : step.quantized) total += quantized_nbytes(m.shape, m.type);
  return total;
}

}  // namespace ein
