// The attention recogniser (attention.h). It reads the graph as scalar algebra: starting from
// the second contraction's probability operand p, every map's body is expanded with its loads
// replaced by the expansions of what they read (layout nodes folded into index maps, as the
// fusion pass folds them), each value placed in the frame of p's dims ("X dims"). In that form
// the softmax is a tree shape, the scores are one leaf, and the logits' dependence on the
// scores is checked to be `scale · scores + bias` by a walk over the tree. The bias is the
// logit tree with the scores set to 0, emitted as one map over the dims it varies along.
#include "compiler/fuse/attention.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <stdexcept>

#include <fmt/format.h>

#include "compiler/fuse/attention_expand.h"
#include "compiler/fuse/fuse_internal.h"
#include "compiler/fuse/rewrite.h"

namespace ein {
namespace {

using detail::Expander;
using detail::NoAttention;
using detail::Operand;
using detail::resolve_operand;
using detail::Sym;

bool is_integer_like(DType t) {
  return t == DType::i64 || t == DType::i32 || t == DType::i8 || t == DType::u8 ||
         t == DType::boolean;
}

/// The logits as scale · scores + bias, checked over the tree (attention.h lists the forms).
struct Affine {
  double scale = 1;
};

std::optional<double> constant_value(const Expander& e, int s) {
  const Sym& x = e.pool[s];
  if (x.kind != Sym::Kind::op) return std::nullopt;
  if (x.op == ScalarOp::constant) return x.value;
  std::vector<double> v;
  for (int a : x.args) {
    auto c = constant_value(e, a);
    if (!c) return std::nullopt;
    v.push_back(*c);
  }
  switch (x.op) {
    case ScalarOp::neg: return -v[0];
    case ScalarOp::sqrt: return std::sqrt(v[0]);
    case ScalarOp::rsqrt: return 1 / std::sqrt(v[0]);
    case ScalarOp::reciprocal: return 1 / v[0];
    case ScalarOp::add: return v[0] + v[1];
    case ScalarOp::sub: return v[0] - v[1];
    case ScalarOp::mul: return v[0] * v[1];
    case ScalarOp::div: return v[0] / v[1];
    default: return std::nullopt;
  }
}

bool leaves_integer(const Graph& g, const Expander& e, int s) {
  const Sym& x = e.pool[s];
  if (x.kind == Sym::Kind::leaf) return is_integer_like(g.nodes[x.node].dtype);
  for (int a : x.args)
    if (!leaves_integer(g, e, a)) return false;
  return true;
}

double logit_scale(const Graph& g, const Expander& e, int s) {
  const Sym& x = e.pool[s];
  if (!x.depends) throw NoAttention{"internal: an independent logit term"};
  if (x.kind == Sym::Kind::leaf) {
    if (!x.scores)
      throw NoAttention{fmt::format("the logits read the scores through a {} node",
                                    graph_op_name(g.nodes[x.node].op))};
    return 1;
  }
  if (x.kind == Sym::Kind::reduce) throw NoAttention{"the logits reduce the scores"};
  auto other = [&](int i) { return x.args[1 - i]; };
  auto dep = [&]() -> int {
    int d = -1;
    for (size_t i = 0; i < x.args.size(); ++i)
      if (e.pool[x.args[i]].depends) {
        if (d >= 0) throw NoAttention{"the scores enter the logits twice"};
        d = static_cast<int>(i);
      }
    return d;
  };
  const int i = dep();
  auto finite_constant = [&](int a, const char* what) {
    const auto c = constant_value(e, a);
    if (!c || !std::isfinite(*c) || *c == 0)
      throw NoAttention{
          fmt::format("the scores are {} something other than a finite nonzero constant", what)};
    return *c;
  };
  switch (x.op) {
    case ScalarOp::neg:
      return -logit_scale(g, e, x.args[0]);
    case ScalarOp::mul:
      return finite_constant(other(i), "multiplied by") * logit_scale(g, e, x.args[i]);
    case ScalarOp::div:
      if (i != 0) throw NoAttention{"the scores divide something"};
      return logit_scale(g, e, x.args[0]) / finite_constant(x.args[1], "divided by");
    case ScalarOp::add:
    case ScalarOp::sub:
      if (!leaves_integer(g, e, other(i)))
        throw NoAttention{
            "an additive bias computed from float tensors (it could need a gradient, which "
            "the fused kernel does not give)"};
      return (x.op == ScalarOp::sub && i == 1 ? -1 : 1) * logit_scale(g, e, x.args[i]);
    case ScalarOp::where: {
      if (i == 0) throw NoAttention{"the scores choose a where's branch"};
      const auto c = constant_value(e, x.args[i == 1 ? 2 : 1]);
      if (!c || !(std::isinf(*c) && *c < 0))
        throw NoAttention{"a where whose other branch is not -inf (a finite fill is not a mask)"};
      return logit_scale(g, e, x.args[i]);
    }
    default:
      throw NoAttention{fmt::format("the scores pass through '{}'", scalar_op_spelling(x.op))};
  }
}

/// One match: what the rewrite needs.
struct Match {
  int y = -1;                      ///< the second contraction
  int scores = -1;                 ///< the first
  int logits = -1;                 ///< the tree of the logits (in the expander's pool)
  double scale = 1;
  std::vector<int> batch_x;        ///< X dims of the batch axes, in X order
  int t_x = -1;                    ///< X dim of the query axis
  // Per operand: the source node and its dim of each canonical position.
  int q = -1, k = -1, v = -1;
  std::vector<int64_t> q_order, k_order, v_order;  ///< permutes to [batch..., t|s, e|f]
  std::vector<int64_t> y_order;    ///< y's dims from the canonical [batch..., t, f]
  std::set<int> interior;
};

/// The position of `label` in `axes`, or -1.
int position(const std::vector<int>& axes, int label) {
  auto it = std::find(axes.begin(), axes.end(), label);
  return it == axes.end() ? -1 : static_cast<int>(it - axes.begin());
}

/// Tries to match attention ending at contraction `y`; throws NoAttention with the reason.
Match match_at(const Graph& g, int y, Expander*& keep, std::vector<std::unique_ptr<Expander>>& owned) {
  const GraphNode& yn = g.nodes[y];
  const auto& ya = std::get<ContractAttr>(yn.attr);
  // Which operand is p: the one whose source is a map over a reduce (the softmax's division).
  for (int side = 0; side < 2; ++side) {
    const Operand po = resolve_operand(g, y, static_cast<size_t>(side));
    const GraphNode& pn = g.nodes[po.source];
    if (pn.op != GraphOp::map) continue;
    const Operand vo = resolve_operand(g, y, static_cast<size_t>(1 - side));
    const std::vector<int>& p_labels = side == 0 ? ya.a_axes : ya.b_axes;
    const std::vector<int>& v_labels = side == 0 ? ya.b_axes : ya.a_axes;
    const int rank = static_cast<int>(pn.shape.size());
    if (rank < 2) continue;
    // p's dims as y reads them: the identity (layout between p and y must be a permutation).
    std::vector<int> p_label_of(rank, -1);  // X dim -> y's label
    {
      if (po.access.m.size() != static_cast<size_t>(rank)) continue;
      bool ok = true;
      for (int t = 0; t < rank && ok; ++t) {
        int at = -1;
        for (size_t j = 0; j < po.access.m[t].size(); ++j)
          if (po.access.m[t][j] != 0) {
            if (po.access.m[t][j] != 1 || at >= 0) ok = false;
            at = static_cast<int>(j);
          }
        if (at < 0 || po.access.o[t] != 0) ok = false;
        if (ok) p_label_of[t] = p_labels[at];
      }
      if (!ok) throw NoAttention{"p reaches the second contraction through a non-permuting view"};
    }
    const int s_label = p_label_of[rank - 1];
    if (position(ya.out_axes, s_label) >= 0 || position(v_labels, s_label) < 0)
      throw NoAttention{"the second contraction does not sum over the softmax's axis"};
    // v: labels = batch (p's), s, and one value axis f.
    int f_label = -1;
    for (int l : v_labels)
      if (position(p_label_of, l) < 0) {
        if (f_label >= 0) throw NoAttention{"v has more than one value axis"};
        f_label = l;
      }
    if (f_label < 0 || position(ya.out_axes, f_label) < 0) throw NoAttention{"v has no value axis"};
    if (static_cast<int>(v_labels.size()) != rank)
      throw NoAttention{"v does not share p's batch axes"};
    auto owned_expander = std::make_unique<Expander>(g, rank);
    Expander& e = *owned_expander;
    std::vector<int> iota_x(rank);
    std::iota(iota_x.begin(), iota_x.end(), 0);
    // First pass without knowing the scores node: find the softmax shape.
    const int p = e.expand(po.source, iota_x);
    const Sym& ps = e.pool[p];
    if (ps.kind != Sym::Kind::op || ps.op != ScalarOp::div)
      throw NoAttention{"p is not a division (exp(x - max) / sum)"};
    const int num = ps.args[0], den = ps.args[1];
    const Sym& ds = e.pool[den];
    if (ds.kind != Sym::Kind::reduce || ds.reduction != Reduction::sum || !e.same(ds.args[0], num))
      throw NoAttention{"p's denominator is not the sum of its numerator over the key axis"};
    const Sym& ns = e.pool[num];
    if (ns.op != ScalarOp::exp || ns.kind != Sym::Kind::op)
      throw NoAttention{"p's numerator is not an exp"};
    const Sym& sub = e.pool[ns.args[0]];
    if (sub.kind != Sym::Kind::op || sub.op != ScalarOp::sub)
      throw NoAttention{"the exp's argument is not x - max(x)"};
    const Sym& mx = e.pool[sub.args[1]];
    if (mx.kind != Sym::Kind::reduce || mx.reduction != Reduction::max ||
        !e.same(mx.args[0], sub.args[0]))
      throw NoAttention{"the exp's argument is not x - max(x) over the key axis"};
    const int x = sub.args[0];
    // The scores: the one contraction leaf of x placed as a permutation of the X dims (those
    // of size 1 at no X dim, as place() reads them).
    const Shape& x_shape = g.nodes[po.source].shape;
    std::vector<int> placed = iota_x;
    for (int d = 0; d < rank; ++d)
      if (x_shape[d] == 1) placed[d] = -1;
    std::sort(placed.begin(), placed.end());
    int scores = -1;
    std::vector<int> scores_axes;
    std::vector<int> stack{x};
    while (!stack.empty()) {
      const int s = stack.back();
      stack.pop_back();
      const Sym& sy = e.pool[s];
      if (sy.kind == Sym::Kind::leaf) {
        if (g.nodes[sy.node].op != GraphOp::contract) continue;
        std::vector<int> sorted = sy.axes;
        std::sort(sorted.begin(), sorted.end());
        if (sorted != placed) continue;
        if (scores >= 0 && (scores != sy.node || scores_axes != sy.axes))
          throw NoAttention{"the logits read two contractions"};
        scores = sy.node;
        scores_axes = sy.axes;
      }
      stack.insert(stack.end(), sy.args.begin(), sy.args.end());
    }
    if (scores < 0) throw NoAttention{"the logits read no contraction over all of p's dims"};
    // The scores' dims of size 1 take the X dims of size 1, in order: which goes where moves
    // no element.
    for (int d = 0, at = 0; d < rank; ++d)
      if (x_shape[d] == 1) {
        while (scores_axes[at] != -1) ++at;
        scores_axes[at++] = d;
      }
    // Second pass with the scores known: dependence flags and the interior nodes.
    owned_expander = std::make_unique<Expander>(g, rank);
    Expander& e2 = *owned_expander;
    e2.set_scores(scores);
    const int p2 = e2.expand(po.source, iota_x);
    const int num2 = e2.pool[p2].args[0];                // exp(x - max)
    const int sub2 = e2.pool[num2].args[0];              // x - max
    const int x2 = e2.pool[sub2].args[0];                // x: the logits
    Match m;
    m.y = y;
    m.scores = scores;
    m.logits = x2;
    m.scale = logit_scale(g, e2, x2);
    // The scores contraction's labels in X dims.
    const GraphNode& sn = g.nodes[scores];
    const auto& sa = std::get<ContractAttr>(sn.attr);
    std::vector<int> x_of_label;  // scores label -> X dim
    auto x_dim = [&](int label) {
      const int pos = position(sa.out_axes, label);
      return pos < 0 ? -1 : scores_axes[pos];
    };
    const int s_x = rank - 1;
    int t_x = -1, e_label = -1;
    int q_side = -1;
    for (int side2 = 0; side2 < 2; ++side2) {
      const auto& mine = side2 == 0 ? sa.a_axes : sa.b_axes;
      const auto& theirs = side2 == 0 ? sa.b_axes : sa.a_axes;
      for (int l : mine)
        if (position(theirs, l) < 0 && x_dim(l) >= 0 && x_dim(l) != s_x) {
          if (q_side >= 0) throw NoAttention{"the scores have more than one query axis"};
          q_side = side2;
          t_x = x_dim(l);
        }
    }
    if (q_side < 0 || t_x < 0) throw NoAttention{"the scores have no query axis"};
    const auto& qa = q_side == 0 ? sa.a_axes : sa.b_axes;
    const auto& ka = q_side == 0 ? sa.b_axes : sa.a_axes;
    for (int l : qa)
      if (position(sa.out_axes, l) < 0) {
        if (e_label >= 0 || position(ka, l) < 0)
          throw NoAttention{"the scores sum over more than one axis (or one q alone has)"};
        e_label = l;
      }
    if (e_label < 0) throw NoAttention{"the scores sum over no axis"};
    if (static_cast<int>(qa.size()) != rank || static_cast<int>(ka.size()) != rank)
      throw NoAttention{"q and k do not share the batch axes"};
    // The key axis must be k's alone.
    for (int l : ka)
      if (x_dim(l) == s_x && position(qa, l) >= 0) throw NoAttention{"the key axis is also q's"};
    for (int d = 0; d < rank; ++d)
      if (d != t_x && d != s_x) m.batch_x.push_back(d);
    m.t_x = t_x;
    // Canonical orders: q [batch..., t, e], k [batch..., s, e], v [batch..., s, f].
    auto label_at_x = [&](int d) {
      for (int l : sa.out_axes)
        if (x_dim(l) == d) return l;
      return -1;
    };
    auto order_of = [&](const std::vector<int>& labels, const std::vector<int>& canon) {
      std::vector<int64_t> order;
      for (int l : canon) order.push_back(position(labels, l));
      return order;
    };
    std::vector<int> q_canon, k_canon, v_canon;
    for (int d : m.batch_x) {
      q_canon.push_back(label_at_x(d));
      v_canon.push_back(p_label_of[d]);
    }
    k_canon = q_canon;
    q_canon.push_back(label_at_x(t_x));
    q_canon.push_back(e_label);
    k_canon.push_back(label_at_x(s_x));
    k_canon.push_back(e_label);
    v_canon.push_back(s_label);
    v_canon.push_back(f_label);
    m.q = sn.inputs[q_side];
    m.k = sn.inputs[1 - q_side];
    m.v = yn.inputs[1 - side];
    m.q_order = order_of(qa, q_canon);
    m.k_order = order_of(ka, k_canon);
    m.v_order = order_of(v_labels, v_canon);
    // y's dims from [batch..., t, f].
    std::vector<int> out_canon;
    for (int d : m.batch_x) out_canon.push_back(p_label_of[d]);
    out_canon.push_back(p_label_of[t_x]);
    out_canon.push_back(f_label);
    for (int l : ya.out_axes) m.y_order.push_back(position(out_canon, l));
    if (m.y_order.size() != static_cast<size_t>(rank))
      throw NoAttention{"y keeps other axes than batch, query and value"};
    for (auto order : {&m.q_order, &m.k_order, &m.v_order, &m.y_order})
      if (std::count(order->begin(), order->end(), -1))
        throw NoAttention{"an axis of q, k or v is missing"};
    m.interior = e2.interior;
    m.interior.insert(scores);
    m.interior.insert(po.source);
    m.interior.insert(po.through.begin(), po.through.end());  // layout between p and y
    keep = owned_expander.get();
    owned.push_back(std::move(owned_expander));
    return m;
  }
  throw NoAttention{"neither operand of the contraction is a softmax"};
}

bool identity(const std::vector<int64_t>& order) {
  for (size_t i = 0; i < order.size(); ++i)
    if (order[i] != static_cast<int64_t>(i)) return false;
  return true;
}

/// Emits the bias kernel's DAG for tree `s` with the scores set to 0; leaves become loads.
int emit_bias(const Expander& e, int s, Kernel& k, std::map<std::pair<int, std::vector<int>>, int>& loads,
              std::vector<std::pair<int, std::vector<int>>>& leaves, const std::vector<int>& pos_of_x,
              std::map<int, int>& memo) {
  if (auto it = memo.find(s); it != memo.end()) return it->second;
  const Sym& x = e.pool[s];
  int r;
  if (x.kind == Sym::Kind::leaf) {
    if (x.scores) {
      r = k.constant(0);
    } else {
      auto key = std::make_pair(x.node, x.axes);
      auto it = loads.find(key);
      if (it == loads.end()) {
        it = loads.emplace(key, static_cast<int>(leaves.size())).first;
        leaves.push_back(key);
      }
      r = k.load(it->second);
    }
  } else if (x.kind == Sym::Kind::reduce) {
    throw NoAttention{"internal: a reduction in the bias"};
  } else if (x.op == ScalarOp::constant) {
    r = k.constant(x.value);
  } else if (x.op == ScalarOp::index) {
    r = k.index(pos_of_x[x.dim]);
  } else {
    int a[3] = {-1, -1, -1};
    for (size_t i = 0; i < x.args.size(); ++i)
      a[i] = emit_bias(e, x.args[i], k, loads, leaves, pos_of_x, memo);
    r = k.apply(x.op, a[0], a[1], a[2]);
  }
  memo.emplace(s, r);
  return r;
}

/// The X dims tree `s` varies along (leaves' dims and index leaves).
void dims_of(const Expander& e, int s, std::set<int>& out) {
  const Sym& x = e.pool[s];
  if (x.kind == Sym::Kind::leaf && !x.scores)
    for (int d : x.axes)
      if (d >= 0) out.insert(d);
  if (x.op == ScalarOp::index && x.kind == Sym::Kind::op) out.insert(x.dim);
  for (int a : x.args) dims_of(e, a, out);
}

bool has_leaf(const Expander& e, int s) {
  const Sym& x = e.pool[s];
  if ((x.kind == Sym::Kind::leaf && !x.scores) || (x.kind == Sym::Kind::op && x.op == ScalarOp::index))
    return true;
  for (int a : x.args)
    if (has_leaf(e, a)) return true;
  return false;
}

/// Grouped-query attention's k or v: node `id` (walked back through identity views) a
/// `repeat(x, "... g s e -> ... (g r) s e")` — a reshape merging the group dim with a broadcast
/// one right after it — at batch dim `head` (the last batch dim). Returns x and sets `repeat`
/// to r; -1 when `id` is not such a repeat.
int ungrouped(const Graph& g, int id, int head, int64_t& repeat) {
  const auto identity_view = [&](const GraphNode& n) {
    const auto* v = std::get_if<ViewAttr>(&n.attr);
    if (!v || v->split.size() != v->dims.size()) return false;
    for (size_t d = 0; d < v->dims.size(); ++d)
      if (v->split[d].size() != 1 || v->dims[d] != std::vector<int>{static_cast<int>(d)})
        return false;
    return true;
  };
  int cur = id;
  while (g.nodes[cur].op == GraphOp::view && identity_view(g.nodes[cur])) cur = g.nodes[cur].inputs[0];
  const GraphNode& merged = g.nodes[cur];
  if (merged.op != GraphOp::reshape) return -1;
  const GraphNode& spread = g.nodes[merged.inputs[0]];
  const auto* v = std::get_if<ViewAttr>(&spread.attr);
  if (spread.op != GraphOp::view || !v || spread.shape.size() != merged.shape.size() + 1) return -1;
  // The view: input dims in order, one broadcast dim inserted at head + 1.
  const size_t r = static_cast<size_t>(head) + 1;
  if (v->dims.size() != spread.shape.size() || !v->dims[r].empty()) return -1;
  for (size_t d = 0, in = 0; d < v->dims.size(); ++d) {
    if (d == r) continue;
    if (v->split[in].size() != 1 || v->dims[d] != std::vector<int>{static_cast<int>(in)}) return -1;
    ++in;
  }
  // The reshape merges (g, r) at `head`; every other dim stays.
  for (size_t d = 0; d < merged.shape.size(); ++d) {
    const int64_t want = d < static_cast<size_t>(head) ? spread.shape[d]
                         : d == static_cast<size_t>(head) ? spread.shape[d] * spread.shape[d + 1]
                                                          : spread.shape[d + 1];
    if (merged.shape[d] != want) return -1;
  }
  repeat = spread.shape[r];
  return spread.inputs[0];
}

/// The canonical positions' X dims: the batch dims, the query dim, then the key dim (X's last).
std::vector<int> canonical_x(const Graph& g, const Match& m) {
  std::vector<int> canon_x = m.batch_x;
  canon_x.push_back(m.t_x);
  canon_x.push_back(static_cast<int>(g.nodes[m.q].shape.size()) - 1);
  return canon_x;
}

/// Throws NoAttention when the logits have a bias (a mask) that varies along none of the
/// canonical dims: every row is masked alike, which the kernel's bias does not express.
void check_bias(const Graph& g, const Match& m, const Expander& e) {
  if (!has_leaf(e, m.logits)) return;
  std::set<int> used;
  dims_of(e, m.logits, used);
  for (int x : canonical_x(g, m))
    if (used.count(x)) return;
  throw NoAttention{"the mask does not vary (every row masked alike)"};
}

/// Appends the replacement of match `m` (found on `g`) to `out`: the attention node, its
/// output's slice and the layout around them; returns the node that stands for `m.y`.
int emit(const Graph& g, const Match& m, const Expander& e, const std::vector<int>& id,
         const detail::AddNode& add_from, const Graph& out) {
  const auto add = [&](GraphNode n) { return add_from(std::move(n), m.y); };
  const GraphNode& yn = g.nodes[m.y];
  auto permuted = [&](int x, const std::vector<int64_t>& order) {
    if (identity(order)) return id[x];
    const GraphNode& xn = g.nodes[x];
    GraphNode p;
    p.op = GraphOp::permute;
    p.inputs = {id[x]};
    for (int64_t o : order) p.shape.push_back(xn.shape[o]);
    p.dtype = xn.dtype;
    p.attr = PermuteAttr{order};
    return add(std::move(p));
  };
  const int q = permuted(m.q, m.q_order);
  int k = permuted(m.k, m.k_order), v = permuted(m.v, m.v_order);
  // Grouped-query heads: k and v repeated per group are read from their groups, not copied
  // (the kernel maps each query head to its group; the backward sums dk, dv over it).
  int64_t kv_repeat = 1;
  if (!m.batch_x.empty() && identity(m.k_order) && identity(m.v_order)) {
    const int head = static_cast<int>(m.batch_x.size()) - 1;
    int64_t rk = 0, rv = 0;
    const int gk = ungrouped(g, m.k, head, rk), gv = ungrouped(g, m.v, head, rv);
    if (gk >= 0 && gv >= 0 && rk == rv && rk > 1) {
      k = id[gk];
      v = id[gv];
      kv_repeat = rk;
    }
  }
  const Shape qs = out.nodes[q].shape, ks = out.nodes[k].shape, vs = out.nodes[v].shape;
  const size_t nb = m.batch_x.size();
  // The bias over the X dims it varies along, then broadcast to [batch..., t, s].
  std::vector<int> inputs{q, k, v};
  const int logits = m.logits;
  if (has_leaf(e, logits)) {
    std::set<int> used;
    dims_of(e, logits, used);
    const std::vector<int> canon_x = canonical_x(g, m);  // canonical position -> X dim
    Shape full;
    for (size_t c = 0; c < canon_x.size(); ++c)
      full.push_back(c < nb ? qs[c] : c == nb ? qs[nb] : ks[nb]);
    std::vector<int> pos_of_x(canon_x.size(), -1);
    Shape bias_shape;
    std::vector<int> bias_canon;  // bias dim -> canonical position
    for (size_t c = 0; c < canon_x.size(); ++c)
      if (used.count(canon_x[c])) {
        pos_of_x[canon_x[c]] = static_cast<int>(bias_shape.size());
        bias_shape.push_back(full[c]);
        bias_canon.push_back(static_cast<int>(c));
      }
    if (bias_shape.empty())  // check_bias() turned such a match down
      throw std::logic_error("internal error: an attention bias that varies along no dim");
    auto kernel = std::make_shared<Kernel>();
    kernel->name = "attention_bias";
    kernel->origin = g.origin;
    std::map<std::pair<int, std::vector<int>>, int> loads;
    std::vector<std::pair<int, std::vector<int>>> leaves;
    std::map<int, int> memo;
    kernel->body = kernel->result = emit_bias(e, logits, *kernel, loads, leaves, pos_of_x, memo);
    GraphNode bm;
    bm.op = GraphOp::map;
    bm.shape = bias_shape;
    bm.dtype = DType::f32;
    MapAttr ma;
    ma.body = kernel;
    for (const auto& [node, axes] : leaves) {
      bm.inputs.push_back(id[node]);
      std::vector<int> placed;
      for (int d : axes) placed.push_back(d < 0 ? 0 : pos_of_x[d]);
      ma.axes.push_back(std::move(placed));
    }
    bm.attr = std::move(ma);
    const int bias_map = add(std::move(bm));
    GraphNode view;
    view.op = GraphOp::view;
    view.inputs = {bias_map};
    view.shape = full;
    view.dtype = DType::f32;
    ViewAttr va;
    for (int64_t s : bias_shape) va.split.push_back({s});
    for (size_t c = 0; c < full.size(); ++c) {
      auto it = std::find(bias_canon.begin(), bias_canon.end(), static_cast<int>(c));
      va.dims.push_back(it == bias_canon.end() ? std::vector<int>{}
                                               : std::vector<int>{static_cast<int>(it - bias_canon.begin())});
    }
    view.attr = std::move(va);
    inputs.push_back(add(std::move(view)));
  }
  // The attention node: [batch..., t, f + 1] (o, then lse), f32 unless q is f64.
  const DType dtype = yn.dtype == DType::f64 ? DType::f64 : DType::f32;
  GraphNode a;
  a.op = GraphOp::attention;
  a.inputs = inputs;
  a.shape = Shape(qs.begin(), qs.end() - 1);
  a.shape.push_back(vs.back() + 1);
  a.dtype = dtype;
  a.attr = AttentionAttr{m.scale, inputs.size() == 4, kv_repeat};
  const int att = add(std::move(a));
  GraphNode sl;
  sl.op = GraphOp::slice;
  sl.inputs = {att};
  sl.shape = out.nodes[att].shape;
  sl.shape.back() = vs.back();
  sl.dtype = dtype;
  sl.attr = SliceAttr{static_cast<int64_t>(sl.shape.size()) - 1, 0, vs.back()};
  int o = add(std::move(sl));
  if (dtype != yn.dtype) {
    GraphNode c;
    c.op = GraphOp::cast;
    c.inputs = {o};
    c.shape = out.nodes[o].shape;
    c.dtype = yn.dtype;
    o = add(std::move(c));
  }
  return identity(m.y_order) ? o : [&] {
    GraphNode p;
    p.op = GraphOp::permute;
    p.inputs = {o};
    for (int64_t d : m.y_order) p.shape.push_back(out.nodes[o].shape[d]);
    p.dtype = yn.dtype;
    p.attr = PermuteAttr{m.y_order};
    return add(std::move(p));
  }();
}

}  // namespace

AttentionFusion fuse_attention(const Graph& graph) {
  // Candidates: contractions with an operand that is a map over a reduction (a softmax's
  // division, perhaps): the only ones worth a note when they do not match.
  const auto candidate = [](const Graph& g, int y) {
    if (g.nodes[y].op != GraphOp::contract) return false;
    for (size_t side = 0; side < 2; ++side) {
      const GraphNode& pn = g.nodes[resolve_operand(g, y, side).source];
      if (pn.op != GraphOp::map) continue;
      for (int in : pn.inputs) {
        int at = in;
        while (detail::is_layout(g.nodes[at].op)) at = g.nodes[at].inputs[0];
        if (g.nodes[at].op == GraphOp::reduce) return true;
      }
    }
    return false;
  };
  const auto match = [](const Graph& g, int y, std::string& why) -> std::optional<detail::Site> {
    // The match and the expanders its bias is emitted from, kept until the site is placed.
    struct Found {
      std::vector<std::unique_ptr<Expander>> owned;
      Expander* e = nullptr;
      Match m;
    };
    auto found = std::make_shared<Found>();
    try {
      found->m = match_at(g, y, found->e, found->owned);
      check_bias(g, found->m, *found->e);
    } catch (const NoAttention& f) {
      why = f.why;
      return std::nullopt;
    }
    detail::Site site;
    site.at = y;
    site.interior.assign(found->m.interior.begin(), found->m.interior.end());
    site.emit = [&g, found](const std::vector<int>& id, const detail::AddNode& add,
                            const Graph& out) {
      return emit(g, found->m, *found->e, id, add, out);
    };
    return site;
  };
  detail::Replacements r = detail::replace_all(graph, candidate, match);
  AttentionFusion out{std::move(r.graph), std::move(r.source), r.replaced, {}};
  for (auto& [node, why] : r.misses) out.misses.push_back({node, std::move(why)});
  return out;
}

}  // namespace ein
