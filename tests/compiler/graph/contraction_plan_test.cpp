// Tests of the contraction planner: every row of opt_einsum_cases.tsv (our path must cost no
// more than opt_einsum's, counted opt_einsum's way, and our naive count must equal theirs),
// the searches against brute force and each other on random networks, and planning speed.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <stdexcept>
#include <string>

#include "compiler/graph/contraction_plan.h"
#include "conformance/tsv.h"

namespace ein {
namespace {

using testing::read_tsv;

/// An einsum problem on axis ids.
struct Network {
  std::vector<std::vector<int>> operands;
  std::vector<int> output;
  std::vector<int64_t> sizes;
};

const char* strategy_name(PathStrategy s) {
  switch (s) {
    case PathStrategy::automatic:
      return "automatic";
    case PathStrategy::optimal:
      return "optimal";
    case PathStrategy::dynamic_programming:
      return "dp";
    case PathStrategy::greedy:
      return "greedy";
  }
  return "?";
}

std::vector<std::vector<int64_t>> parse_shapes(const std::string& text) {
  std::vector<std::vector<int64_t>> out;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = text.find(')', pos);
    std::vector<int64_t> shape;
    const std::string inner = text.substr(pos + 1, end - pos - 1);
    for (size_t p = 0; p < inner.size();) {
      size_t q = inner.find(',', p);
      if (q == std::string::npos) q = inner.size();
      if (inner.find_first_not_of(' ', p) < q) shape.push_back(std::stoll(inner.substr(p, q - p)));
      p = q + 1;
    }
    out.push_back(shape);
    pos = end + 2;  // skip ");"
  }
  return out;
}

/// "ab,bc->ac" with shapes → axis ids 'a'=0...; throws std::invalid_argument on a size mismatch
/// (sema's job in ein; the planner sees sizes per axis only).
Network parse_equation(const std::string& equation, const std::string& shapes) {
  Network net;
  net.sizes.assign(26, 0);
  std::vector<bool> bound(26, false);
  const size_t arrow = equation.find("->");
  const std::string inputs = equation.substr(0, arrow);
  const auto dims = parse_shapes(shapes);
  net.operands.emplace_back();
  for (char c : inputs) {
    if (c == ',') {
      net.operands.emplace_back();
      continue;
    }
    const int id = c - 'a';
    const size_t dim = net.operands.back().size();
    const int64_t size = dims.at(net.operands.size() - 1).at(dim);
    if (bound[id] && net.sizes[id] != size) throw std::invalid_argument("size mismatch");
    bound[id] = true, net.sizes[id] = size;
    net.operands.back().push_back(id);
  }
  for (char c : equation.substr(arrow + 2))
    net.output.push_back(c - 'a');
  return net;
}

// An independent model of opt_einsum's contract_path on std::set, for checking plans.
using AxisSet = std::set<int>;

double prod(const AxisSet& s, const std::vector<int64_t>& sizes) {
  double p = 1;
  for (int a : s)
    p *= static_cast<double>(sizes[a]);
  return p;
}

/// Lone axes summed out first: returns the opt_einsum-convention cost, updates `sets`.
double reduce_lone_axes(std::vector<AxisSet>& sets, const AxisSet& out,
                        const std::vector<int64_t>& sizes) {
  double cost = 0;
  std::vector<AxisSet> reduced;
  for (size_t i = 0; i < sets.size(); ++i) {
    AxisSet keep;
    for (int a : sets[i]) {
      bool elsewhere = out.count(a) > 0;
      for (size_t j = 0; j < sets.size(); ++j)
        elsewhere = elsewhere || (j != i && sets[j].count(a));
      if (elsewhere) keep.insert(a);
    }
    if (keep != sets[i])
      cost += 2 * prod(sets[i], sizes);
    else if (sets.size() == 1)
      cost += prod(sets[i], sizes);
    reduced.push_back(keep);
  }
  sets = reduced;
  return cost;
}

/// Contracts sets[i], sets[j] opt_einsum's way; returns the step's cost.
double contract(std::vector<AxisSet>& sets, size_t i, size_t j, const AxisSet& out,
                const std::vector<int64_t>& sizes, AxisSet* result_out = nullptr,
                AxisSet* removed_out = nullptr) {
  AxisSet all = sets[i], rest = out;
  all.insert(sets[j].begin(), sets[j].end());
  for (size_t k = 0; k < sets.size(); ++k) {
    if (k != i && k != j) rest.insert(sets[k].begin(), sets[k].end());
  }
  AxisSet result, removed;
  for (int a : all)
    (rest.count(a) ? result : removed).insert(a);
  const double cost = prod(all, sizes) * (removed.empty() ? 1 : 2);
  sets.erase(sets.begin() + static_cast<long>(std::max(i, j)));
  sets.erase(sets.begin() + static_cast<long>(std::min(i, j)));
  sets.push_back(result);
  if (result_out) *result_out = result;
  if (removed_out) *removed_out = removed;
  return cost;
}

double brute_force(const std::vector<AxisSet>& sets, const AxisSet& out,
                   const std::vector<int64_t>& sizes) {
  if (sets.size() <= 1) return 0;
  double best = 1e300;
  for (size_t i = 0; i < sets.size(); ++i) {
    for (size_t j = i + 1; j < sets.size(); ++j) {
      std::vector<AxisSet> next = sets;
      const double step = contract(next, i, j, out, sizes);
      best = std::min(best, step + brute_force(next, out, sizes));
    }
  }
  return best;
}

std::vector<AxisSet> to_sets(const Network& net) {
  std::vector<AxisSet> sets;
  for (const auto& op : net.operands)
    sets.emplace_back(op.begin(), op.end());
  return sets;
}

/// Replays `plan` independently: positions in range, axes and costs as the model says.
void expect_valid(const ContractionPlan& plan, const Network& net) {
  std::vector<AxisSet> sets = to_sets(net);
  const AxisSet out(net.output.begin(), net.output.end());
  double cost = reduce_lone_axes(sets, out, net.sizes);
  ASSERT_EQ(plan.steps.size(), net.operands.size() - 1);
  for (size_t k = 0; k < plan.steps.size(); ++k) {
    const ContractionStep& s = plan.steps[k];
    ASSERT_GE(s.lhs, 0);
    ASSERT_LT(s.lhs, s.rhs);
    ASSERT_LT(s.rhs, static_cast<int>(sets.size()));
    AxisSet result, removed;
    const double step = contract(sets, static_cast<size_t>(s.lhs), static_cast<size_t>(s.rhs), out,
                                 net.sizes, &result, &removed);
    EXPECT_EQ(AxisSet(s.result_axes.begin(), s.result_axes.end()), result) << "step " << k;
    EXPECT_EQ(AxisSet(s.summed_axes.begin(), s.summed_axes.end()), removed) << "step " << k;
    EXPECT_EQ(static_cast<double>(s.flops), step) << "step " << k;
    cost += step;
  }
  if (!plan.steps.empty()) {
    EXPECT_EQ(plan.steps.back().result_axes, net.output);
  }
  EXPECT_EQ(plan.opt_einsum_flops, cost);
}

Network random_network(std::mt19937& rng, int n, int axes, int max_size) {
  Network net;
  std::uniform_int_distribution<int> size(1, max_size), axis(0, axes - 1), coin(0, 2);
  for (int a = 0; a < axes; ++a)
    net.sizes.push_back(size(rng));
  std::set<int> used;
  for (int i = 0; i < n; ++i) {
    std::vector<int> op;
    const int rank = 1 + static_cast<int>(rng() % 4);
    for (int r = 0; r < rank; ++r)
      op.push_back(axis(rng));
    used.insert(op.begin(), op.end());
    net.operands.push_back(op);
  }
  for (int a : used) {
    if (coin(rng) == 0) net.output.push_back(a);
  }
  std::shuffle(net.output.begin(), net.output.end(), rng);
  return net;
}

ContractionPlan plan(const Network& net, PathStrategy s) {
  return plan_contraction(net.operands, net.output, net.sizes, s);
}

TEST(ContractionPlan, OptEinsumTable) {
  const auto rows = read_tsv(std::string(EIN_CONFORMANCE_DIR) + "/opt_einsum_cases.tsv");
  int planned = 0, errors = 0;
  for (const auto& row : rows) {
    SCOPED_TRACE("line " + std::to_string(row.line) + ": " + row["equation"]);
    if (row["path"] == "ERROR") {
      // Size mismatches are sema's to find; unknown and repeated output axes are ours.
      EXPECT_THROW(
          {
            const Network net = parse_equation(row["equation"], row["shapes"]);
            plan(net, PathStrategy::automatic);
          },
          std::invalid_argument);
      std::printf("line %2d %-28s ERROR as opt_einsum: %s\n", row.line, row["equation"].c_str(),
                  row["steps"].c_str());
      ++errors;
      continue;
    }
    const Network net = parse_equation(row["equation"], row["shapes"]);
    const ContractionPlan p = plan(net, PathStrategy::automatic);
    expect_valid(p, net);
    const double theirs = std::stod(row["opt_flops"]);
    EXPECT_LE(p.opt_einsum_flops, theirs);
    EXPECT_EQ(p.naive_opt_einsum_flops, std::stod(row["naive_flops"]));
    std::string path;
    for (auto [a, b] : p.path())
      path += "(" + std::to_string(a) + "," + std::to_string(b) + ")";
    if (path.empty()) path = "(0,)";
    std::printf(
        "line %2d %-27s ours (%-9s) %-22s %-11.6g | theirs (%-10s) %-24s %-11.6g | %8.3fx"
        " | naive %.6g = %.6g | ein flops %lld\n",
        row.line, row["equation"].c_str(), strategy_name(p.strategy_used), path.c_str(),
        p.opt_einsum_flops, row["optimize"].c_str(), row["path"].c_str(), theirs,
        theirs / p.opt_einsum_flops, p.naive_opt_einsum_flops, std::stod(row["naive_flops"]),
        static_cast<long long>(p.flops));
    ++planned;
  }
  std::printf("%d rows planned, %d error rows\n", planned, errors);
  EXPECT_GT(planned, 15);
  EXPECT_EQ(errors, 3);
}

TEST(ContractionPlan, MatmulCountsTwoPerMultiplyAdd) {
  // ij,jk->ik with i=64, j=128, k=32: 2·64·128·32 (the table's "matmul = 2*I*J*K").
  const ContractionPlan p = plan_contraction({{0, 1}, {1, 2}}, {0, 2}, {64, 128, 32});
  ASSERT_EQ(p.steps.size(), 1u);
  EXPECT_EQ(p.flops, 2 * 64 * 128 * 32);
  EXPECT_EQ(p.steps[0].summed_axes, std::vector<int>{1});
  EXPECT_EQ(p.steps[0].result_axes, (std::vector<int>{0, 2}));
  EXPECT_EQ(p.largest_intermediate, 64 * 32);
}

TEST(ContractionPlan, HadamardAndOuterCountOnePerProduct) {
  EXPECT_EQ(plan_contraction({{0, 1}, {0, 1}}, {0, 1}, {8, 4}).flops, 32);
  EXPECT_EQ(plan_contraction({{0}, {1}}, {0, 1}, {8, 4}).flops, 32);
}

TEST(ContractionPlan, OneOperand) {
  // ij->: one add per element in ours, opt_einsum counts 2; no steps.
  const ContractionPlan sum = plan_contraction({{0, 1}}, {}, {64, 64});
  EXPECT_TRUE(sum.steps.empty());
  EXPECT_EQ(sum.flops, 64 * 64);
  EXPECT_EQ(sum.opt_einsum_flops, 2 * 64 * 64);
  // ii->i: a diagonal is a view, free in ours.
  const ContractionPlan diag = plan_contraction({{0, 0}}, {0}, {64});
  EXPECT_EQ(diag.flops, 0);
  EXPECT_EQ(diag.opt_einsum_flops, 64);
}

TEST(ContractionPlan, LoneAxesAreSummedFirst) {
  // a s, a -> : s is summed out of operand 0 (2·5 adds... one per element: 10), then a dot.
  const ContractionPlan p = plan_contraction({{0, 1}, {0}}, {}, {2, 5});
  ASSERT_EQ(p.steps.size(), 1u);
  EXPECT_EQ(p.steps[0].summed_axes, std::vector<int>{0});
  EXPECT_EQ(p.flops, 10 + 2 * 2);
}

TEST(ContractionPlan, RejectsBadInput) {
  EXPECT_THROW(plan_contraction({}, {}, {}), std::invalid_argument);
  EXPECT_THROW(plan_contraction({{0, 5}}, {}, {2}), std::invalid_argument);
  EXPECT_THROW(plan_contraction({{0}}, {0}, {-1}), std::invalid_argument);
  EXPECT_THROW(plan_contraction({{0}, {0}}, {1}, {2, 3}), std::invalid_argument);
  EXPECT_THROW(plan_contraction({{0}, {0}}, {0, 0}, {2}), std::invalid_argument);
}

TEST(ContractionPlan, OptimalEqualsBruteForce) {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 300; ++trial) {
    const Network net = random_network(rng, 2 + trial % 4, 2 + trial % 5, 7);
    SCOPED_TRACE("trial " + std::to_string(trial));
    const ContractionPlan p = plan(net, PathStrategy::optimal);
    expect_valid(p, net);
    std::vector<AxisSet> sets = to_sets(net);
    const AxisSet out(net.output.begin(), net.output.end());
    const double base = reduce_lone_axes(sets, out, net.sizes);
    EXPECT_EQ(p.opt_einsum_flops, base + brute_force(sets, out, net.sizes));
  }
}

