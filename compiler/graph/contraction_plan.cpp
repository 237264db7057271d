// Contraction-order planning: three searches (branch-and-bound, subset DP, greedy) that each
// produce a list of pairwise merges, and one simulation that turns merges into a
// ContractionPlan with both FLOP counts. Axis ids are remapped to dense indices and axis sets
// are bitsets, so the inner loops of the searches allocate nothing.
#include "compiler/graph/contraction_plan.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>

namespace ein {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int kMaxOptimalOperands = 64;  // node masks are uint64_t
constexpr int kMaxDpOperands = 20;       // 2^n table entries

/// A set of dense axis indices as a span of `words` 64-bit words.
using Word = uint64_t;

/// The planning problem on dense axes: operand axis sets after lone axes are summed out.
struct Problem {
  int n = 0;                            ///< operands
  int words = 1;                        ///< 64-bit words per axis set
  std::vector<int> axis_id;             ///< dense axis -> caller's axis id
  std::vector<double> size;             ///< dense axis -> size
  std::vector<Word> ops;                ///< n × words: operand i's kept axes
  std::vector<std::vector<int>> order;  ///< operand i's kept axes, first-appearance order
  std::vector<Word> out;                ///< the output's axes
  std::vector<int> out_order;           ///< the output's dense axes, in output order

