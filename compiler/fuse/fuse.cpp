// The fusion pass (fuse.h). Algorithm:
//   1. Liveness: nodes an output reads, directly or not; the rest are dropped.
//   2. Grouping, one walk in topological order over live map, reduce and widening-cast nodes.
//      A node joins the group of a producer it reads (merging the groups of several producers
//      when their domains agree) when it can be placed in that group's domain: every in-group
//      operand is read at the same domain point (so it inlines as a DAG node), a full value spans
//      the whole domain, a row value its parallel dims, and a reduce reduces exactly the group's
//      row (a pointwise group takes the reduce's dims as its row, moved last). Joins and
//      merges that would make the kernels depend on each other in a cycle are refused.
//      Otherwise the node starts its own group: a map's domain is its shape; a reduce's is its
//      input's dims with the reduced ones moved last. A row kernel takes at most kMaxStages
//      stages.
//   3. Siblings: groups over the same domain that read a common value, or reduce the same
//      row with no other work between them in graph order, merge; a pointwise group over the same
//      points in another dim order is first moved onto the other's domain (matched through
//      the reads of a common value).
//   Steps 4-6 are fuse_emit.cpp's:
//   4. Layout nodes fold into the reads of the kernels reading through them; they are kept as
//      nodes only for unfused readers, outputs, and reshapes that merge dims (not affine).
//   5. A member is stored when an output, an unfused node, a kept layout node or another
//      kernel reads it; each group becomes one kernel (fuse_kernel.cpp).
//   6. The new graph lists the groups and kept nodes in a topological order of the groups.
//   7-8. No copy for a concat of one kernel's outputs (they and the views after the concat fold
//      into its stores: fold_stores.cpp) nor of contractions it alone reads (place_contractions).
#include "compiler/fuse/fuse.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <optional>
#include <unordered_map>

#include <fmt/format.h>

#include "compiler/fuse/fuse_internal.h"

namespace ein {
namespace {

using detail::Group;
using detail::Operand;

// A row kernel evaluates each stage's value over the whole row, recomputing the values it
// reads, so a chain of row functions (norm → softmax → norm …) fused into one kernel costs
// quadratically in its length. Eight stages hold every standard function and its backward
// (LayerNorm's backward row kernel has five).
constexpr int kMaxStages = 8;

/// The stages a reduce node takes in a kernel (fuse_kernel.cpp: logsumexp, var, std take two).
int stages_of(const GraphNode& n) {
  if (n.op != GraphOp::reduce) return 0;
  const Reduction r = std::get<ReduceAttr>(n.attr).reduction;
  return r == Reduction::logsumexp || r == Reduction::var || r == Reduction::std ? 2 : 1;
}

/// Where a candidate node goes in a group's domain.
struct Placement {
  std::vector<int> out, in;  ///< like Group::place / in_place
  std::vector<int> row;      ///< a pointwise group becoming a row group: the new row dims
};

class Pass {
 public:
  explicit Pass(const Graph& g) : g_(g), n_(g.nodes.size()) {}

  Graph run(std::vector<int>* source);

 private:
  // ---- step 1 and operand resolution ----------------------------------------------------
  void find_live() {
    live_.assign(n_, false);
    for (int o : g_.outputs)
      live_[o] = true;
    for (size_t i = n_; i-- > 0;)
      if (live_[i])
        for (int in : g_.nodes[i].inputs)
          live_[in] = true;
  }

  const std::vector<Operand>& operands(int n) {
    if (operands_[n].size() != g_.nodes[n].inputs.size()) {
      operands_[n].clear();
      for (size_t i = 0; i < g_.nodes[n].inputs.size(); ++i)
        operands_[n].push_back(detail::resolve_operand(g_, n, i));
    }
    return operands_[n];
  }

