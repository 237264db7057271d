// Random graphs of maps (with broadcasts by axis name), reductions, permutes and slices, with
// values read by several consumers and several outputs: the fused graph must give the unfused
// graph's values. This exercises placement, merging and sibling alignment on shapes nobody
// wrote by hand. Deterministic: the seeds are fixed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "exec/execute.h"
#include "compiler/fuse/fuse.h"
#include "compiler/fuse/fusion_report.h"
#include "compiler/graph/graph_builder.h"
#include "api/ops/ops_test_support.h"

namespace ein {
namespace {

using Axes = std::vector<std::string>;

/// The shared GraphBuilder plus a name per dim of every node, so broadcasts line up by name.
struct RandomGraph {
  explicit RandomGraph(uint32_t seed)
      : rng(seed),
        b(fmt::format("random graph {}", seed)),
        sizes{{"a", 3}, {"b", 4}, {"c", 5}, {"d", 2}} {}

  std::mt19937 rng;
  GraphBuilder b;
  std::vector<Axes> axes;                // per node: its dims' names
  std::map<std::string, int64_t> sizes;  // per axis name
  std::vector<int64_t> size_of(const Axes& a) const {
    std::vector<int64_t> s;
    for (const std::string& n : a)
      s.push_back(sizes.at(n));
    return s;
  }
  int pick(int below) { return std::uniform_int_distribution<int>(0, below - 1)(rng); }

  /// Records the dim names of node `id` (a new node, or x itself when nothing was added).
  int named(int id, Axes a) {
    if (id == static_cast<int>(axes.size())) axes.push_back(std::move(a));
    return id;
  }

  int input(Axes a) { return named(b.input(size_of(a)), a); }

  int map(const std::vector<int>& ins) {
    Axes out;
    for (int i : ins)
      for (const std::string& x : axes[i])
        if (std::find(out.begin(), out.end(), x) == out.end()) out.push_back(x);
    std::vector<std::vector<int>> dims;
    for (int i : ins) {
      std::vector<int> d;
      for (const std::string& x : axes[i])
        d.push_back(static_cast<int>(std::find(out.begin(), out.end(), x) - out.begin()));
      dims.push_back(std::move(d));
    }
    auto k = std::make_shared<Kernel>();
    k->name = "map";
    int v = k->load(0);
    const ScalarOp unary[] = {ScalarOp::tanh, ScalarOp::sigmoid, ScalarOp::sin, ScalarOp::square};
    if (ins.size() == 2) {
      const ScalarOp binary[] = {ScalarOp::add, ScalarOp::mul, ScalarOp::sub, ScalarOp::maximum};
      v = k->apply(binary[pick(4)], v, k->load(1));
    }
    v = k->apply(unary[pick(4)], v);
    k->body = k->result = v;
    const int id = b.map(ins, dims, size_of(out), DType::f32, std::move(k));
    return named(id, std::move(out));
  }

  int reduce(int x) {
    const Axes& in = axes[x];
    const Reduction r = std::vector<Reduction>{Reduction::sum, Reduction::max, Reduction::mean,
                                               Reduction::logsumexp}[pick(4)];
    std::vector<bool> reduced(in.size(), false);
    const int mask = 1 + pick((1 << in.size()) - 1);
    Axes kept;
    for (size_t d = 0; d < in.size(); ++d) {
      reduced[d] = (mask >> d) & 1;
      if (!reduced[d]) kept.push_back(in[d]);
    }
    return named(b.reduce(x, r, std::move(reduced)), std::move(kept));
  }

  /// x[1:n-1] along one of its dims of size > 2: a new axis name for the shorter dim.
  int slice(int x) {
    Axes a = axes[x];
    const int d = pick(static_cast<int>(a.size()));
    const int64_t n = sizes.at(a[d]);
    if (n <= 2) return x;
    const std::string name = fmt::format("{}{}", a[d], b.graph().nodes.size());
    sizes[name] = n - 2;
    a[d] = name;
    return named(b.slice(x, d, 1, n - 1), std::move(a));
  }