TEST(ContractionPlan, DynamicProgrammingEqualsOptimal) {
  std::mt19937 rng(99);
  for (int trial = 0; trial < 300; ++trial) {
    const Network net = random_network(rng, 2 + trial % 5, 3 + trial % 6, 9);
    SCOPED_TRACE("trial " + std::to_string(trial));
    const ContractionPlan dp = plan(net, PathStrategy::dynamic_programming);
    expect_valid(dp, net);
    EXPECT_EQ(dp.strategy_used, PathStrategy::dynamic_programming);
    EXPECT_EQ(dp.opt_einsum_flops, plan(net, PathStrategy::optimal).opt_einsum_flops);
  }
}

TEST(ContractionPlan, DynamicProgrammingOnLargerNetworks) {
  // Past 8 operands DP only joins connected halves; it must stay valid, never worse than
  // greedy here, and handle disconnected networks (two chains).
  std::mt19937 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    Network net = random_network(rng, 9 + trial % 6, 10 + trial % 8, 6);
    SCOPED_TRACE("trial " + std::to_string(trial));
    const ContractionPlan dp = plan(net, PathStrategy::dynamic_programming);
    expect_valid(dp, net);
  }
  Network two;
  for (int i = 0; i < 6; ++i)
    two.operands.push_back({i, i + 1});
  for (int i = 10; i < 16; ++i)
    two.operands.push_back({i, i + 1});
  two.output = {0, 6, 10, 16};
  two.sizes.assign(17, 3);
  expect_valid(plan(two, PathStrategy::dynamic_programming), two);
  EXPECT_LE(plan(two, PathStrategy::dynamic_programming).opt_einsum_flops,
            plan(two, PathStrategy::greedy).opt_einsum_flops);
}