  /// Why node `n` cannot be a kernel member at all; empty when it can.
  std::string unfusable(int n) {
    const GraphNode& node = g_.nodes[n];
    switch (node.op) {
      case GraphOp::contract:
        return "contract: a BLAS call (OpenBLAS GEMM); no fused epilogue, since OpenBLAS offers "
               "only C = alpha*A*B + beta*C";
      case GraphOp::concat:
        return "concat: copies each input into its slot of one buffer";
      case GraphOp::cast: {
        // A widening float cast is exact, so it inlines like a map; a narrowing one rounds,
        // which a kernel does only when it stores (and fp8 goes through the converter).
        const DType from = g_.nodes[node.inputs[0]].dtype, to = node.dtype;
        if (is_float(from) && is_float(to) && element_size(to) >= element_size(from) &&
            !(from == DType::f16 && to == DType::bf16) &&
            !(from == DType::bf16 && to == DType::f16))
          return "";
        return fmt::format(
            "cast {} -> {}: the runtime's converter (round-to-nearest-even; a "
            "kernel rounds only when storing)",
            dtype_name(from), dtype_name(to));
      }
      case GraphOp::fused:
        return "already fused";
      case GraphOp::result:
        return g_.nodes[node.inputs[0]].op == GraphOp::fused
                   ? "already fused"
                   : "another result of a node of its own (a cross-entropy head's gradients)";
      case GraphOp::gather:
        return "gather: rows picked by run-time indices (Kernel IR has no indirect loads)";
      case GraphOp::scatter_add:
        return "scatter_add: rows summed at run-time indices (Kernel IR has no indirect stores)";
      case GraphOp::attention:
      case GraphOp::attention_grad:
        return "attention: one FlashAttention-2 kernel of its own (exec/attention.h)";
      case GraphOp::linear_cross_entropy:
      case GraphOp::linear_cross_entropy_grad:
        return "linear + cross-entropy: one tiled kernel of its own (exec/cross_entropy.h)";
      case GraphOp::quantized_matmul:
        return "a product from quantized codes: a kernel of its own (ein::quantized_matmul)";
      case GraphOp::quantized_gather:
        return "rows of a table read from quantized codes at run-time indices";
      case GraphOp::write_row:
        return "a row written into a cache in place at a run-time index";
      case GraphOp::map:
        if (is_fp8(node.dtype)) return "map to fp8: the runtime's converter writes fp8";
        return "";
      case GraphOp::reduce: {
        const auto& a = std::get<ReduceAttr>(node.attr);
        const DType in = g_.nodes[node.inputs[0]].dtype;
        if (is_fp8(node.dtype)) return "reduce to fp8: the runtime's converter writes fp8";
        if (a.reduction == Reduction::none) return "reduce without a reduction";
        if (is_integer(in) && a.reduction != Reduction::any && a.reduction != Reduction::all)
          return fmt::format("reduce[{}] over {}: kernels reduce float and bool values",
                             reduction_name(a.reduction), dtype_name(in));
        bool any = false;
        const Shape& s = g_.nodes[node.inputs[0]].shape;
        for (size_t d = 0; d < s.size(); ++d)
          any = any || (a.reduced[d] && s[d] != 1);
        if (!any) return "reduces only size-1 dims: a copy";
        return "";
      }
      default:
        return "";
    }
  }

