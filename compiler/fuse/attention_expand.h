// The attention recogniser's view of a graph as scalar algebra (attention.cpp): Expander
// expands the probability operand's value into one tree of scalar nodes (Sym), every map's body
// inlined with its loads replaced by the expansions of what they read, each value placed in the
// frame of the probabilities' dims ("X dims"). Internal to compiler/fuse/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "compiler/fuse/fuse_internal.h"

namespace ein::detail {

constexpr size_t kMaxTree = 4096;  // expansion budget per candidate (scalar nodes)

/// A scalar expression in the frame of p's dims.
struct Sym {
  enum class Kind : uint8_t { leaf, op, reduce } kind = Kind::op;
  ScalarOp op = ScalarOp::constant;
  double value = 0;       ///< constant
  int dim = -1;           ///< index: the X dim
  std::vector<int> args;  ///< op and reduce operands (reduce: its input, over the X frame)
  int node = -1;          ///< leaf: the graph node read
  std::vector<int> axes;  ///< leaf: per node dim, its X dim (-1: a size-1 dim)
  Reduction reduction = Reduction::sum;  ///< reduce: over the last X dim
  bool scores = false;                   ///< leaf: the scores contraction
  bool depends = false;                  ///< reads the scores
};

struct NoAttention {
  std::string why;
};

class Expander {
 public:
  Expander(const Graph& g, int rank) : g_(g), rank_(rank) {}

  std::vector<Sym> pool;
  std::set<int> interior;  ///< map/reduce/layout nodes expanded that read the scores
  int scores_node = -1;
  std::vector<char> reads_scores;  ///< per graph node: it depends on the scores node

  /// Sets the scores node and which nodes read it (directly or not).
  void set_scores(int id) {
    scores_node = id;
    reads_scores.assign(g_.nodes.size(), 0);
    reads_scores[id] = 1;
    for (size_t i = id + 1; i < g_.nodes.size(); ++i)
      for (int in : g_.nodes[i].inputs)
        if (reads_scores[in]) reads_scores[i] = 1;
  }

  /// The expansion of node `id`, whose dim d is X dim rx[d] (-1: size 1).
  int expand(int id, const std::vector<int>& rx) {
    auto key = std::make_pair(id, rx);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    if (pool.size() > kMaxTree) throw NoAttention{"the logits' expression is too large to analyse"};
    const GraphNode& n = g_.nodes[id];
    int result;
    if (const auto* m = std::get_if<MapAttr>(&n.attr); m && m->body) {
      result = expand_map(id, *m->body, rx);
    } else if (n.op == GraphOp::reduce && softmax_reduce(id, rx)) {
      result = expand_reduce(id, rx);
    } else {
      Sym s;
      s.kind = Sym::Kind::leaf;
      s.node = id;
      s.axes = rx;
      s.scores = n.op == GraphOp::contract && id == scores_node;
      s.depends = s.scores || (!reads_scores.empty() && reads_scores[id]);
      result = add(std::move(s));
    }
    memo_.emplace(std::move(key), result);
    return result;
  }

  /// The X dims of operand `op`'s source dims, given the reader's dims in X (rx).
  std::vector<int> place(const Operand& op, const std::vector<int>& rx) const {
    const Shape& shape = g_.nodes[op.source].shape;
    std::vector<int> axes(shape.size(), -1);
    for (size_t t = 0; t < shape.size(); ++t) {
      if (op.access.o[t] != 0) throw NoAttention{"an operand is read at an offset (a slice)"};
      int at = -1;
      for (size_t j = 0; j < op.access.m[t].size(); ++j) {
        const int64_t c = op.access.m[t][j];
        if (c == 0) continue;
        if (c != 1 || at >= 0)
          throw NoAttention{"an operand is read through a diagonal or a merge"};
        at = static_cast<int>(j);
      }
      if (at < 0 || rx[at] < 0) {
        if (shape[t] != 1) throw NoAttention{"an operand's dim maps to no dim of the logits"};
        continue;
      }
      axes[t] = rx[at];
    }
    return axes;
  }

  int add(Sym s) {
    for (int a : s.args)
      s.depends = s.depends || pool[a].depends;
    pool.push_back(std::move(s));
    return static_cast<int>(pool.size()) - 1;
  }

  int constant(double v) {
    Sym s;
    s.op = ScalarOp::constant;
    s.value = v;
    return add(std::move(s));
  }