  const Word* op(int i) const { return ops.data() + static_cast<size_t>(i) * words; }
  bool has(const Word* set, int a) const { return (set[a / 64] >> (a % 64)) & 1; }
  /// prod(sizes) over the set.
  double prod(const Word* set) const {
    double p = 1;
    for (int w = 0; w < words; ++w) {
      for (Word bits = set[w]; bits != 0; bits &= bits - 1)
        p *= size[w * 64 + std::countr_zero(bits)];
    }
    return p;
  }
};

/// opt_einsum's flop_count for a pairwise step; also ein's (2 per multiply-add, else 1).
double pair_cost(const Problem& p, const Word* a, const Word* b, const Word* result) {
  double all = 1;
  bool summed = false;
  for (int w = 0; w < p.words; ++w) {
    const Word u = a[w] | b[w];
    summed = summed || (u & ~result[w]) != 0;
    for (Word bits = u; bits != 0; bits &= bits - 1)
      all *= p.size[w * 64 + std::countr_zero(bits)];
  }
  return summed ? 2 * all : all;
}

/// A merge of two nodes: 0..n-1 are the operands, n+k is the result of merge k.
using Merge = std::pair<int, int>;

// ---------------------------------------------------------------------------------------------
// Greedy (opt_einsum's 'greedy'): 1. among pairs that share an axis, contract the one whose
// result frees the most memory, size(result) − size(a) − size(b), ties to the fewer FLOPs;
// 2. when no pair shares an axis, take outer products of the two smallest operands.

std::vector<Merge> greedy_merges(const Problem& p) {
  const int W = p.words;
  std::vector<std::vector<Word>> sets;  // by node id
  std::vector<double> sizes;
  std::vector<int> live;                     // node ids still in the list
  std::vector<int> count(p.size.size(), 0);  // nodes holding each axis, +1 if in the output
  for (int i = 0; i < p.n; ++i) {
    sets.emplace_back(p.op(i), p.op(i) + W);
    sizes.push_back(p.prod(p.op(i)));
    live.push_back(i);
    for (int a : p.order[i])
      ++count[a];
  }
  for (int a : p.out_order)
    ++count[a];

  std::vector<Word> result(W), best_result(W);
  auto merged = [&](int x, int y, std::vector<Word>& r) {
    for (int w = 0; w < W; ++w) {
      r[w] = 0;
      for (Word bits = sets[x][w] | sets[y][w]; bits != 0; bits &= bits - 1) {
        const int a = w * 64 + std::countr_zero(bits);
        const int held = ((sets[x][w] >> (a % 64)) & 1) + ((sets[y][w] >> (a % 64)) & 1);
        if (count[a] > held) r[w] |= Word{1} << (a % 64);
      }
    }
  };

  std::vector<Merge> merges;
  while (live.size() > 1) {
    int bi = -1, bj = -1;
    double best_removed = kInf, best_flops = kInf;
    for (size_t i = 0; i < live.size(); ++i) {
      for (size_t j = i + 1; j < live.size(); ++j) {
        const int x = live[i], y = live[j];
        bool shares = false;
        for (int w = 0; w < W && !shares; ++w)
          shares = (sets[x][w] & sets[y][w]) != 0;
        if (!shares) continue;
        merged(x, y, result);
        const double removed = p.prod(result.data()) - sizes[x] - sizes[y];
        const double flops = pair_cost(p, sets[x].data(), sets[y].data(), result.data());
        if (removed < best_removed || (removed == best_removed && flops < best_flops)) {
          best_removed = removed, best_flops = flops, bi = static_cast<int>(i),
          bj = static_cast<int>(j);
          best_result = result;
        }
      }
    }
    if (bi < 0) {  // disconnected: outer product of the two smallest
      std::vector<size_t> idx(live.size());
      for (size_t i = 0; i < idx.size(); ++i)
        idx[i] = i;
      std::partial_sort(idx.begin(), idx.begin() + 2, idx.end(),
                        [&](size_t a, size_t b) { return sizes[live[a]] < sizes[live[b]]; });
      bi = static_cast<int>(std::min(idx[0], idx[1]));
      bj = static_cast<int>(std::max(idx[0], idx[1]));
      merged(live[bi], live[bj], best_result);
    }
    const int x = live[bi], y = live[bj];
    for (int w = 0; w < W; ++w) {
      for (Word bits = sets[x][w]; bits != 0; bits &= bits - 1)
        --count[w * 64 + std::countr_zero(bits)];
      for (Word bits = sets[y][w]; bits != 0; bits &= bits - 1)
        --count[w * 64 + std::countr_zero(bits)];
      for (Word bits = best_result[w]; bits != 0; bits &= bits - 1)
        ++count[w * 64 + std::countr_zero(bits)];
    }
    merges.emplace_back(x, y);
    sets.push_back(best_result);
    sizes.push_back(p.prod(best_result.data()));
    live.erase(live.begin() + bj);
    live.erase(live.begin() + bi);
    live.push_back(static_cast<int>(sets.size()) - 1);
  }
  return merges;
}

/// Cost of a merge list, pairwise steps only (the same in both conventions).
double merges_cost(const Problem& p, const std::vector<Merge>& merges);

// ---------------------------------------------------------------------------------------------
// Node masks: a node is the set of operands merged into it, and its axes depend only on that
// set: axes(M) = U(M) ∩ (U(rest) ∪ output), where U is the union of operand axis sets.

/// Axis sets of every subset mask of n ≤ kMaxDpOperands operands, computed incrementally.
std::vector<Word> all_subset_axes(const Problem& p) {
  const int W = p.words;
  const size_t count = size_t{1} << p.n;
  std::vector<Word> unions(count * W, 0);
  for (size_t m = 1; m < count; ++m) {
    const int low = std::countr_zero(m);
    const Word* prev = &unions[(m & (m - 1)) * W];
    for (int w = 0; w < W; ++w)
      unions[m * W + w] = prev[w] | p.op(low)[w];
  }
  std::vector<Word> axes(count * W, 0);
  const size_t full = count - 1;
  for (size_t m = 1; m < count; ++m) {
    for (int w = 0; w < W; ++w) {
      axes[m * W + w] = unions[m * W + w] & (unions[(full ^ m) * W + w] | p.out[w]);
    }
  }
  return axes;
}

/// Axis set of one node mask (for the branch-and-bound search, which has no table).
void mask_axes(const Problem& p, uint64_t mask, Word* result) {
  for (int w = 0; w < p.words; ++w) {
    Word inside = 0, outside = p.out[w];
    for (int i = 0; i < p.n; ++i)
      ((mask >> i) & 1 ? inside : outside) |= p.op(i)[w];
    result[w] = inside & outside;
  }
}

// ---------------------------------------------------------------------------------------------
// Optimal (opt_einsum's 'optimal'): depth-first over every pair at every level, with
//  1. the greedy path's cost as the first bound, pruning any partial path that reaches it;
//  2. a memo from each partition of the operands (the set of node masks) to the cheapest cost
//     it has been reached with, pruning later arrivals that are no cheaper.

class OptimalSearch {
 public:
  explicit OptimalSearch(const Problem& p) : p_(p) {}