  // ---- step 2: placement -----------------------------------------------------------------
  /// Places compute node `n` in `grp` (whose members' places are final), or says why not.
  std::optional<Placement> place(const Group& grp, int n, std::string& why) {
    const GraphNode& node = g_.nodes[n];
    const bool reduce = node.op == GraphOp::reduce;
    const Shape& space = reduce ? g_.nodes[node.inputs[0]].shape : node.shape;
    std::vector<int> at(space.size(), -1);
    auto fail = [&](std::string text) -> std::optional<Placement> {
      why = std::move(text);
      return std::nullopt;
    };
    if (reduce && stages(grp) + stages_of(node) > kMaxStages)
      return fail(
          fmt::format("the kernel has {} stages already (at most {}: each stage "
                      "recomputes the values it reads over the row)",
                      stages(grp), kMaxStages));
    // 1. In-group operands fix the dims they are read along.
    for (const Operand& op : operands(n)) {
      const int x = op.source;
      const int m = member_index(grp, x);
      if (m < 0) continue;
      const Shape& xs = g_.nodes[x].shape;
      for (size_t t = 0; t < xs.size(); ++t) {
        if (xs[t] == 1) continue;
        int j = -1, nonzero = 0;
        for (size_t c = 0; c < op.access.cols; ++c)
          if (op.access.m[t][c] != 0) {
            ++nonzero;
            j = static_cast<int>(c);
          }
        if (nonzero != 1 || op.access.m[t][j] != 1 || op.access.o[t] != 0)
          return fail(fmt::format("reads %{} through a layout that is not a relabelling", x));
        if (at[j] >= 0 && at[j] != grp.place[m][t])
          return fail(fmt::format("reads %{} at two different points", x));
        at[j] = grp.place[m][t];
      }
    }
    // 2. The remaining dims take the domain dims nothing covers yet, in order.
    std::vector<bool> covered(grp.domain.size(), false);
    for (int d : at)
      if (d >= 0) {
        if (covered[d]) return fail("walks one domain dim twice");
        covered[d] = true;
      }
    std::vector<int> open, rest;
    for (size_t d = 0; d < grp.domain.size(); ++d)
      if (!covered[d] && grp.domain[d] != 1) open.push_back(static_cast<int>(d));
    for (size_t j = 0; j < space.size(); ++j)
      if (at[j] < 0 && space[j] != 1) rest.push_back(static_cast<int>(j));
    if (!rest.empty()) {
      if (rest.size() != open.size())
        return fail(fmt::format("its shape ({}) does not match the kernel's domain ({})",
                                fmt::join(space, ", "), fmt::join(grp.domain, ", ")));
      for (size_t k = 0; k < rest.size(); ++k)
        at[rest[k]] = open[k];
    }
    for (size_t j = 0; j < space.size(); ++j)
      if (at[j] >= 0 && grp.domain[at[j]] != space[j])
        return fail(fmt::format("its dim {} has size {} where the kernel's has {}", j, space[j],
                                grp.domain[at[j]]));
    // 3. Check every in-group read lands on the member's own point.
    if (std::string bad = check_reads(grp, n, at); !bad.empty()) return fail(bad);
    // 4. Classify: a full value covers the domain, a row value exactly its parallel dims.
    const int p = static_cast<int>(grp.domain.size()) - grp.reduced;
    bool covers_p = true, covers_r = true, touches_r = false;
    std::vector<bool> hit(grp.domain.size(), false);
    for (int d : at)
      if (d >= 0) hit[d] = true;
    for (size_t d = 0; d < grp.domain.size(); ++d) {
      if (grp.domain[d] == 1) continue;
      const bool in_row = static_cast<int>(d) >= p;
      if (in_row) {
        covers_r = covers_r && hit[d];
        touches_r = touches_r || hit[d];
      } else {
        covers_p = covers_p && hit[d];
      }
    }
    Placement pl;
    if (!reduce) {
      if (!covers_p || (touches_r && !covers_r))
        return fail("covers only part of the kernel's domain (a broadcast value)");
      // A row value may read only row values: in-group full reads fail step 3 already.
      pl.out = at;
      return pl;
    }
    if (covers_p && !covers_r) {
      // A total: a row value combined over every parallel dim into one value (the mean of
      // per-row losses), stored after the rows; sum, mean, max, min and prod only.
      const auto& a = std::get<ReduceAttr>(node.attr);
      const Reduction r = a.reduction;
      bool whole = grp.reduced > 0 && is_float(node.dtype) &&
                   (r == Reduction::sum || r == Reduction::mean || r == Reduction::max ||
                    r == Reduction::min || r == Reduction::prod);
      for (size_t d = 0; d < space.size(); ++d)
        whole = whole && (a.reduced[d] || space[d] == 1);
      for (int64_t s : grp.domain)
        whole = whole && s > 0;
      if (!whole)
        return fail(
            "reduces a row value over part of the kernel's parallel dims (a row kernel reduces "
            "along its row, or over all its rows at once)");
      for (size_t d = 0; d < space.size(); ++d)
        if (!a.reduced[d]) pl.out.push_back(-1);
      pl.in = at;
      return pl;
    }
    if (!covers_p || !covers_r) return fail("its input covers only part of the kernel's domain");
    const auto& a = std::get<ReduceAttr>(node.attr);
    std::vector<int> row;
    for (size_t d = 0; d < space.size(); ++d) {
      if (a.reduced[d] && at[d] >= 0) row.push_back(at[d]);
      if (!a.reduced[d]) pl.out.push_back(at[d]);
    }
    std::sort(row.begin(), row.end());
    std::vector<int> group_row;
    for (int d = p; d < static_cast<int>(grp.domain.size()); ++d)
      if (grp.domain[d] != 1) group_row.push_back(d);
    if (grp.reduced > 0 && row != group_row)
      return fail(fmt::format("reduces domain dims {{{}}}, the kernel's row is {{{}}}",
                              fmt::join(row, ","), fmt::join(group_row, ",")));
    if (grp.reduced == 0) pl.row = row;
    pl.in = at;
    return pl;
  }