TEST(ContractionPlan, GreedyIsValid) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    const Network net = random_network(rng, 2 + trial % 14, 2 + trial % 12, 8);
    SCOPED_TRACE("trial " + std::to_string(trial));
    const ContractionPlan g = plan(net, PathStrategy::greedy);
    expect_valid(g, net);
    if (net.operands.size() <= 6) {
      EXPECT_GE(g.opt_einsum_flops, plan(net, PathStrategy::optimal).opt_einsum_flops);
    }
  }
}

TEST(ContractionPlan, AutomaticPicksByOperandCount) {
  auto chain = [](int n) {
    Network net;
    for (int i = 0; i < n; ++i)
      net.operands.push_back({i, i + 1});
    net.output = {0, n};
    for (int i = 0; i <= n; ++i)
      net.sizes.push_back(10 + (i * 7) % 13);
    return net;
  };
  EXPECT_EQ(plan(chain(4), PathStrategy::automatic).strategy_used, PathStrategy::optimal);
  EXPECT_EQ(plan(chain(5), PathStrategy::automatic).strategy_used,
            PathStrategy::dynamic_programming);
  EXPECT_EQ(plan(chain(16), PathStrategy::automatic).strategy_used,
            PathStrategy::dynamic_programming);
  EXPECT_EQ(plan(chain(17), PathStrategy::automatic).strategy_used, PathStrategy::greedy);
}