  std::vector<Merge> run() {
    best_merges_ = greedy_merges(p_);
    best_cost_ = merges_cost(p_, best_merges_);
    std::vector<uint64_t> nodes;
    for (int i = 0; i < p_.n; ++i)
      nodes.push_back(uint64_t{1} << i);
    search(nodes, 0);
    return found_ ? to_merges(best_path_) : best_merges_;  // else greedy was optimal
  }

 private:
  void search(const std::vector<uint64_t>& nodes, double cost) {
    if (nodes.size() == 1) {
      if (cost < best_cost_) best_cost_ = cost, best_path_ = masks_, found_ = true;
      return;
    }
    std::vector<uint64_t> key = nodes;
    std::sort(key.begin(), key.end());
    auto [it, inserted] = memo_.try_emplace(key, cost);
    if (!inserted) {
      if (it->second <= cost) return;
      it->second = cost;
    }
    const int W = p_.words;
    std::vector<Word> a(W), b(W), r(W);
    for (size_t i = 0; i < nodes.size(); ++i) {
      for (size_t j = i + 1; j < nodes.size(); ++j) {
        const uint64_t x = nodes[i], y = nodes[j];
        mask_axes(p_, x, a.data());
        mask_axes(p_, y, b.data());
        mask_axes(p_, x | y, r.data());
        const double total = cost + pair_cost(p_, a.data(), b.data(), r.data());
        if (total >= best_cost_) continue;
        std::vector<uint64_t> next;
        for (size_t k = 0; k < nodes.size(); ++k) {
          if (k != i && k != j) next.push_back(nodes[k]);
        }
        next.push_back(x | y);
        masks_.emplace_back(x, y);
        search(next, total);
        masks_.pop_back();
      }
    }
  }

  /// Mask pairs -> merges on node ids.
  std::vector<Merge> to_merges(const std::vector<std::pair<uint64_t, uint64_t>>& masks) const {
    std::map<uint64_t, int> id;
    for (int i = 0; i < p_.n; ++i)
      id[uint64_t{1} << i] = i;
    std::vector<Merge> merges;
    for (auto [x, y] : masks) {
      merges.emplace_back(id.at(x), id.at(y));
      id[x | y] = p_.n + static_cast<int>(merges.size()) - 1;
    }
    return merges;
  }