  /// Empty when every operand of `n` (placed at `at`) that `grp` computes is read at the
  /// point the member is computed at (so it inlines); else why not.
  std::string check_reads(const Group& grp, int n, const std::vector<int>& at) {
    for (const Operand& op : operands(n)) {
      const int m = member_index(grp, op.source);
      if (m < 0) continue;
      if (detail::is_total(g_, grp, static_cast<size_t>(m)))
        return fmt::format("reads %{}, a total over the kernel's rows (known only after it)",
                           op.source);
      const Shape& xs = g_.nodes[op.source].shape;
      for (size_t t = 0; t < xs.size(); ++t) {
        if (xs[t] == 1) continue;
        std::vector<int64_t> coef(grp.domain.size(), 0);
        for (size_t j = 0; j < at.size(); ++j)
          if (at[j] >= 0) coef[at[j]] += op.access.m[t][j];
        std::vector<int64_t> want(grp.domain.size(), 0);
        if (grp.place[m][t] >= 0) want[grp.place[m][t]] = 1;
        if (coef != want || op.access.o[t] != 0)
          return fmt::format("reads %{} at another point of the domain", op.source);
      }
    }
    return "";
  }

  /// Whether every member of `grp` reads the others inline (after a merge).
  bool consistent(const Group& grp) {
    for (size_t k = 0; k < grp.members.size(); ++k) {
      const int n = grp.members[k];
      const bool reduce = g_.nodes[n].op == GraphOp::reduce;
      if (!check_reads(grp, n, reduce ? grp.in_place[k] : grp.place[k]).empty()) return false;
    }
    return true;
  }

  int stages(const Group& grp) const {
    int n = 0;
    for (int m : grp.members)
      n += stages_of(g_.nodes[m]);
    return n;
  }

  static int member_index(const Group& grp, int node) {
    auto it = std::find(grp.members.begin(), grp.members.end(), node);
    return it == grp.members.end() ? -1 : static_cast<int>(it - grp.members.begin());
  }

  /// `grp` with `row` (domain dims) moved last and made its row.
  static void make_row(Group& grp, const std::vector<int>& row) {
    std::vector<int> order;
    for (int d = 0; d < static_cast<int>(grp.domain.size()); ++d)
      if (std::find(row.begin(), row.end(), d) == row.end()) order.push_back(d);
    order.insert(order.end(), row.begin(), row.end());
    std::vector<int> where(order.size());
    Shape domain;
    for (size_t k = 0; k < order.size(); ++k) {
      where[order[k]] = static_cast<int>(k);
      domain.push_back(grp.domain[order[k]]);
    }
    auto remap = [&](std::vector<int>& dims) {
      for (int& d : dims)
        if (d >= 0) d = where[d];
    };
    for (auto& pl : grp.place)
      remap(pl);
    for (auto& pl : grp.in_place)
      remap(pl);
    grp.domain = std::move(domain);
    grp.reduced = static_cast<int>(row.size());
  }

  void add_member(Group& grp, int n, const Placement& pl) {
    if (!pl.row.empty()) {
      make_row(grp, pl.row);
      // Re-place with the new order: the reduce's own dims move like the rest.
      std::string why;
      auto again = place(grp, n, why);
      if (!again) throw std::logic_error("internal error: a reduce no longer fits its row: " + why);
      grp.members.push_back(n);
      grp.place.push_back(again->out);
      grp.in_place.push_back(again->in);
    } else {
      grp.members.push_back(n);
      grp.place.push_back(pl.out);
      grp.in_place.push_back(pl.in);
    }
    for (const Operand& op : operands(n))
      for (int l : op.through)
        grp.folded.push_back(l);
  }

  Group seed(int n) {
    const GraphNode& node = g_.nodes[n];
    Group grp;
    if (node.op != GraphOp::reduce) {  // a map or a cast: its shape
      grp.domain = node.shape;
      std::vector<int> at;
      for (size_t d = 0; d < node.shape.size(); ++d)
        at.push_back(node.shape[d] == 1 ? -1 : static_cast<int>(d));
      grp.members = {n};
      grp.place = {at};
      grp.in_place = {{}};
    } else {
      const auto& a = std::get<ReduceAttr>(node.attr);
      const Shape& in = g_.nodes[node.inputs[0]].shape;
      std::vector<int> order;
      for (int pass = 0; pass < 2; ++pass)
        for (size_t d = 0; d < in.size(); ++d)
          if (a.reduced[d] == (pass == 1)) order.push_back(static_cast<int>(d));
      std::vector<int> in_at(in.size(), -1), out_at;
      for (size_t k = 0; k < order.size(); ++k) {
        grp.domain.push_back(in[order[k]]);
        if (in[order[k]] != 1) in_at[order[k]] = static_cast<int>(k);
        if (a.reduced[order[k]]) ++grp.reduced;
      }
      for (size_t d = 0; d < in.size(); ++d)
        if (!a.reduced[d]) out_at.push_back(in_at[d]);
      grp.members = {n};
      grp.place = {out_at};
      grp.in_place = {in_at};
    }
    for (const Operand& op : operands(n))
      for (int l : op.through)
        grp.folded.push_back(l);
    return grp;
  }

