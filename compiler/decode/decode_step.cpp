#include "compiler/decode/decode_step.h"

#include <algorithm>
#include <map>
#include <utility>

#include <ein/tensor.h>
#include <fmt/format.h>

#include "compiler/graph/graph_builder.h"
#include "compiler/kernel/kernel_ir.h"

namespace ein {
namespace {

/// Why a node has no step: the message and the node.
struct NoStep {
  std::string why;
  int node = -1;
};

int64_t product(const Shape& s, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i) p *= s[i];
  return p;
}

class Deriver {
 public:
  Deriver(const Graph& window, int token_input, int time_dim)
      : w_(window), token_input_(token_input), time_dim_(time_dim),
        tdim_(window.nodes.size(), -1), step_id_(window.nodes.size(), -1) {}

  DecodeStep run() {
    if (w_.outputs.size() != 1) fail(-1, "returns more than one tensor");
    for (size_t n = 0; n < w_.nodes.size(); ++n) visit(static_cast<int>(n));
    const int out = w_.outputs[0];
    if (tdim_[out] < 0) fail(out, "is the result, and it does not depend on the tokens");
    out_.length = length_;
    out_.output_time_dim = tdim_[out];
    b_.output(step_id_[out]);
    for (int m : cache_writes_) b_.output(m);
    out_.step = b_.finish();
    build_statics();
    return std::move(out_);
  }

 private:
  [[noreturn]] static void fail(int node, std::string why) { throw NoStep{std::move(why), node}; }

  bool dynamic(int n) const { return tdim_[n] >= 0; }

  /// The first window node whose value static node `n`'s is: through views that change
  /// nothing, and over nodes of the same op, attributes, dtype and shape reading the same
  /// values (value numbering). A parameter read at two places (GPT's tied embedding, gathered
  /// and multiplied) is one input of the step, and the causal mask every layer builds alike is
  /// one static, computed and held once (GPT-2's twelve [1024, 1024] masks: 4 MB, not 50).
  int canonical(int n) {
    if (canonical_[n] >= 0) return canonical_[n];
    const int source = identity_source(w_, n);
    if (source != n) return canonical_[n] = canonical(source);
    const GraphNode& node = w_.nodes[n];
    std::string key;
    switch (node.op) {  // the ops whose attributes() says all that their value depends on
      case GraphOp::input: case GraphOp::view: case GraphOp::reshape: case GraphOp::permute:
      case GraphOp::reduce: case GraphOp::contract: case GraphOp::concat: case GraphOp::slice:
      case GraphOp::cast: case GraphOp::map:
        key = fmt::format("{}{} {}[{}]", graph_op_name(node.op), attributes(node),
                          dtype_name(node.dtype), fmt::join(node.shape, ","));
        break;
      default:
        return canonical_[n] = n;
    }
    for (int in : node.inputs) key += fmt::format(" %{}", canonical(in));
    if (const auto* m = std::get_if<MapAttr>(&node.attr)) {
      for (const auto& axes : m->axes) key += fmt::format(" ({})", fmt::join(axes, ","));
      key += '\n' + dump(*m->body);
      for (double p : m->body->params) key += fmt::format(" {:a}", p);
    }
    return canonical_[n] = same_value_.try_emplace(std::move(key), n).first->second;
  }

  /// The step's input for static window node `n`, whole (dim -1) or at the new row of `dim`:
  /// one for each value (canonical()).
  int static_input(int n, int dim) {
    n = canonical(n);
    if (dim >= 0 && w_.nodes[n].shape[dim] == 1) dim = -1;  // a broadcast: every row the same
    if (dim >= 0 && w_.nodes[n].shape[dim] != length_)
      fail(n, fmt::format("lines up with the sequence but has {} rows, not {}",
                          w_.nodes[n].shape[dim], length_));
    const auto key = std::make_pair(n, dim);
    if (auto it = static_inputs_.find(key); it != static_inputs_.end()) return it->second;
    Shape shape = w_.nodes[n].shape;
    if (dim >= 0) shape[dim] = 1;
    const int id = b_.input(shape, w_.nodes[n].dtype);
    StepInput in;
    in.kind = dim >= 0 ? StepInput::Kind::row : StepInput::Kind::whole;
    in.node = n;
    in.dim = dim;
    out_.inputs.push_back(in);
    if (w_.nodes[n].op != GraphOp::input &&
        std::find(read_statics_.begin(), read_statics_.end(), n) == read_statics_.end())
      read_statics_.push_back(n);
    return static_inputs_.emplace(key, id).first->second;
  }

  /// The new position, an i64 [1].
  int position() {
    if (position_ >= 0) return position_;
    position_ = b_.input({1}, DType::i64);
    StepInput in;
    in.kind = StepInput::Kind::position;
    out_.inputs.push_back(in);
    return position_;
  }