  const Problem& p_;
  double best_cost_ = kInf;
  std::vector<Merge> best_merges_;
  std::vector<std::pair<uint64_t, uint64_t>> masks_, best_path_;
  bool found_ = false;
  std::map<std::vector<uint64_t>, double> memo_;
};

// ---------------------------------------------------------------------------------------------
// Dynamic programming over subsets (Pfeifer, Haegeman, Verstraete, "Faster identification of
// optimal contraction sequences for tensor networks", PRE 90, 2014; opt_einsum's 'dp'):
//  1. best(M) = min over splits M = S ∪ (M∖S) of best(S) + best(M∖S) + cost(S, M∖S), visiting
//     masks in increasing order so both halves are done; the half holding M's lowest operand
//     is S, so each split is seen once;
//  2. a split is skipped when its halves alone already cost at least best(M) (bound);
//  3. up to kDpOuterOperands operands every split is tried, outer products included, which
//     makes the result exactly optimal; beyond, only connected subsets and halves that share
//     an axis (Pfeifer's restriction; opt_einsum's default search_outer=False);
//  4. if the network is disconnected, the components' results are joined last by outer
//     products, the two smallest first.
constexpr int kDpOuterOperands = 8;

std::vector<Merge> dp_merges(const Problem& p) {
  const int W = p.words;
  const size_t count = size_t{1} << p.n;
  const size_t full = count - 1;
  const bool outer = p.n <= kDpOuterOperands;
  const std::vector<Word> axes = all_subset_axes(p);
  auto ax = [&](size_t m) { return axes.data() + m * W; };

  std::vector<uint32_t> adjacency(p.n, 0);  // operands sharing an axis
  for (int i = 0; i < p.n; ++i) {
    for (int j = 0; j < p.n; ++j) {
      for (int w = 0; w < W; ++w) {
        if (i != j && (p.op(i)[w] & p.op(j)[w]) != 0) adjacency[i] |= uint32_t{1} << j;
      }
    }
  }
  auto connected = [&](size_t m) {
    uint32_t seen = static_cast<uint32_t>(m & (~m + 1)), frontier = seen;
    while (frontier != 0) {
      const int i = std::countr_zero(frontier);
      frontier &= frontier - 1;
      const uint32_t fresh = adjacency[i] & static_cast<uint32_t>(m) & ~seen;
      seen |= fresh, frontier |= fresh;
    }
    return seen == m;
  };

  std::vector<double> best(count, kInf);
  std::vector<uint32_t> split(count, 0);
  for (size_t m = 1; m < count; ++m) {
    if ((m & (m - 1)) == 0) {
      best[m] = 0;
      continue;
    }
    if (!outer && !connected(m)) continue;
    const size_t low = m & (~m + 1), rest = m ^ low;
    for (size_t sub = rest;; sub = (sub - 1) & rest) {
      const size_t s1 = sub | low, s2 = m ^ s1;
      if (s2 != 0 && best[s1] + best[s2] < best[m]) {
        bool shares = outer;
        for (int w = 0; w < W && !shares; ++w)
          shares = (ax(s1)[w] & ax(s2)[w]) != 0;
        if (shares) {
          const double c = best[s1] + best[s2] + pair_cost(p, ax(s1), ax(s2), ax(m));
          if (c < best[m]) best[m] = c, split[m] = static_cast<uint32_t>(s1);
        }
      }
      if (sub == 0) break;
    }
  }

  std::vector<Merge> merges;
  auto emit = [&](auto&& self, size_t m) -> int {
    if ((m & (m - 1)) == 0) return std::countr_zero(m);
    const int a = self(self, split[m]);
    const int b = self(self, m ^ split[m]);
    merges.emplace_back(a, b);
    return p.n + static_cast<int>(merges.size()) - 1;
  };
  if (best[full] < kInf) {
    emit(emit, full);
    return merges;
  }
  // Disconnected: emit each component, then join them smallest first.
  std::vector<std::pair<double, int>> parts;  // (result size, node id)
  for (size_t left = full; left != 0;) {
    size_t comp = left & (~left + 1), frontier = comp;
    while (frontier != 0) {
      const int i = std::countr_zero(frontier);
      frontier &= frontier - 1;
      const size_t fresh = adjacency[i] & left & ~comp;
      comp |= fresh, frontier |= fresh;
    }
    left &= ~comp;
    parts.emplace_back(p.prod(ax(comp)), emit(emit, comp));
  }
  while (parts.size() > 1) {
    std::sort(parts.begin(), parts.end(), std::greater<>());
    auto [sa, a] = parts.back();
    parts.pop_back();
    auto [sb, b] = parts.back();
    parts.pop_back();
    merges.emplace_back(a, b);
    parts.emplace_back(sa * sb, p.n + static_cast<int>(merges.size()) - 1);
  }
  return merges;
}

// ---------------------------------------------------------------------------------------------
// Simulation: replays merges in opt_einsum's list convention and fills the plan.

int64_t saturating(double v) {
  return v >= 9.2e18 ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(v);
}

/// Node sets and costs while replaying merges.
struct Replay {
  std::vector<std::vector<Word>> sets;
  std::vector<std::vector<int>> order;
  std::vector<int> count;  // nodes holding each axis, +1 if in the output
};

Replay start_replay(const Problem& p) {
  Replay r;
  r.count.assign(p.size.size(), 0);
  for (int i = 0; i < p.n; ++i) {
    r.sets.emplace_back(p.op(i), p.op(i) + p.words);
    r.order.push_back(p.order[i]);
    for (int a : p.order[i])
      ++r.count[a];
  }
  for (int a : p.out_order)
    ++r.count[a];
  return r;
}

double merges_cost(const Problem& p, const std::vector<Merge>& merges) {
  Replay r = start_replay(p);
  double total = 0;
  std::vector<Word> result(p.words);
  for (auto [x, y] : merges) {
    for (int w = 0; w < p.words; ++w)
      result[w] = 0;
    for (int a : r.order[x])
      --r.count[a];
    for (int a : r.order[y])
      --r.count[a];
    std::vector<int> kept;
    for (const auto* list : {&r.order[x], &r.order[y]}) {
      for (int a : *list) {
        if (r.count[a] > 0 && !p.has(result.data(), a)) {
          result[a / 64] |= Word{1} << (a % 64);
          kept.push_back(a);
        }
      }
    }
    for (int a : kept)
      ++r.count[a];
    total += pair_cost(p, r.sets[x].data(), r.sets[y].data(), result.data());
    r.sets.push_back(result);
    r.order.push_back(kept);
  }
  return total;
}

ContractionPlan replay(const Problem& p, const std::vector<Merge>& merges, ContractionPlan plan) {
  Replay r = start_replay(p);
  std::vector<int> live;
  for (int i = 0; i < p.n; ++i)
    live.push_back(i);
  std::vector<Word> result(p.words);
  double flops = 0;
  for (size_t k = 0; k < merges.size(); ++k) {
    auto [x, y] = merges[k];
    int px = static_cast<int>(std::find(live.begin(), live.end(), x) - live.begin());
    int py = static_cast<int>(std::find(live.begin(), live.end(), y) - live.begin());
    if (px > py) std::swap(px, py), std::swap(x, y);
    for (int a : r.order[x])
      --r.count[a];
    for (int a : r.order[y])
      --r.count[a];
    auto keep = [&](int a) { return r.count[a] > 0; };
    std::vector<int> kept;  // batch (in both), then lhs-only, then rhs-only
    for (int a : r.order[x]) {
      if (keep(a) && p.has(r.sets[y].data(), a)) kept.push_back(a);
    }
    for (int a : r.order[x]) {
      if (keep(a) && !p.has(r.sets[y].data(), a)) kept.push_back(a);
    }
    for (int a : r.order[y]) {
      if (keep(a) && !p.has(r.sets[x].data(), a)) kept.push_back(a);
    }
    if (k + 1 == merges.size()) kept = p.out_order;
    for (int w = 0; w < p.words; ++w)
      result[w] = 0;
    for (int a : kept)
      result[a / 64] |= Word{1} << (a % 64), ++r.count[a];

    ContractionStep step;
    step.lhs = px, step.rhs = py;
    for (int a : kept)
      step.result_axes.push_back(p.axis_id[a]);
    for (const auto* list : {&r.order[x], &r.order[y]}) {
      for (int a : *list) {
        const int id = p.axis_id[a];
        if (!keep(a) && std::find(step.summed_axes.begin(), step.summed_axes.end(), id) ==
                            step.summed_axes.end()) {
          step.summed_axes.push_back(id);
        }
      }
    }
    const double cost = pair_cost(p, r.sets[x].data(), r.sets[y].data(), result.data());
    step.flops = saturating(cost);
    flops += cost;
    plan.opt_einsum_flops += cost;
    plan.largest_intermediate =
        std::max(plan.largest_intermediate, saturating(p.prod(result.data())));
    plan.steps.push_back(std::move(step));

    r.sets.push_back(result);
    r.order.push_back(kept);
    live.erase(live.begin() + py);
    live.erase(live.begin() + px);
    live.push_back(p.n + static_cast<int>(k));
  }
  plan.flops = saturating(static_cast<double>(plan.flops) + flops);
  return plan;
}

[[noreturn]] void invalid(const std::string& message) {
  throw std::invalid_argument("plan_contraction: " + message);
}

}  // namespace