  /// Merges group `from` into `into` when their domains are the same dims (identity map).
  bool merge_compatible(const Group& into, const Group& from) const {
    if (into.domain != from.domain || stages(into) + stages(from) > kMaxStages) return false;
    return into.reduced == from.reduced || from.reduced == 0 || into.reduced == 0;
  }
  static void merge(Group& into, Group& from) {
    if (into.reduced == 0 && from.reduced > 0) into.reduced = from.reduced;
    for (size_t k = 0; k < from.members.size(); ++k) {
      into.members.push_back(from.members[k]);
      into.place.push_back(from.place[k]);
      into.in_place.push_back(from.in_place[k]);
    }
    into.folded.insert(into.folded.end(), from.folded.begin(), from.folded.end());
    // Keep members in topological (id) order so stages come in dependency order.
    std::vector<size_t> idx(into.members.size());
    for (size_t k = 0; k < idx.size(); ++k)
      idx[k] = k;
    std::sort(idx.begin(), idx.end(),
              [&](size_t a, size_t b) { return into.members[a] < into.members[b]; });
    Group sorted = into;
    for (size_t k = 0; k < idx.size(); ++k) {
      sorted.members[k] = into.members[idx[k]];
      sorted.place[k] = into.place[idx[k]];
      sorted.in_place[k] = into.in_place[idx[k]];
    }
    into = std::move(sorted);
    from = Group{};
    from.dead = true;
  }

  /// Whether the kernels and the nodes left as is still depend on each other acyclically after
  /// group `gid` changed. The graph was acyclic before, so a new cycle passes through the
  /// group: a search along readers from its members (entering a kernel at one member, leaving
  /// it from any) must not come back to it. (A search over the group's own id span misses a
  /// cycle through a second kernel whose members lie on both sides of that span.)
  bool acyclic(int gid) {
    // The edges emit_fused() orders by: a kernel member reads its operands' sources (through
    // folded layout nodes), a node left as is reads its inputs.
    if (raw_readers_.empty()) {
      raw_readers_.resize(n_);
      operand_readers_.resize(n_);
      for (size_t i = 0; i < n_; ++i) {
        if (!live_[i]) continue;
        for (int in : g_.nodes[i].inputs)
          raw_readers_[in].push_back(static_cast<int>(i));
        if (g_.nodes[i].op != GraphOp::input && !detail::is_layout(g_.nodes[i].op))
          for (const Operand& op : operands(static_cast<int>(i)))
            operand_readers_[op.source].push_back(static_cast<int>(i));
      }
    }
    const size_t supers = n_ + groups_.size();
    if (visited_.size() < supers) visited_.resize(supers, 0);
    ++stamp_;
    std::vector<int> stack(groups_[gid].members.begin(), groups_[gid].members.end());
    visited_[n_ + gid] = stamp_;
    const int h = horizon(gid);
    const auto visit = [&](int x, int r) {
      if (group_of_[r] == gid) return group_of_[x] == gid;  // else: left the kernel, came back
      if ((group_of_[r] >= 0 ? groups_[group_of_[r]].members.front() : r) > h) return true;
      const size_t v = group_of_[r] >= 0 ? n_ + group_of_[r] : static_cast<size_t>(r);
      if (visited_[v] == stamp_) return true;
      visited_[v] = stamp_;
      if (group_of_[r] >= 0)
        stack.insert(stack.end(), groups_[group_of_[r]].members.begin(),
                     groups_[group_of_[r]].members.end());
      else
        stack.push_back(r);
      return true;
    };
    while (!stack.empty()) {
      const int x = stack.back();
      stack.pop_back();
      for (const int r : raw_readers_[x])
        if (group_of_[r] < 0 && !visit(x, r)) return false;
      for (const int r : operand_readers_[x])
        if (group_of_[r] >= 0 && !visit(x, r)) return false;
    }
    return true;
  }

