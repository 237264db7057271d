// The linear + cross-entropy recogniser (cross_entropy.h). It starts from each map computing
// `a - b` and checks, node by node through layout nodes (folded into index maps as the fusion
// pass folds them), that a is the logsumexp of a contraction's rows and b the same rows'
// `pick` of the targets; then the chain becomes one linear_cross_entropy node.
#include "compiler/fuse/cross_entropy.h"

#include <algorithm>
#include <numeric>
#include <set>

#include <fmt/format.h>

#include "compiler/fuse/fuse_internal.h"
#include "compiler/fuse/rewrite.h"

namespace ein {
namespace {

using detail::Operand;
using detail::resolve_operand;

struct Fail {
  std::string why;
};

/// Whether the access reads the source in the reader's own index (an identity through layout
/// nodes, size-1 dims broadcasting).
bool identity_access(const Graph& g, const Operand& op) {
  const Shape& s = g.nodes[op.source].shape;
  if (op.access.m.size() != s.size()) return false;
  for (size_t t = 0; t < s.size(); ++t) {
    if (op.access.o[t] != 0) return false;
    for (size_t j = 0; j < op.access.m[t].size(); ++j) {
      const int64_t want = j == t ? 1 : 0;
      if (op.access.m[t][j] != want && !(s[t] == 1 && op.access.m[t][j] == 0)) return false;
    }
  }
  return true;
}

/// Whether map `id`'s body is load(a) `op` load(b) with a, b its inputs 0 and 1.
bool binary_body(const Graph& g, int id, ScalarOp op) {
  const auto* m = std::get_if<MapAttr>(&g.nodes[id].attr);
  if (!m || !m->body || g.nodes[id].inputs.size() != 2) return false;
  const Kernel& k = *m->body;
  const ScalarNode& r = k.nodes[k.result];
  if (r.op != op) return false;
  const ScalarNode &a = k.nodes[r.a], &b = k.nodes[r.b];
  return a.op == ScalarOp::load && a.buffer == 0 && b.op == ScalarOp::load && b.buffer == 1;
}

/// A reduce of `reduction` over the last dim of its input only, kept dims in order.
bool last_dim_reduce(const GraphNode& n, const Graph& g, Reduction reduction) {
  const auto* a = std::get_if<ReduceAttr>(&n.attr);
  if (!a || a->reduction != reduction) return false;
  const Shape& in = g.nodes[n.inputs[0]].shape;
  if (in.empty() || !a->reduced.back() || std::count(a->reduced.begin(), a->reduced.end(), true) != 1)
    return false;
  for (size_t i = 0; i < a->out_order.size(); ++i)
    if (a->out_order[i] != static_cast<int>(i)) return false;
  return true;
}

/// Whether map `id`'s body is where(index(last) == load(target), load(logits), 0) in either
/// order of the comparison; sets which input is the logits.
bool pick_body(const Graph& g, int id, int& logits_input) {
  const auto* m = std::get_if<MapAttr>(&g.nodes[id].attr);
  if (!m || !m->body || g.nodes[id].inputs.size() != 2) return false;
  const Kernel& k = *m->body;
  const int last = static_cast<int>(g.nodes[id].shape.size()) - 1;
  const ScalarNode& w = k.nodes[k.result];
  if (w.op != ScalarOp::where) return false;
  const ScalarNode &cond = k.nodes[w.a], &yes = k.nodes[w.b], &no = k.nodes[w.c];
  if (cond.op != ScalarOp::eq || yes.op != ScalarOp::load || no.op != ScalarOp::constant ||
      no.value != 0)
    return false;
  const ScalarNode &l = k.nodes[cond.a], &r = k.nodes[cond.b];
  const ScalarNode* index = l.op == ScalarOp::index ? &l : r.op == ScalarOp::index ? &r : nullptr;
  const ScalarNode* target = index == &l ? &r : &l;
  if (!index || index->dim != last || target->op != ScalarOp::load || target->buffer == yes.buffer)
    return false;
  logits_input = yes.buffer;
  return true;
}

struct Match {
  int rows = -1;      ///< the `lse - picked` map
  int contract = -1;  ///< the logits' contraction
  int h = -1, w = -1, targets = -1;
  std::vector<int64_t> h_order, w_order;  ///< to [rows..., d] and [d, v]
  std::vector<int> interior;
};

int position(const std::vector<int>& axes, int label) {
  auto it = std::find(axes.begin(), axes.end(), label);
  return it == axes.end() ? -1 : static_cast<int>(it - axes.begin());
}

Match match_at(const Graph& g, int rows) {
  Match m;
  m.rows = rows;
  const GraphNode& rn = g.nodes[rows];
  const Operand a = resolve_operand(g, rows, 0), b = resolve_operand(g, rows, 1);
  const GraphNode &lse = g.nodes[a.source], &picked = g.nodes[b.source];
  if (!last_dim_reduce(lse, g, Reduction::logsumexp)) throw Fail{"not a logsumexp minus a pick"};
  if (!identity_access(g, a) || !identity_access(g, b) || lse.shape != rn.shape ||
      picked.shape != rn.shape)
    throw Fail{"the logsumexp and the pick are not read row for row"};
  if (!last_dim_reduce(picked, g, Reduction::sum)) throw Fail{"the subtrahend is not a pick"};
  const Operand logits_of_lse = resolve_operand(g, a.source, 0);
  const GraphNode& contract = g.nodes[logits_of_lse.source];
  if (contract.op != GraphOp::contract || !identity_access(g, logits_of_lse))
    throw Fail{"the logsumexp's logits are not a contraction's result"};
  const Operand pick_in = resolve_operand(g, b.source, 0);
  int logits_input = -1;
  if (g.nodes[pick_in.source].op != GraphOp::map || !identity_access(g, pick_in) ||
      !pick_body(g, pick_in.source, logits_input))
    throw Fail{"the pick is not where(index == target, logits, 0)"};
  const int pick_map = pick_in.source;
  const Operand pl = resolve_operand(g, pick_map, static_cast<size_t>(logits_input));
  const Operand pt = resolve_operand(g, pick_map, static_cast<size_t>(1 - logits_input));
  if (pl.source != logits_of_lse.source || !identity_access(g, pl))
    throw Fail{"the pick reads other logits than the logsumexp"};
  // The targets: an integer tensor over the rows (read as [rows..., 1]).
  const GraphNode& tn = g.nodes[pt.source];
  if (tn.dtype == DType::f64 || tn.dtype == DType::f32 || tn.dtype == DType::f16 ||
      tn.dtype == DType::bf16)
    throw Fail{"float targets"};
  if (tn.shape != rn.shape) throw Fail{"the targets are not shaped like the rows"};
  for (size_t t = 0; t < tn.shape.size(); ++t)
    for (size_t j = 0; j < pt.access.m[t].size(); ++j)
      if (pt.access.m[t][j] != (j == t ? 1 : 0) && tn.shape[t] != 1)
        throw Fail{"the targets are read other than row for row"};
  // The contraction: rows (h only), one summed axis d, the classes v (w only) last.
  const auto& c = std::get<ContractAttr>(contract.attr);
  const int v_label = c.out_axes.back();
  const bool w_is_b = position(c.b_axes, v_label) >= 0 && position(c.a_axes, v_label) < 0;
  const bool w_is_a = position(c.a_axes, v_label) >= 0 && position(c.b_axes, v_label) < 0;
  if (!w_is_a && !w_is_b) throw Fail{"the classes axis is not one operand's alone"};
  const auto& wl = w_is_b ? c.b_axes : c.a_axes;
  const auto& hl = w_is_b ? c.a_axes : c.b_axes;
  if (wl.size() != 2) throw Fail{"the weight is not a matrix"};
  const int d_label = wl[0] == v_label ? wl[1] : wl[0];
  if (position(c.out_axes, d_label) >= 0 || position(hl, d_label) < 0)
    throw Fail{"the weight's other axis is not summed with h"};
  if (hl.size() != c.out_axes.size()) throw Fail{"h and the logits differ in rank"};
  for (size_t i = 0; i + 1 < c.out_axes.size(); ++i)
    if (position(hl, c.out_axes[i]) < 0) throw Fail{"a row axis is not h's"};
  if (contract.shape.back() < kMinFusedClasses)
    throw Fail{fmt::format("{} classes: fewer than {}, the unfused head is faster",
                           contract.shape.back(), kMinFusedClasses)};
  m.contract = logits_of_lse.source;
  m.h = contract.inputs[w_is_b ? 0 : 1];
  m.w = contract.inputs[w_is_b ? 1 : 0];
  m.targets = pt.source;
  for (size_t i = 0; i + 1 < c.out_axes.size(); ++i) m.h_order.push_back(position(hl, c.out_axes[i]));
  m.h_order.push_back(position(hl, d_label));
  m.w_order = {position(wl, d_label), position(wl, v_label)};
  m.interior = {logits_of_lse.source, a.source, b.source, pick_map};
  for (const Operand* o : {&a, &b, &logits_of_lse, &pick_in, &pl})
    m.interior.insert(m.interior.end(), o->through.begin(), o->through.end());
  return m;
}

/// Appends the replacement of match `m` (found on `g`) to the graph being built: the fused
/// kernel over the rows, and the per-row loss sliced out of it; returns the node that stands
/// for `m.rows`.
int emit(const Graph& g, const Match& m, const std::vector<int>& id, const detail::AddNode& add) {
  auto node = [](GraphOp op, std::vector<int> inputs, Shape shape, DType dtype,
                 decltype(GraphNode::attr) attr = std::monostate{}) {
    GraphNode n;
    n.op = op;
    n.inputs = std::move(inputs);
    n.shape = std::move(shape);
    n.dtype = dtype;
    n.attr = std::move(attr);
    return n;
  };
  const GraphNode& rn = g.nodes[m.rows];
  const GraphNode &hn = g.nodes[m.h], &wn = g.nodes[m.w], &tn = g.nodes[m.targets];
  int64_t rows = 1;
  for (int64_t s : rn.shape) rows *= s;
  Shape hp;
  for (int64_t o : m.h_order) hp.push_back(hn.shape[o]);
  const int64_t d = hp.back(), v = wn.shape[m.w_order[1]];
  int h = id[m.h];
  if (!std::is_sorted(m.h_order.begin(), m.h_order.end()))
    h = add(node(GraphOp::permute, {h}, hp, hn.dtype, PermuteAttr{m.h_order}), m.rows);
  h = add(node(GraphOp::reshape, {h}, {rows, d}, hn.dtype), m.rows);
  int w = id[m.w];
  if (m.w_order[0] != 0)
    w = add(node(GraphOp::permute, {w}, {d, v}, wn.dtype, PermuteAttr{m.w_order}), m.rows);
  const int t = add(node(GraphOp::reshape, {id[m.targets]}, {rows}, tn.dtype), m.rows);
  const DType dtype = rn.dtype == DType::f64 ? DType::f64 : DType::f32;
  // The kernel stands for the head's contraction (its FLOPs are nearly all the product's):
  // reports attribute it to the expression that made the logits.
  const int lce =
      add(node(GraphOp::linear_cross_entropy, {h, w, t}, {rows, 2}, dtype), m.contract);
  int loss = add(node(GraphOp::slice, {lce}, {rows, 1}, dtype, SliceAttr{1, 0, 1}), m.rows);
  loss = add(node(GraphOp::reshape, {loss}, rn.shape, dtype), m.rows);
  if (dtype != rn.dtype) loss = add(node(GraphOp::cast, {loss}, rn.shape, rn.dtype), m.rows);
  return loss;
}

}  // namespace

CrossEntropyFusion fuse_linear_cross_entropy(const Graph& graph) {
  // Candidates: a - b with a a logsumexp over the last dim (a cross-entropy's rows).
  const auto candidate = [](const Graph& g, int i) {
    return g.nodes[i].op == GraphOp::map && binary_body(g, i, ScalarOp::sub) &&
           last_dim_reduce(g.nodes[resolve_operand(g, i, 0).source], g, Reduction::logsumexp);
  };
  const auto match = [](const Graph& g, int i, std::string& why) -> std::optional<detail::Site> {
    try {
      const Match m = match_at(g, i);
      detail::Site site;
      site.at = m.rows;
      site.interior = m.interior;
      site.emit = [&g, m](const std::vector<int>& id, const detail::AddNode& add, const Graph&) {
        return emit(g, m, id, add);
      };
      return site;
    } catch (const Fail& f) {
      why = f.why;
      return std::nullopt;
    }
  };
  detail::Replacements r = detail::replace_all(graph, candidate, match);
  CrossEntropyFusion out{std::move(r.graph), std::move(r.source), r.replaced, {}};
  for (auto& [node, why] : r.misses) out.misses.push_back({node, std::move(why)});
  return out;
}

}  // namespace ein