std::vector<std::pair<int, int>> ContractionPlan::path() const {
  std::vector<std::pair<int, int>> out;
  for (const ContractionStep& s : steps)
    out.emplace_back(s.lhs, s.rhs);
  return out;
}

// 1. Validate, remap axis ids to dense indices, build the bitsets.
// 2. Sum lone axes out of each operand (count both conventions) and the naive cost.
// 3. Resolve `automatic`, run the search, replay its merges into the plan.
ContractionPlan plan_contraction(const std::vector<std::vector<int>>& operands,
                                 const std::vector<int>& output,
                                 const std::vector<int64_t>& axis_sizes, PathStrategy strategy) {
  if (operands.empty()) invalid("no operands");
  std::vector<int> dense(axis_sizes.size(), -1);
  Problem p;
  p.n = static_cast<int>(operands.size());
  auto intern = [&](int id) {
    if (id < 0 || static_cast<size_t>(id) >= axis_sizes.size()) {
      invalid("axis id " + std::to_string(id) + " has no size (" +
              std::to_string(axis_sizes.size()) + " sizes given)");
    }
    if (axis_sizes[id] < 0) {
      invalid("axis id " + std::to_string(id) + " has negative size " +
              std::to_string(axis_sizes[id]));
    }
    if (dense[id] < 0) {
      dense[id] = static_cast<int>(p.axis_id.size());
      p.axis_id.push_back(id);
      p.size.push_back(static_cast<double>(axis_sizes[id]));
    }
    return dense[id];
  };
  std::vector<std::vector<int>> distinct(p.n);  // dense, first-appearance order
  for (int i = 0; i < p.n; ++i) {
    for (int id : operands[i]) {
      const int a = intern(id);
      if (std::find(distinct[i].begin(), distinct[i].end(), a) == distinct[i].end()) {
        distinct[i].push_back(a);
      }
    }
  }
  const size_t input_axes = p.axis_id.size();
  std::vector<int> holders(input_axes, 0);  // operands holding each axis, +1 if in the output
  for (const auto& d : distinct) {
    for (int a : d)
      ++holders[a];
  }
  for (int id : output) {
    const int a = intern(id);
    if (static_cast<size_t>(a) >= input_axes)
      invalid("output axis " + std::to_string(id) + " is in no operand");
    if (std::find(p.out_order.begin(), p.out_order.end(), a) != p.out_order.end()) {
      invalid("output axis " + std::to_string(id) + " is repeated");
    }
    p.out_order.push_back(a);
    ++holders[a];
  }
  p.words = std::max<int>(1, static_cast<int>((input_axes + 63) / 64));
  p.ops.assign(static_cast<size_t>(p.n) * p.words, 0);
  p.out.assign(p.words, 0);
  for (int a : p.out_order)
    p.out[a / 64] |= Word{1} << (a % 64);

  ContractionPlan plan;
  double naive_all = 1, naive_set_sizes = 0;
  for (size_t a = 0; a < input_axes; ++a)
    naive_all *= p.size[a];
  double reduce_flops = 0;
  p.order.resize(p.n);
  for (int i = 0; i < p.n; ++i) {
    double all = 1, kept = 1;
    for (int a : distinct[i]) {
      all *= p.size[a];
      naive_set_sizes += 1;
      if (holders[a] > 1 || p.has(p.out.data(), a)) {
        kept *= p.size[a];
        p.order[i].push_back(a);
        p.ops[static_cast<size_t>(i) * p.words + a / 64] |= Word{1} << (a % 64);
      }
    }
    const bool sums = p.order[i].size() < distinct[i].size();
    if (sums) {
      reduce_flops += all;  // one add per element read
      plan.opt_einsum_flops += 2 * all;
    } else if (p.n == 1) {
      plan.opt_einsum_flops += all;  // opt_einsum still counts the (0,) step
    }
    if (sums || p.n == 1) {
      plan.largest_intermediate = std::max(plan.largest_intermediate, saturating(kept));
    }
  }
  // opt_einsum's naive "inner product" flag: some index occurs in more than one operand set.
  const bool naive_inner = naive_set_sizes > static_cast<double>(input_axes);
  plan.naive_opt_einsum_flops = naive_all * (std::max(1, p.n - 1) + (naive_inner ? 1 : 0));
  plan.flops = saturating(reduce_flops);

  if (strategy == PathStrategy::automatic) {
    strategy = p.n <= 4    ? PathStrategy::optimal
               : p.n <= 16 ? PathStrategy::dynamic_programming
                           : PathStrategy::greedy;
  }
  if (strategy == PathStrategy::optimal && p.n > kMaxOptimalOperands) {
    strategy = PathStrategy::greedy;
  }
  if (strategy == PathStrategy::dynamic_programming && p.n > kMaxDpOperands) {
    strategy = PathStrategy::greedy;
  }
  plan.strategy_used = strategy;
  std::vector<Merge> merges;
  if (p.n > 1) {
    switch (strategy) {
      case PathStrategy::optimal:
        merges = OptimalSearch(p).run();
        break;
      case PathStrategy::dynamic_programming:
        merges = dp_merges(p);
        break;
      default:
        merges = greedy_merges(p);
        break;
    }
  }
  return replay(p, merges, std::move(plan));
}

}  // namespace ein