  /// The cache of window node `kv`'s rows (an attention's keys or values), the step's own row
  /// (step node `row`) written at the new position, in place (write_row: one row's bytes).
  int cache(int kv, int row) {
    if (auto it = caches_.find(kv); it != caches_.end()) return it->second;
    const GraphNode& node = w_.nodes[kv];
    const int r = static_cast<int>(node.shape.size());
    if (tdim_[kv] != r - 2)
      fail(kv, fmt::format("is an attention's keys or values with the sequence along dim "
                           "{}, not the key dim {}", tdim_[kv], r - 2));
    const int slot = b_.input(node.shape, node.dtype);
    StepInput in;
    in.kind = StepInput::Kind::cache;
    in.index = static_cast<int>(out_.caches.size());
    out_.inputs.push_back(in);
    out_.caches.push_back({node.shape, node.dtype, kv});
    const int written = b_.add(GraphOp::write_row, {slot, row, position()}, node.shape,
                               node.dtype, WriteRowAttr{r - 2});
    cache_writes_.push_back(written);
    return caches_.emplace(kv, written).first->second;
  }

  /// The step's node for window input `i` of dynamic-or-static node `n`, static ones read at
  /// the new row of `row_dim` (-1: whole).
  int operand(int n, int row_dim) {
    return dynamic(n) ? step_id_[n] : static_input(n, row_dim);
  }

  void visit(int n) {
    const GraphNode& node = w_.nodes[n];
    bool any = false;
    for (int i : node.inputs) any = any || dynamic(i);
    if (node.op == GraphOp::input) {
      if (std::get<InputAttr>(node.attr).index != token_input_) return;
      if (time_dim_ < 0 || time_dim_ >= static_cast<int>(node.shape.size()) ||
          node.shape[time_dim_] < 2)
        fail(n, fmt::format("holds tokens {} with no sequence of at least 2 along dim {}",
                            shape_str(node.shape), time_dim_));
      length_ = node.shape[time_dim_];
      tdim_[n] = time_dim_;
      GraphNode copy = node;
      copy.shape[time_dim_] = 1;
      StepInput in;
      in.kind = StepInput::Kind::token;
      in.node = n;
      out_.inputs.push_back(in);
      step_id_[n] = b_.input(copy.shape, copy.dtype);
      return;
    }
    if (!any) return;  // static: computed once, read where a dynamic node needs it
    GraphNode copy = node;
    copy.inputs.clear();
    int t = -1;  // the result's time dim
    switch (node.op) {
      case GraphOp::view: t = view(n, copy); break;
      case GraphOp::reshape: t = reshape(n); break;
      case GraphOp::permute: {
        const auto& order = std::get<PermuteAttr>(node.attr).order;
        t = static_cast<int>(std::find(order.begin(), order.end(), tdim_[node.inputs[0]]) -
                             order.begin());
        break;
      }
      case GraphOp::reduce: {
        const auto& a = std::get<ReduceAttr>(node.attr);
        const int d = tdim_[node.inputs[0]];
        if (a.reduced[d]) fail(n, "reduces along the sequence");
        t = static_cast<int>(std::count(a.reduced.begin(), a.reduced.begin() + d, false));
        break;
      }
      case GraphOp::slice: {
        const int d = tdim_[node.inputs[0]];
        if (std::get<SliceAttr>(node.attr).dim == d)
          fail(n, "slices the sequence");
        t = d;
        break;
      }
      case GraphOp::cast: t = tdim_[node.inputs[0]]; break;
      case GraphOp::map: t = map(n, copy); break;
      case GraphOp::contract: t = contract(n, copy); break;
      case GraphOp::concat: t = concat(n, copy); break;
      case GraphOp::gather:
        if (dynamic(node.inputs[0]))
          fail(n, "picks rows of a table that depends on the tokens");
        copy.inputs = {static_input(node.inputs[0], -1), step_id_[node.inputs[1]]};
        t = tdim_[node.inputs[1]];
        break;
      case GraphOp::attention: t = attention(n, copy); break;
      default:
        fail(n, fmt::format("is a {} node, which has no decode step", graph_op_name(w_.nodes[n].op)));
    }
    if (copy.inputs.empty())
      for (int i : node.inputs) copy.inputs.push_back(step_id_[i]);
    if (t < 0 || t >= static_cast<int>(copy.shape.size()) || node.shape[t] != length_)
      fail(n, "loses track of the sequence");
    tdim_[n] = t;
    copy.shape[t] = 1;
    step_id_[n] = b_.add(std::move(copy));
  }

