// The driver of the pattern-replacing passes (compiler/fuse/rewrite.h), on hand-made graphs
// with a toy pattern: a reduce `at` reading a map `a` (the chain's interior) becomes one
// permute of a's input. Every site is placed in one copy of the graph; a chain that something
// outside it reads (another node, the caller through an output, another site's chain) stays
// unfused, and so does a site overlapping an earlier one.
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "compiler/fuse/rewrite.h"

namespace ein {
namespace {

int add(Graph& g, GraphOp op, std::vector<int> inputs) {
  GraphNode n;
  n.op = op;
  n.inputs = std::move(inputs);
  n.shape = {4};
  if (op == GraphOp::map) n.attr = MapAttr{};
  if (op == GraphOp::input) n.attr = InputAttr{};
  return g.add(std::move(n));
}

/// A node of op `end` reading a map.
std::function<bool(const Graph&, int)> reads_a_map(GraphOp end) {
  return [end](const Graph& g, int i) {
    const GraphNode& n = g.nodes[i];
    return n.op == end && n.inputs.size() == 1 && g.nodes[n.inputs[0]].op == GraphOp::map;
  };
}

detail::Replacements replace_pairs(const Graph& g, GraphOp end = GraphOp::reduce) {
  return detail::replace_all(g, reads_a_map(end), [](const Graph& graph, int at, std::string&) {
    detail::Site site;
    site.at = at;
    const int a = graph.nodes[at].inputs[0];
    site.interior = {a};
    const int x = graph.nodes[a].inputs[0];
    site.emit = [x](const std::vector<int>& id, const detail::AddNode& add_node, const Graph&) {
      GraphNode p;
      p.op = GraphOp::permute;
      p.inputs = {id[x]};
      p.shape = {4};
      p.attr = PermuteAttr{{0}};
      return add_node(std::move(p), -1);
    };
    return std::optional<detail::Site>(std::move(site));
  });
}

int count(const Graph& g, GraphOp op) {
  int n = 0;
  for (const GraphNode& node : g.nodes) n += node.op == op;
  return n;
}

TEST(ReplaceAll, PlacesEverySiteOfADeepChainInOnePass) {
  // x -> (a -> at) x 300: 300 sites, each reading the last one's replacement.
  Graph g;
  int x = add(g, GraphOp::input, {});
  for (int layer = 0; layer < 300; ++layer) x = add(g, GraphOp::reduce, {add(g, GraphOp::map, {x})});
  g.outputs = {x};
  const detail::Replacements r = replace_pairs(g);
  EXPECT_EQ(r.replaced, 300);
  EXPECT_TRUE(r.misses.empty());
  ASSERT_EQ(r.graph.nodes.size(), 301u);  // the input, then one permute per site
  EXPECT_EQ(count(r.graph, GraphOp::permute), 300);
  for (size_t i = 1; i < r.graph.nodes.size(); ++i) {
    EXPECT_EQ(r.graph.nodes[i].inputs, std::vector<int>{static_cast<int>(i) - 1});
    EXPECT_EQ(r.source[i], -1);  // what the emitter said each new node stands for
  }
  EXPECT_EQ(r.graph.outputs, std::vector<int>{300});
}

TEST(ReplaceAll, AChainReadElsewhereStaysAndTheOthersAreReplaced) {
  Graph g;
  const int x = add(g, GraphOp::input, {});
  const int at1 = add(g, GraphOp::reduce, {add(g, GraphOp::map, {x})});
  const int a2 = add(g, GraphOp::map, {at1});
  const int at2 = add(g, GraphOp::reduce, {a2});
  const int other = add(g, GraphOp::cast, {a2});  // reads the second chain's interior
  g.outputs = {at2, other};
  const detail::Replacements r = replace_pairs(g);
  EXPECT_EQ(r.replaced, 1);
  ASSERT_EQ(r.misses.size(), 1u);
  EXPECT_EQ(r.misses[0].first, at2);
  EXPECT_EQ(r.misses[0].second, "node %" + std::to_string(a2) + " of the chain is read elsewhere");
  EXPECT_EQ(count(r.graph, GraphOp::permute), 1);
  EXPECT_EQ(count(r.graph, GraphOp::map), 1);  // a2, as it was
  EXPECT_EQ(count(r.graph, GraphOp::reduce), 1);  // at2
}

TEST(ReplaceAll, AChainThatIsAnOutputStays) {
  Graph g;
  const int x = add(g, GraphOp::input, {});
  const int a = add(g, GraphOp::map, {x});
  const int at = add(g, GraphOp::reduce, {a});
  g.outputs = {at, a};  // the caller reads the interior
  const detail::Replacements r = replace_pairs(g);
  EXPECT_EQ(r.replaced, 0);
  ASSERT_EQ(r.misses.size(), 1u);
  EXPECT_EQ(r.misses[0].first, at);
  EXPECT_EQ(r.graph.nodes.size(), g.nodes.size());  // as it was
}

TEST(ReplaceAll, ChainsSharingTheirInteriorBothStay) {
  // Two products of the same probabilities: fusing both would make them twice.
  Graph g;
  const int x = add(g, GraphOp::input, {});
  const int a = add(g, GraphOp::map, {x});
  const int at1 = add(g, GraphOp::reduce, {a});
  const int at2 = add(g, GraphOp::reduce, {a});
  g.outputs = {at1, at2};
  const detail::Replacements r = replace_pairs(g);
  EXPECT_EQ(r.replaced, 0);
  ASSERT_EQ(r.misses.size(), 2u);
  EXPECT_EQ(r.misses[0].first, at1);
  EXPECT_EQ(r.misses[1].first, at2);
  EXPECT_EQ(r.graph.nodes.size(), g.nodes.size());
}

TEST(ReplaceAll, DeadReadersDoNotKeepAChain) {
  Graph g;
  const int x = add(g, GraphOp::input, {});
  const int a = add(g, GraphOp::map, {x});
  const int at = add(g, GraphOp::reduce, {a});
  add(g, GraphOp::cast, {a});  // nothing reads it: dropped with the chain
  g.outputs = {at};
  const detail::Replacements r = replace_pairs(g);
  EXPECT_EQ(r.replaced, 1);
  EXPECT_TRUE(r.misses.empty());
  EXPECT_EQ(r.graph.nodes.size(), 2u);
}

TEST(ReplaceAll, ASiteOverlappingAnEarlierOneStays) {
  // Maps reading maps: m2 (chain m1) and m3 (chain m2, the first site's end).
  Graph g;
  const int x = add(g, GraphOp::input, {});
  const int m1 = add(g, GraphOp::map, {x});
  const int m2 = add(g, GraphOp::map, {m1});
  const int m3 = add(g, GraphOp::map, {m2});
  g.outputs = {m3};
  const detail::Replacements r = replace_pairs(g, GraphOp::map);
  EXPECT_EQ(r.replaced, 1);
  ASSERT_EQ(r.misses.size(), 1u);
  EXPECT_EQ(r.misses[0].first, m3);
  EXPECT_EQ(r.misses[0].second,
            "node %" + std::to_string(m2) + " of the chain is in the chain of another match");
  ASSERT_EQ(r.graph.nodes.size(), 3u);  // x, the permute for m2, m3 reading it
  EXPECT_EQ(r.graph.nodes[1].op, GraphOp::permute);
  EXPECT_EQ(r.graph.nodes[2].inputs, std::vector<int>{1});
  EXPECT_EQ(r.source, (std::vector<int>{x, -1, m3}));
}

}  // namespace
}  // namespace ein