  /// Whether trees a and b compute the same thing (same structure, same leaves).
  bool same(int a, int b) const {
    if (a == b) return true;
    const Sym &x = pool[a], &y = pool[b];
    if (x.kind != y.kind || x.op != y.op || x.args.size() != y.args.size()) return false;
    if (x.kind == Sym::Kind::leaf) return x.node == y.node && x.axes == y.axes;
    if (x.kind == Sym::Kind::reduce && x.reduction != y.reduction) return false;
    if (x.op == ScalarOp::constant &&
        !(x.value == y.value || (std::isnan(x.value) && std::isnan(y.value))))
      return false;
    if (x.op == ScalarOp::index && x.dim != y.dim) return false;
    for (size_t i = 0; i < x.args.size(); ++i)
      if (!same(x.args[i], y.args[i])) return false;
    return true;
  }

 private:
  int expand_map(int id, const Kernel& body, const std::vector<int>& rx) {
    std::vector<int> at(body.nodes.size(), -1);
    for (size_t i = 0; i < body.nodes.size(); ++i) {
      const ScalarNode& s = body.nodes[i];
      switch (s.op) {
        case ScalarOp::load: {
          const Operand op = resolve_operand(g_, id, static_cast<size_t>(s.buffer));
          at[i] = expand(op.source, place(op, rx));
          if (pool[at[i]].depends) interior.insert(op.through.begin(), op.through.end());
          break;
        }
        case ScalarOp::constant:
          at[i] = constant(s.value);
          break;
        case ScalarOp::index: {
          if (rx[s.dim] < 0) throw NoAttention{"an index leaf along a size-1 dim"};
          Sym x;
          x.op = ScalarOp::index;
          x.dim = rx[s.dim];
          at[i] = add(std::move(x));
          break;
        }
        case ScalarOp::acc:
        case ScalarOp::param:
          throw NoAttention{"a map reads an accumulator or a run-time parameter"};
        default: {
          Sym x;
          x.op = s.op;
          for (int operand : {s.a, s.b, s.c})
            if (operand >= 0) x.args.push_back(at[operand]);
          at[i] = add(std::move(x));
        }
      }
    }
    const int result = at[body.result];
    if (pool[result].depends) interior.insert(id);
    return result;
  }

  /// Whether reduce node `id`, read with its dims at X dims rx, is a softmax's row max or sum:
  /// a max or sum over the key axis (X's last dim) alone, broadcast back along it (a dim of
  /// size 1, a batch of one, may be read at no X dim: a view reads it at stride 0). Other
  /// reductions stay opaque leaves.
  bool softmax_reduce(int id, const std::vector<int>& rx) const {
    const GraphNode& n = g_.nodes[id];
    const auto& a = std::get<ReduceAttr>(n.attr);
    const Shape& in = g_.nodes[n.inputs[0]].shape;
    if (a.reduction != Reduction::max && a.reduction != Reduction::sum) return false;
    if (in.size() != static_cast<size_t>(rank_) || !a.reduced.back() ||
        std::count(a.reduced.begin(), a.reduced.end(), true) != 1)
      return false;
    for (size_t i = 0; i < a.out_order.size(); ++i)
      if (a.out_order[i] != static_cast<int>(i)) return false;
    if (rx.size() != static_cast<size_t>(rank_ - 1)) return false;
    for (int d = 0; d < rank_ - 1; ++d)  // each row dim at its own X dim; size 1: maybe at none
      if (rx[d] != d && !(rx[d] == -1 && in[d] == 1)) return false;
    return true;
  }

  int expand_reduce(int id, const std::vector<int>& rx) {
    const GraphNode& n = g_.nodes[id];
    const auto& a = std::get<ReduceAttr>(n.attr);
    std::vector<int> full = rx;
    full.push_back(rank_ - 1);
    const Operand op = resolve_operand(g_, id, 0);
    Sym s;
    s.kind = Sym::Kind::reduce;
    s.reduction = a.reduction;
    s.args = {expand(op.source, place(op, full))};
    const int r = add(std::move(s));
    if (pool[r].depends) {
      interior.insert(id);
      interior.insert(op.through.begin(), op.through.end());
    }
    return r;
  }

  const Graph& g_;
  int rank_;
  std::map<std::pair<int, std::vector<int>>, int> memo_;
};

}  // namespace ein::detail