  int view(int n, GraphNode& copy) {
    auto a = std::get<ViewAttr>(w_.nodes[n].attr);
    const int d = tdim_[w_.nodes[n].inputs[0]];
    int axis = 0;  // elementary axes are numbered across the input dims in order
    for (int i = 0; i < d; ++i) axis += static_cast<int>(a.split[i].size());
    Shape& parts = a.split[d];
    int which = -1;
    for (size_t k = 0; k < parts.size(); ++k) {
      if (parts[k] == 1) continue;
      if (parts[k] != length_ || which >= 0)
        fail(n, fmt::format("splits the sequence into {}", shape_str(parts)));
      which = static_cast<int>(k);
    }
    parts[which] = 1;
    axis += which;
    int t = -1;
    for (size_t j = 0; j < a.dims.size(); ++j) {
      const auto& walks = a.dims[j];
      if (std::find(walks.begin(), walks.end(), axis) == walks.end()) continue;
      if (walks.size() != 1)
        fail(n, "takes a diagonal with the sequence");
      t = static_cast<int>(j);
    }
    copy.attr = std::move(a);
    return t;
  }

  int reshape(int n) {
    const Shape& in = w_.nodes[w_.nodes[n].inputs[0]].shape;
    const Shape& out = w_.nodes[n].shape;
    const int d = tdim_[w_.nodes[n].inputs[0]];
    const int64_t before = product(in, 0, d);
    for (size_t j = 0; j < out.size(); ++j)
      if (out[j] == length_ && product(out, 0, j) == before) return static_cast<int>(j);
    fail(n, fmt::format("merges the sequence with other dims ({} -> {})",
                        shape_str(in), shape_str(out)));
  }