  /// The last node from which a path can still lead back into group `gid`: a node leads only
  /// to later nodes, except through a kernel, which a path enters at one member and leaves
  /// from any. So from the group's last member, the horizon moves to the last member of every
  /// kernel that starts at or before it and ends after it. acyclic() searches no further: a
  /// deep model's graph is searched a layer or so, not to its end, at each join (the search
  /// of the whole remainder made fusing a training step quadratic in depth). Finding the
  /// horizon is one pass or two over the groups' first and last members, which is cheap but
  /// still grows with the graph. Members are in node order.
  int horizon(int gid) const {
    int h = groups_[gid].members.back();
    for (bool moved = true; moved;) {
      moved = false;
      for (const Group& k : groups_)
        if (!k.dead && !k.members.empty() && k.members.front() <= h && k.members.back() > h) {
          h = k.members.back();
          moved = true;
        }
    }
    return h;
  }

  /// Copies of some groups, to undo a tentative merge or join.
  using Snapshot = std::vector<std::pair<int, Group>>;
  Snapshot save(const std::vector<int>& ids) const {
    Snapshot out;
    for (int id : ids)
      out.push_back({id, groups_[id]});
    return out;
  }
  void restore(const Snapshot& saved) {
    for (const auto& [id, grp] : saved) {
      groups_[id] = grp;
      for (int m : grp.members)
        group_of_[m] = id;
    }
  }

  void group_node(int n);
  void merge_siblings();
  /// How `moved` (pointwise) maps onto `onto`'s domain dims, from their reads of `common`.
  std::optional<std::vector<int>> align(const Group& moved, const Group& onto,
                                        const std::vector<int>& common);