  /// x with a new leading axis `d` of stride 0 (a broadcast view), when x has no `d`.
  int broadcast(int x) {
    const Axes& in = axes[x];
    if (std::find(in.begin(), in.end(), "d") != in.end()) return x;
    std::vector<int> positions(in.size());
    std::iota(positions.begin(), positions.end(), 1);
    Axes out{"d"};
    out.insert(out.end(), in.begin(), in.end());
    const int id = b.broadcast(x, positions, size_of(out));
    return named(id, std::move(out));
  }

  int permute(int x) {
    Axes a = axes[x];
    std::vector<int64_t> order(a.size());
    for (size_t i = 0; i < order.size(); ++i)
      order[i] = static_cast<int64_t>(i);
    std::shuffle(order.begin(), order.end(), rng);
    Axes out;
    for (int64_t o : order)
      out.push_back(a[o]);
    return named(b.permute(x, order), std::move(out));
  }
};

Graph random_graph(uint32_t seed) {
  RandomGraph r(seed);
  const std::vector<Axes> shapes = {
      {"a", "b", "c"}, {"b", "c"}, {"a", "c"}, {"c"}, {"a", "d", "c"}};
  const int inputs = 2 + r.pick(2);
  for (int i = 0; i < inputs; ++i)
    r.input(shapes[r.pick(static_cast<int>(shapes.size()))]);
  for (int step = 0; step < 9; ++step) {
    const int count = static_cast<int>(r.axes.size());
    const int x = r.pick(count), y = r.pick(count);
    switch (r.pick(7)) {
      case 0:
      case 1:
        r.map({x, y});
        break;
      case 2:
        r.map({x});
        break;
      case 3:
        if (!r.axes[x].empty()) r.reduce(x);
        break;
      case 4:
        if (!r.axes[x].empty()) r.slice(x);
        break;
      case 5:
        r.broadcast(x);
        break;
      default:
        if (r.axes[x].size() > 1) r.permute(x);
    }
  }
  const int last = static_cast<int>(r.axes.size()) - 1;
  std::vector<int> outputs{last};
  const int other = r.pick(last + 1);
  if (other != last && r.b.node(other).op != GraphOp::input) outputs.push_back(other);
  return r.b.finish(outputs);
}

TEST(FuseRandomGraphs, FusedEqualsUnfused) {
  int kernels = 0, nodes = 0;
  // EIN_FUSE_RANDOM_GRAPHS=N runs N graphs (60 by default; 600 passed when written).
  const char* env = std::getenv("EIN_FUSE_RANDOM_GRAPHS");
  const uint32_t graphs = env ? static_cast<uint32_t>(std::stoul(env)) : 60;
  for (uint32_t seed = 1; seed <= graphs; ++seed) {
    const Graph g = random_graph(seed);
    const Graph fused = fuse(g);
    kernels += count_kernels(fused);
    for (const GraphNode& n : g.nodes)
      nodes += n.op == GraphOp::map || n.op == GraphOp::reduce;
    std::vector<Tensor> xs;
    for (const GraphNode& n : g.nodes)
      if (n.op == GraphOp::input)
        xs.push_back(testing::random_tensor(
            n.shape, DType::f32, seed * 10 + xs.size(),
            seed % 2 ? testing::Layout::column_major : testing::Layout::strided));
    const std::vector<Tensor> want = execute(g, xs), got = execute(fused, xs);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      testing::expect_close(
          got[i], testing::to_array(want[i]), testing::tolerance_for(DType::f32, 60),
          fmt::format("seed {} output {}\n{}\n{}", seed, i, dump(g), fusion_report(g, fused)));
  }
  std::printf("random graphs: %d maps and reductions -> %d kernels\n", nodes, kernels);
}

}  // namespace
}  // namespace ein