  int map(int n, GraphNode& copy) {
    const GraphNode& node = w_.nodes[n];
    const auto& axes = std::get<MapAttr>(node.attr).axes;
    int t = -1;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      if (!dynamic(node.inputs[i])) continue;
      const int here = axes[i][tdim_[node.inputs[i]]];
      if (t >= 0 && here != t)
        fail(n, "lines the sequence of one input up with another dim");
      t = here;
    }
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const int in = node.inputs[i];
      if (dynamic(in)) {
        copy.inputs.push_back(step_id_[in]);
        continue;
      }
      const auto& a = axes[i];
      const int dim = static_cast<int>(std::find(a.begin(), a.end(), t) - a.begin());
      copy.inputs.push_back(static_input(in, dim < static_cast<int>(a.size()) ? dim : -1));
    }
    return t;
  }

  int contract(int n, GraphNode& copy) {
    const GraphNode& node = w_.nodes[n];
    const auto& a = std::get<ContractAttr>(node.attr);
    const std::vector<int>* labels[2] = {&a.a_axes, &a.b_axes};
    int label = -1;
    for (int i = 0; i < 2; ++i) {
      const int in = node.inputs[i];
      if (!dynamic(in)) continue;
      const int l = (*labels[i])[tdim_[in]];
      if (label >= 0 && l != label)
        fail(n, "multiplies two tensors along the sequence (an attention "
                            "that was not recognised as one)");
      label = l;
    }
    const auto t = std::find(a.out_axes.begin(), a.out_axes.end(), label);
    if (t == a.out_axes.end()) fail(n, "sums over the sequence");
    for (int i = 0; i < 2; ++i) {
      const int in = node.inputs[i];
      const auto& l = *labels[i];
      const auto dim = std::find(l.begin(), l.end(), label);
      copy.inputs.push_back(operand(in, dim == l.end() ? -1 : static_cast<int>(dim - l.begin())));
    }
    return static_cast<int>(t - a.out_axes.begin());
  }

  int concat(int n, GraphNode& copy) {
    const GraphNode& node = w_.nodes[n];
    const auto& a = std::get<ConcatAttr>(node.attr);
    int t = -1;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      if (!dynamic(node.inputs[i])) continue;
      int d = tdim_[node.inputs[i]];
      if (d >= a.dim && d < a.dim + a.spans[i])
        fail(n, "joins tensors along the sequence");
      if (d >= a.dim) d -= static_cast<int>(a.spans[i]) - 1;
      if (t >= 0 && d != t) fail(n, "lines sequences up with other dims");
      t = d;
    }
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const int in = node.inputs[i];
      const int d = t < a.dim ? t : t + static_cast<int>(a.spans[i]) - 1;
      copy.inputs.push_back(operand(in, d));
    }
    return t;
  }

  int attention(int n, GraphNode& copy) {
    const GraphNode& node = w_.nodes[n];
    const int q = node.inputs[0], k = node.inputs[1], v = node.inputs[2];
    const int r = static_cast<int>(node.shape.size());
    if (!dynamic(q) || tdim_[q] != r - 2)
      fail(n, "has queries that do not run along the sequence");
    const bool cached = dynamic(k) || dynamic(v);
    if (cached && !(dynamic(k) && dynamic(v)))
      fail(n, "reads keys or values of which only one depends on the tokens");
    copy.inputs.push_back(step_id_[q]);
    if (cached) {
      if (w_.nodes[k].shape[r - 2] != length_)
        fail(n, fmt::format("attends to {} keys, not the window's {}",
                            w_.nodes[k].shape[r - 2], length_));
      copy.inputs.push_back(cache(k, step_id_[k]));
      copy.inputs.push_back(cache(v, step_id_[v]));
    } else {
      copy.inputs.push_back(static_input(k, -1));
      copy.inputs.push_back(static_input(v, -1));
    }
    if (node.inputs.size() > 3) {
      const int bias = node.inputs[3];
      if (dynamic(bias))
        fail(n, "has a mask that depends on the tokens");
      copy.inputs.push_back(static_input(bias, r - 2));
      if (cached) out_.causal.push_back({canonical(bias), r - 2, r - 1});
    } else if (cached) {
      fail(n, "has no mask: every query sees every key, later ones too, so "
                          "the model is not causal");
    }
    return r - 2;
  }

  /// The window's static nodes that the step reads, as a graph of their own.
  void build_statics() {
    if (read_statics_.empty()) return;
    std::vector<bool> needed(w_.nodes.size(), false);
    for (int n : read_statics_) needed[n] = true;
    for (int n = static_cast<int>(w_.nodes.size()) - 1; n >= 0; --n)
      if (needed[n])
        for (int i : w_.nodes[n].inputs) needed[i] = true;
    GraphBuilder s;
    std::vector<int> id(w_.nodes.size(), -1);
    for (size_t n = 0; n < w_.nodes.size(); ++n) {
      if (!needed[n]) continue;
      const GraphNode& node = w_.nodes[n];
      if (node.op == GraphOp::input) {
        id[n] = s.input(node.shape, node.dtype);
        out_.statics_inputs.push_back(std::get<InputAttr>(node.attr).index);
        continue;
      }
      GraphNode copy = node;
      for (int& i : copy.inputs) i = id[i];
      id[n] = s.add(std::move(copy));
    }
    for (int n : read_statics_) {
      s.output(id[n]);
      out_.static_nodes.push_back(n);
    }
    out_.statics = s.finish();
  }

  const Graph& w_;
  const int token_input_;
  const int time_dim_;
  int64_t length_ = 0;
  std::vector<int> tdim_;     ///< per window node: its time dim; -1: static
  std::vector<int> step_id_;  ///< per dynamic window node: its step node
  std::map<std::pair<int, int>, int> static_inputs_;
  std::vector<int> canonical_ = std::vector<int>(w_.nodes.size(), -1);  ///< canonical()'s answers
  std::map<std::string, int> same_value_;  ///< canonical(): per value's key, its first node
  int position_ = -1;  ///< the step's position input (-1: none yet)
  std::map<int, int> caches_;      ///< window keys/values node -> the step's written cache
  std::vector<int> cache_writes_;  ///< in cache order
  std::vector<int> read_statics_;  ///< static non-input window nodes the step reads
  GraphBuilder b_{"decode step"};
  DecodeStep out_;
};

}  // namespace

DecodeStep derive_decode_step(const Graph& window, int token_input, int time_dim) {
  try {
    return Deriver(window, token_input, time_dim).run();
  } catch (const NoStep& e) {
    DecodeStep none;
    none.why = e.why;
    none.why_node = e.node;
    return none;
  }
}

DecodeStep with_cache_dtype(DecodeStep step, DType dtype) {
  std::vector<int> input_node;  // by InputAttr index
  for (size_t n = 0; n < step.step.nodes.size(); ++n)
    if (const auto* in = std::get_if<InputAttr>(&step.step.nodes[n].attr)) {
      if (in->index >= static_cast<int>(input_node.size())) input_node.resize(in->index + 1, -1);
      input_node[in->index] = static_cast<int>(n);
    }
  for (size_t i = 0; i < step.inputs.size(); ++i) {
    if (step.inputs[i].kind != StepInput::Kind::cache) continue;
    step.caches.at(step.inputs[i].index).dtype = dtype;
    const int slot = input_node.at(i);
    step.step.nodes[slot].dtype = dtype;
    for (GraphNode& n : step.step.nodes)  // the slot's one reader: the write of the new row
      if (n.op == GraphOp::write_row && n.inputs[0] == slot) n.dtype = dtype;
  }
  return step;
}

}  // namespace ein
