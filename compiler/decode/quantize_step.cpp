#include "compiler/decode/quantize_step.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

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

class Quantizer {
 public:
  Quantizer(DecodeStep step, QuantType type, const QuantizesMatrix& eligible)
      : step_(std::move(step)), type_(type), eligible_(eligible), b_(step_.step.origin),
        next_input_(static_cast<int>(step_.inputs.size())) {}

  DecodeStep run() {
    const Graph& g = step_.step;
    std::vector<int> id(g.nodes.size(), -1);
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      GraphNode node = g.nodes[i];
      if (node.op == GraphOp::input) {
        id[i] = b_.input(node.shape, node.dtype, std::get<InputAttr>(node.attr).index);
        continue;
      }
      if (node.op == GraphOp::contract)
        if (const std::optional<int> q = quantized(g, node, id)) {
          id[i] = *q;
          continue;
        }
      for (int& in : node.inputs) in = id[in];
      id[i] = b_.add(std::move(node));
    }
    for (int o : g.outputs) b_.output(id[o]);
    step_.step = b_.finish();
    return std::move(step_);
  }

 private:
  /// The quantized_matmul standing for contraction `c`, or nullopt when neither operand is a
  /// weight matrix it can read from codes.
  std::optional<int> quantized(const Graph& g, const GraphNode& c, const std::vector<int>& id) {
    const auto& a = std::get<ContractAttr>(c.attr);
    for (int w : {1, 0}) {
      const GraphNode& weight = g.nodes[c.inputs[w]];
      if (weight.op != GraphOp::input) continue;
      const int input = std::get<InputAttr>(weight.attr).index;
      const StepInput& from = step_.inputs.at(input);
      if (from.kind != StepInput::Kind::whole || weight.dtype != DType::f32 ||
          weight.shape.size() != 2)
        continue;
      const std::optional<MatrixProduct> p = as_matrix_product(a, w);
      if (!p) continue;
      const GraphNode& xn = g.nodes[c.inputs[p->x]];
      if (!takes_x(xn.dtype) ||
          std::any_of(p->dropped.begin(), p->dropped.end(),
                      [&](int64_t d) { return xn.shape[static_cast<size_t>(d)] != 1; }))
        continue;
      // Asked once per input (the caller may quantize to answer).
      auto [it, fresh] = eligible_of_.try_emplace(input, false);
      if (fresh) it->second = eligible_(from.node, weight.dtype, weight.shape);
      if (!it->second) continue;
      const auto [codes, scales] = codes_of(input, weight);
      int x = id[c.inputs[p->x]];
      bool moved = false;
      for (size_t d = 0; d < p->x_order.size(); ++d)
        moved |= p->x_order[d] != static_cast<int64_t>(d);
      if (moved) x = b_.permute(x, p->x_order);
      if (!p->dropped.empty()) {  // the result's rows, then k
        Shape rows(c.shape.begin(), c.shape.end() - 1);
        rows.push_back(xn.shape[static_cast<size_t>(p->x_order.back())]);
        x = b_.reshape(x, rows);
      }
      return b_.add(GraphOp::quantized_matmul, {x, codes, scales}, c.shape, c.dtype,
                    QuantMatmulAttr{type_, p->layout, weight.shape});
    }
    return std::nullopt;
  }

  /// The step's inputs holding the codes and scales of step input `input` (whole window node
  /// `weight` stands for), made on first use.
  std::pair<int, int> codes_of(int input, const GraphNode& weight) {
    if (auto it = made_.find(input); it != made_.end()) return it->second;
    const int index = static_cast<int>(step_.quantized.size());
    step_.quantized.push_back({step_.inputs[input].node, type_, weight.shape});
    Shape codes = weight.shape, scales = weight.shape;
    const int64_t last = weight.shape.back();
    if (type_ == QuantType::q4_0) codes.back() = (last + 1) / 2;
    scales.back() = (last + kQuantBlock - 1) / kQuantBlock;
    const auto add = [&](Shape shape, DType dtype, StepInput::Kind kind) {
      StepInput in;
      in.kind = kind;
      in.index = index;
      step_.inputs.push_back(in);
      return b_.input(std::move(shape), dtype, next_input_++);
    };
    const int c = add(codes, type_ == QuantType::q8_0 ? DType::i8 : DType::u8,
                      StepInput::Kind::codes);
    const int s = add(scales, DType::f16, StepInput::Kind::scales);
    return made_.emplace(input, std::make_pair(c, s)).first->second;
  }

  DecodeStep step_;
  QuantType type_;
  const QuantizesMatrix& eligible_;
  GraphBuilder b_;
  int next_input_;
  std::map<int, std::pair<int, int>> made_;  ///< per step input of a weight: its codes, scales
  std::map<int, bool> eligible_of_;          ///< per step input: eligible_'s answer
};

}  // namespace

DecodeStep quantize_step(DecodeStep step, QuantType type, const QuantizesMatrix& eligible) {
  if (!step.derived()) return step;
  return Quantizer(std::move(step), type, eligible).run();
}

}  // namespace ein