// Under ASan (a build with EIN_SANITIZE=address,...) every memory access is checked: the time
// budgets below are about the planner's algorithm, so they scale by the instrumentation's cost.
#if defined(__SANITIZE_ADDRESS__)
constexpr double kSanitizerSlowdown = 10;
#else
constexpr double kSanitizerSlowdown = 1;
#endif

TEST(ContractionPlan, TwentyOperandChainPlansQuickly) {
  Network net;
  for (int i = 0; i < 20; ++i)
    net.operands.push_back({i, i + 1});
  net.output = {0, 20};
  for (int i = 0; i <= 20; ++i)
    net.sizes.push_back(8 + (i * 5) % 17);
  for (PathStrategy s : {PathStrategy::automatic, PathStrategy::dynamic_programming}) {
    // The best of three runs: the budget is about the planner, not a busy neighbour (a loaded
    // two-core CI machine once took 103 ms for one run).
    double ms = 1e9;
    ContractionPlan p;
    for (int run = 0; run < 3; ++run) {
      const auto start = std::chrono::steady_clock::now();
      p = plan(net, s);
      ms = std::min(
          ms, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                  .count());
    }
    std::printf("20-operand chain, %s: %.2f ms (best of 3), %zu steps, opt_flops %.6g\n",
                strategy_name(s), ms, p.steps.size(), p.opt_einsum_flops);
    expect_valid(p, net);
    EXPECT_LT(ms, 100.0 * kSanitizerSlowdown);
  }
}

TEST(ContractionPlan, SixteenOperandDenseNetworkPlansInReasonableTime) {
  // The worst case for automatic's DP: every subset connected (a shared "batch" axis).
  std::mt19937 rng(3);
  Network net = random_network(rng, 16, 12, 4);
  for (auto& op : net.operands)
    op.push_back(12);
  net.sizes.push_back(2);
  const auto start = std::chrono::steady_clock::now();
  const ContractionPlan p = plan(net, PathStrategy::automatic);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::printf("16-operand dense network, dp: %.1f ms\n", ms);
  expect_valid(p, net);
  EXPECT_LT(ms, 5000.0 * kSanitizerSlowdown);
}

}  // namespace
}  // namespace ein