  const Graph& g_;
  size_t n_;
  detail::Grouping s_;  // what emit_fused() reads; the names below are its parts
  std::vector<bool>& live_ = s_.live;
  std::vector<std::vector<Operand>>& operands_ = s_.operands;
  std::vector<int>& group_of_ = s_.group_of;
  std::vector<Group>& groups_ = s_.groups;
  std::vector<std::string>& unfused_ = s_.unfused;
  std::vector<std::string>& split_ = s_.split;
  /// Per node, its live readers by input and the kernel-member candidates that read it as an
  /// operand's source (built on first use, for acyclic()).
  std::vector<std::vector<int>> raw_readers_, operand_readers_;
  std::vector<uint32_t> visited_;          ///< per super node, the search that last saw it
  uint32_t stamp_ = 0;
};

void Pass::group_node(int n) {
  // Candidate groups: those of the producers it reads, in operand order.
  std::vector<int> candidates;
  for (const Operand& op : operands(n)) {
    const int gid = group_of_[op.source];
    if (gid >= 0 && std::find(candidates.begin(), candidates.end(), gid) == candidates.end())
      candidates.push_back(gid);
  }
  std::vector<std::string> why;
  for (const int gid : candidates) {
    const Snapshot saved = save(candidates);
    // Merge the other candidates' groups in when their domains agree, so that a node reading
    // two kernels' values (AdamW's param update, cross-entropy's loss) makes them one.
    for (const int other : candidates) {
      if (other == gid || groups_[other].dead || !merge_compatible(groups_[gid], groups_[other]))
        continue;
      const Snapshot before = save({gid, other});
      for (int m : groups_[other].members)
        group_of_[m] = gid;
      merge(groups_[gid], groups_[other]);
      if (!consistent(groups_[gid]) || !acyclic(gid)) restore(before);
    }
    std::string reason;
    if (auto pl = place(groups_[gid], n, reason)) {
      add_member(groups_[gid], n, *pl);
      group_of_[n] = gid;
      if (acyclic(gid)) return;
      reason = "joining would make kernels depend on each other in a cycle";
    }
    restore(saved);
    group_of_[n] = -1;
    const int first = groups_[gid].members.front();
    why.push_back(fmt::format("not in %{}'s kernel: {}", first, reason));
  }
  group_of_[n] = static_cast<int>(groups_.size());
  groups_.push_back(seed(n));
  split_[n] = fmt::format("{}", fmt::join(why, "; "));
}

Graph Pass::run(std::vector<int>* source) {
  find_live();
  operands_.assign(n_, {});
  group_of_.assign(n_, -1);
  unfused_.assign(n_, "");
  split_.assign(n_, "");
  for (size_t i = 0; i < n_; ++i) {
    const GraphNode& node = g_.nodes[i];
    if (!live_[i] || node.op == GraphOp::input || detail::is_layout(node.op)) continue;
    if (std::string why = unfusable(static_cast<int>(i)); !why.empty()) {
      unfused_[i] = std::move(why);
      continue;
    }
    group_node(static_cast<int>(i));
  }
  merge_siblings();
  return detail::emit_fused(g_, s_, source);
}

void Pass::merge_siblings() {
  // Kernels over the same domain that read a common value, or that both reduce the same row
  // and are neighbours in graph order, run as one when neither needs the other's results
  // (LayerNorm's backward: the weight and bias gradients are two column sums over the same
  // rows). Row kernels that share no value and have other work between them stay apart:
  // merged, the later one's work would run when the earlier one's does (a checkpointed
  // block's recomputation hoisted to the start of the backward, every block's activations
  // alive at once).
  auto sources = [&](const Group& grp) {
    std::vector<int> out;
    for (int m : grp.members)
      for (const Operand& op : operands(m))
        if (group_of_[op.source] < 0 || &groups_[group_of_[op.source]] != &grp)
          out.push_back(op.source);
    std::sort(out.begin(), out.end());
    return out;
  };
  // Only groups whose domains are the same sizes in some order can merge (and a merge keeps
  // them): each group is paired, in order, with the later ones of its bucket, and a pair that
  // changes nothing (no common value; not neighbouring row kernels) costs O(1), for a deep
  // model's thousands of groups a bucket. A merge moves the later group into the earlier, so
  // the later ones are as at the start: one index of readers and one range serve them.
  std::vector<std::vector<int>> src(groups_.size());
  std::vector<int> bucket_of(groups_.size());
  std::vector<std::vector<size_t>> buckets;              // group ids, ascending
  std::unordered_map<int, std::vector<size_t>> readers;  // per value, its reading groups
  std::vector<std::pair<int, int>> range(groups_.size());  // first and last member
  {
    std::map<Shape, int> bucket_ids;
    for (size_t k = 0; k < groups_.size(); ++k) {
      Shape sizes = groups_[k].domain;
      std::sort(sizes.begin(), sizes.end());
      const auto [at, fresh] = bucket_ids.try_emplace(std::move(sizes), buckets.size());
      if (fresh) buckets.emplace_back();
      bucket_of[k] = at->second;
      buckets[at->second].push_back(k);
      src[k] = sources(groups_[k]);
      for (int v : src[k])
        if (auto& r = readers[v]; r.empty() || r.back() != k) r.push_back(k);
      if (!groups_[k].members.empty()) {
        const auto [lo, hi] =
            std::minmax_element(groups_[k].members.begin(), groups_[k].members.end());
        range[k] = {*lo, *hi};
      }
    }
  }
  // Work of the graph outside kernel `a`: a node that would run between two kernels.
  const auto other_work = [&](int i, size_t a) {
    const GraphNode& n = g_.nodes[i];
    return live_[i] && n.op != GraphOp::input && !detail::is_layout(n.op) &&
           group_of_[i] != static_cast<int>(a);
  };
  // shares[b] == a: group b may read one of a's values (a superset of those that do).
  std::vector<size_t> shares(groups_.size(), groups_.size());
  for (size_t a = 0; a < groups_.size(); ++a) {
    if (groups_[a].dead) continue;
    int before_a = -1, after_a = static_cast<int>(n_);  // other work around a's members
    const auto update = [&] {  // after a merge into a
      if (groups_[a].members.empty()) return;
      for (int v : src[a]) {
        const std::vector<size_t>& r = readers[v];
        for (auto it = std::upper_bound(r.begin(), r.end(), a); it != r.end(); ++it)
          shares[*it] = a;
      }
      const auto [lo, hi] =
          std::minmax_element(groups_[a].members.begin(), groups_[a].members.end());
      range[a] = {*lo, *hi};
      for (before_a = *lo - 1; before_a >= 0 && !other_work(before_a, a); --before_a) {}
      for (after_a = *hi + 1; after_a < static_cast<int>(n_) && !other_work(after_a, a);
           ++after_a) {}
    };
    update();
    // No other work between a's members and b's (b's come before the first other work after
    // a's last, or after the last before a's first; overlapping ranges have nothing between).
    const auto neighbours = [&](size_t b) {
      const auto [alo, ahi] = range[a];
      const auto [blo, bhi] = range[b];
      if (blo > ahi) return after_a >= blo;
      if (bhi < alo) return before_a <= bhi;
      return true;
    };
    const std::vector<size_t>& bucket = buckets[bucket_of[a]];
    for (auto next = std::upper_bound(bucket.begin(), bucket.end(), a); next != bucket.end();
         ++next) {
      const size_t b = *next;
      Group &ga = groups_[a], &gb = groups_[b];
      const bool row_neighbours = ga.reduced > 0 && ga.domain == gb.domain &&
                                  ga.reduced == gb.reduced && neighbours(b);
      if (gb.dead || (shares[b] != a && !row_neighbours) ||
          stages(ga) + stages(gb) > kMaxStages)
        continue;
      const std::vector<int>&sa = src[a], &sb = src[b];
      std::vector<int> common;
      std::set_intersection(sa.begin(), sa.end(), sb.begin(), sb.end(), std::back_inserter(common));
      std::optional<Snapshot> before;  // taken just before the first change
      if (ga.domain != gb.domain || ga.reduced != gb.reduced) {
        // A pointwise kernel over the same points in another dim order (a gradient map beside
        // the column sum of its sibling) is moved onto the other's domain, matched through
        // the reads of a common value.
        if (common.empty() || (ga.reduced > 0 && gb.reduced > 0)) continue;
        Group& moved = gb.reduced == 0 ? gb : ga;
        const Group& onto = gb.reduced == 0 ? ga : gb;
        const std::optional<std::vector<int>> to = align(moved, onto, common);
        if (!to) continue;
        before = save({static_cast<int>(a), static_cast<int>(b)});
        for (auto* places : {&moved.place, &moved.in_place})
          for (auto& pl : *places)
            for (int& d : pl)
              if (d >= 0) d = (*to)[d];
        moved.domain = onto.domain;
        moved.reduced = onto.reduced;
      } else if (common.empty() && !row_neighbours) {
        continue;
      }
      if (!before) before = save({static_cast<int>(a), static_cast<int>(b)});
      for (int m : gb.members)
        group_of_[m] = static_cast<int>(a);
      merge(ga, gb);
      if (!consistent(groups_[a]) || !acyclic(static_cast<int>(a))) {
        restore(*before);
      } else {
        src[a] = sources(groups_[a]);
        update();
      }
    }
  }
}

std::optional<std::vector<int>> Pass::align(const Group& moved, const Group& onto,
                                            const std::vector<int>& common) {
  // Columns of the reads of the common values, stacked: domain dim j of `moved` is the dim of
  // `onto` with the same column (and size), when exactly one has it.
  auto columns = [&](const Group& grp) {
    std::vector<std::vector<int64_t>> cols(grp.domain.size());
    for (int s : common) {
      bool found = false;
      for (size_t k = 0; k < grp.members.size() && !found; ++k) {
        const int m = grp.members[k];
        const bool reduce = g_.nodes[m].op == GraphOp::reduce;
        const std::vector<int>& at = reduce ? grp.in_place[k] : grp.place[k];
        for (const Operand& op : operands(m)) {
          if (op.source != s || found) continue;
          found = true;
          for (size_t t = 0; t < op.access.m.size(); ++t) {
            for (size_t d = 0; d < cols.size(); ++d)
              cols[d].push_back(0);
            for (size_t j = 0; j < at.size(); ++j)
              if (at[j] >= 0) cols[at[j]].back() += op.access.m[t][j];
            for (size_t d = 0; d < cols.size(); ++d)
              cols[d].push_back(op.access.o[t]);
          }
        }
      }
    }
    return cols;
  };
  const auto from = columns(moved), to = columns(onto);
  std::vector<int> map(moved.domain.size(), -1);
  std::vector<bool> used(onto.domain.size(), false);
  int moved_dims = 0, onto_dims = 0;
  for (int64_t n : onto.domain)
    onto_dims += n != 1 ? 1 : 0;
  for (size_t j = 0; j < moved.domain.size(); ++j) {
    if (moved.domain[j] == 1) continue;
    ++moved_dims;
    int match = -1, matches = 0;
    for (size_t i = 0; i < onto.domain.size(); ++i)
      if (!used[i] && onto.domain[i] == moved.domain[j] && to[i] == from[j]) {
        match = static_cast<int>(i);
        ++matches;
      }
    if (matches != 1) return std::nullopt;
    map[j] = match;
    used[match] = true;
  }
  if (moved_dims != onto_dims) return std::nullopt;
  return map;
}

}  // namespace

Graph fuse(const Graph& graph, std::vector<int>* source) {
  const Graph widened = detail::widen_contractions(graph);
  Pass pass(widened);
  std::vector<int> copied;
  Graph fused = pass.run(&copied);
  fused = detail::fold_concats_into_stores(std::move(fused), &copied);
  detail::place_contractions(fused);
  if (source) *source = std::move(copied);
  return fused;
}

}  // namespace ein
